"""tripwire: a refactor gate for PyTorch training loops.

Trainer-agnostic guardrails: sync-point accounting in named hot-path regions (`tripwire.sync`), bitwise
reproducibility digests and trajectories (`tripwire.digest`), telemetry event-count snapshots
(`tripwire.telemetry`), CUDA-event timing (`tripwire.timing`) and benchmark comparison (`tripwire.bench`).
tripwire never imports the trainer it guards; tests hand it what it checks.
"""

__version__ = "0.1.0"
