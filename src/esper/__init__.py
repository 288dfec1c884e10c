"""esper: a compact morphogenetic vectorized PPO trainer (the reference trainer of this project).

Importing the package itself loads no torch, torchvision or numpy; the subsystems load what they need.
"""

__all__ = ["__version__"]
__version__ = "0.1.0"
