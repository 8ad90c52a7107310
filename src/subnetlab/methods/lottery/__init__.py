"""BERT lottery tickets (Prasanna et al. 2020): magnitude and importance pruning, controls, re-fine-tuning."""
