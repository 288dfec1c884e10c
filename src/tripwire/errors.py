"""Exceptions raised by tripwire; every message names the file, region, checkpoint or flag at fault.

How to read them: `TripwireError` subclasses are usage or input problems (a malformed golden or
events file, a timer used out of order) and say what to fix. The `*Failure` classes subclass
`AssertionError` so pytest reports them as test failures; their message is the guardrail's full report
(which region, call site, checkpoint or tensor changed) and no traceback is needed to act on it.
"""

from __future__ import annotations


class TripwireError(Exception):
    """Base class for tripwire usage and input errors."""


class TelemetryParseError(TripwireError, ValueError):
    """An events file has a malformed or partial line; the message is `path:line: what is wrong`."""


class GoldenFileError(TripwireError, ValueError):
    """A golden file (sync budget, trajectory) is missing, unreadable or in an unknown format."""


class TimerStateError(TripwireError, RuntimeError):
    """A timer was stopped without being started, or started twice."""


class GuardrailFailure(AssertionError):
    """Base class for guardrail failures; the message is the full, human-readable report."""


class SyncBudgetExceeded(GuardrailFailure):
    """A hot-path region made more host syncs than its budget, or a region has no budget."""


class TrajectoryDivergence(GuardrailFailure):
    """A recorded trajectory differs from its golden; the message names the first divergence."""
