"""Nissa: the telemetry hub and its backends (JSONL directory, in-memory). Lossless and ordered."""

from esper.nissa.backends import DirectoryBackend, InMemoryBackend, TelemetryBackend, TelemetryPathError
from esper.nissa.hub import TelemetryHub, make_run_name

__all__ = [
    "DirectoryBackend",
    "InMemoryBackend",
    "TelemetryBackend",
    "TelemetryHub",
    "TelemetryPathError",
    "make_run_name",
]
