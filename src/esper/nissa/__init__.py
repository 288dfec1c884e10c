"""Nissa: the telemetry hub and its backends (JSONL directory, in-memory). Lossless and ordered.

Events are plain values: the package loads no torch, torchvision or numpy.
"""

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
