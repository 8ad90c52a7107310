"""Edge Pruning (Bhaskar, Wettig, Friedman, Chen, NeurIPS 2024): hard-concrete masks over a graph's edges."""
