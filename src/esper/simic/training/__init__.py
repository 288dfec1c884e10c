"""simic.training: the vectorized training loop (trainer.py), its wiring and helpers; see docs/architecture.md.

The package itself imports nothing (no torch, torchvision or numpy); import the module you need.
"""
