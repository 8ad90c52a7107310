"""Fine-tuning a model on a task, with checkpoints and training curves."""
