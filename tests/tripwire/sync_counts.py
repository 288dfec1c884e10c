"""What a counter counted while a test's body ran, by kind: the one question most sync tests ask; and the skip of a
test about a CPU run's own copies where this process has made it a GPU run."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from tripwire.sync import hot_path
from tripwire.sync.counter import SyncCounter


def counted(body: Callable[[], object]) -> dict[str, int]:
    """Run `body` under a counter in a hot-path region; the syncs counted there, by kind."""
    with SyncCounter() as counter, hot_path("region"):
        body()
    return counter.counts_by_kind("region")


def cpu_run() -> None:
    """Skip where this process initialized CUDA: there a copy to the host is a CPU tensor of its own, copied for real,
    and a CPU run's copy of its own (`explicit.host_alias`) is never made. A GPU machine that has not initialized
    CUDA in this process runs the test as a CPU run."""
    if torch.cuda.is_initialized():
        pytest.skip("CUDA is initialized in this process: `.cpu()` copies for real, no CPU run's copy to check")
