"""What a counter counted while a test's body ran, by kind: the one question most sync tests ask."""

from __future__ import annotations

from collections.abc import Callable

from tripwire.sync import hot_path
from tripwire.sync.counter import SyncCounter


def counted(body: Callable[[], object]) -> dict[str, int]:
    """Run `body` under a counter in a hot-path region; the syncs counted there, by kind."""
    with SyncCounter() as counter, hot_path("region"):
        body()
    return counter.counts_by_kind("region")
