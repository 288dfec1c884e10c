"""simic.training: the vectorized training loop, split into small modules (see vectorized_trainer.py)."""
