"""simic.training: the vectorized training loop (trainer.py), its wiring and helpers; see docs/architecture.md."""
