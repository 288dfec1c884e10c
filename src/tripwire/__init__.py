"""tripwire: a refactor gate for PyTorch training loops.

Trainer-agnostic guardrails: sync-point accounting in named hot-path regions (`hot_path`, `SyncCounter`,
`check_budget`), bitwise reproducibility trajectories that name the first diverging step
(`TrajectoryRecorder`, `compare_trajectories`, `capture_context`), telemetry snapshots of counts and payload
schemas (`reduce_events`), goldens under one baselines folder (`GoldenStore`), a static audit of sync-capable
calls (`static_audit`), portable CPU numerics for bitwise goldens across x86-64 machines (`portable_cpu_env`),
and CUDA-event timing (`CUDATimer`). tripwire never imports the trainer it guards; tests hand it what it checks.

The public names are below. `import tripwire` loads no torch: the torch-free parts are imported here, the rest
on first use (so the pytest plugin, and a `conftest.py` that sets the CPU pin, run before torch starts).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tripwire.budget import SyncBudget, check_budget
from tripwire.errors import GuardrailFailure, TripwireError
from tripwire.numerics import apply_portable_cpu_env, portable_cpu_env
from tripwire.static_audit import audit as static_audit
from tripwire.sync import SyncCounter, hot_path
from tripwire.telemetry import TelemetryCounts, reduce_events

if TYPE_CHECKING:  # loaded on first use (they import torch); named here for readers and type checkers
    from tripwire.context import capture_context
    from tripwire.goldens import GoldenStore
    from tripwire.timing import CUDATimer
    from tripwire.trajectory import Trajectory, TrajectoryRecorder, compare_trajectories

__version__ = "0.1.0"

_LAZY = {
    "capture_context": "tripwire.context",
    "GoldenStore": "tripwire.goldens",
    "CUDATimer": "tripwire.timing",
    "Trajectory": "tripwire.trajectory",
    "TrajectoryRecorder": "tripwire.trajectory",
    "compare_trajectories": "tripwire.trajectory",
}

__all__ = [
    "CUDATimer",
    "GoldenStore",
    "GuardrailFailure",
    "SyncBudget",
    "SyncCounter",
    "TelemetryCounts",
    "Trajectory",
    "TrajectoryRecorder",
    "TripwireError",
    "apply_portable_cpu_env",
    "capture_context",
    "check_budget",
    "compare_trajectories",
    "hot_path",
    "portable_cpu_env",
    "reduce_events",
    "static_audit",
]


def __getattr__(name: str) -> Any:
    """The torch-importing public names, imported on first use."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tripwire' has no attribute {name!r}")
