"""tripwire: a refactor gate for PyTorch training loops.

Trainer-agnostic guardrails: sync-point accounting in named hot-path regions (`hot_path`, `SyncCounter`,
`check_budget`), bitwise reproducibility trajectories that name the first diverging step
(`TrajectoryRecorder`, `compare_trajectories`, `capture_context`), telemetry snapshots of counts and payload
schemas (`reduce_events`), goldens under one baselines folder (`GoldenStore`), a static audit of sync-capable
calls (`audit_sync_calls`), portable CPU numerics for bitwise goldens across x86-64 machines (`portable_cpu_env`;
`VendorBoundOps` for the ops no pin fixes), and CUDA-event timing (`CUDATimer`). tripwire never imports the
trainer it guards: tests hand it what it checks, or a `Scenario` places its instruments on someone else's loop by
name, `record` runs it into a `Result` (a folder of files) and `compare_results` says what changed between two
results, where, what kind and how big.

The public names are below. `import tripwire` loads no torch and none of the gates: the errors, the CPU pin and
`hot_path` are imported here, the rest on first use (so the pytest plugin, and a `conftest.py` that sets the CPU
pin, run before torch starts, and a trainer that imports `tripwire.sync` loads nothing else).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tripwire.common.errors import GuardrailFailure, TripwireError
from tripwire.common.numerics import apply_portable_cpu_env, portable_cpu_env
from tripwire.sync import hot_path

if TYPE_CHECKING:  # imported on first use, so `import tripwire.sync` (a trainer's import) loads none of the gates
    from tripwire.bitwise.trajectory import Trajectory, TrajectoryRecorder, compare_trajectories
    from tripwire.bitwise.vendor_ops import VendorBoundOps
    from tripwire.common.context import capture_context
    from tripwire.gates.goldens import GoldenStore
    from tripwire.gates.static_audit import audit as audit_sync_calls
    from tripwire.outside.compare import compare_results
    from tripwire.outside.record import record
    from tripwire.outside.result import Result
    from tripwire.scenario import Scenario
    from tripwire.sync.budget import SyncBudget, check_budget
    from tripwire.sync.counter import SyncCounter
    from tripwire.telemetry.counts import TelemetryCounts, reduce_events
    from tripwire.timing import CUDATimer

__version__ = "0.5.0"

# The modules a user imports; every other module of tripwire is internal (its names may move in any release), as
# pytest's `_pytest` is beside `pytest`. tests/tripwire/test_public_api.py holds the docs and examples to it.
PUBLIC_MODULES = ("tripwire", "tripwire.scenario", "tripwire.sync", "tripwire.sync.kinds", "tripwire.timing")

_LAZY = {  # public name -> "module" or "module:attribute"
    "SyncBudget": "tripwire.sync.budget",
    "check_budget": "tripwire.sync.budget",
    "SyncCounter": "tripwire.sync.counter",
    "TelemetryCounts": "tripwire.telemetry.counts",
    "reduce_events": "tripwire.telemetry.counts",
    "audit_sync_calls": "tripwire.gates.static_audit:audit",
    "capture_context": "tripwire.common.context",
    "compare_results": "tripwire.outside.compare",
    "record": "tripwire.outside.record",
    "Result": "tripwire.outside.result",
    "Scenario": "tripwire.scenario",
    "GoldenStore": "tripwire.gates.goldens",
    "CUDATimer": "tripwire.timing",
    "Trajectory": "tripwire.bitwise.trajectory",
    "TrajectoryRecorder": "tripwire.bitwise.trajectory",
    "compare_trajectories": "tripwire.bitwise.trajectory",
    "VendorBoundOps": "tripwire.bitwise.vendor_ops",
}

__all__ = [
    "CUDATimer",
    "GoldenStore",
    "GuardrailFailure",
    "Result",
    "Scenario",
    "SyncBudget",
    "SyncCounter",
    "TelemetryCounts",
    "Trajectory",
    "TrajectoryRecorder",
    "TripwireError",
    "VendorBoundOps",
    "apply_portable_cpu_env",
    "audit_sync_calls",
    "capture_context",
    "check_budget",
    "compare_results",
    "compare_trajectories",
    "hot_path",
    "portable_cpu_env",
    "record",
    "reduce_events",
]


def __getattr__(name: str) -> Any:
    """The torch-importing public names, imported on first use."""
    if name in _LAZY:
        module, _, attribute = _LAZY[name].partition(":")
        value = getattr(importlib.import_module(module), attribute or name)
        globals()[name] = value  # cache: later lookups skip __getattr__
        return value
    raise AttributeError(f"module 'tripwire' has no attribute {name!r}")
