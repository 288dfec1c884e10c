"""Hot-path regions: the only part of tripwire a trainer imports (`from tripwire.sync import hot_path`).

`hot_path("name")` (a context manager or decorator) names a region; `carried(fn)` gives work run on another
thread the submitting thread's regions; `ignore_syncs`, `sync_kind` and `record_sync` adjust what is counted.
With no `tripwire.sync.counter.SyncCounter` active, entering a region costs one global check. This module
imports no torch and none of the gates (counter, hooks, budgets).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import ContextDecorator
from types import TracebackType
from typing import Any, TypeVar

from tripwire.sync.state import _LOCAL, _STATE, OUTSIDE, SyncEvent, deliver

__all__ = ["OUTSIDE", "SyncEvent", "carried", "hot_path", "ignore_syncs", "record_sync", "sync_kind"]

T = TypeVar("T")


class hot_path(ContextDecorator):
    """Name a hot-path region: `with hot_path("train_pass"):` or `@hot_path("train_pass")`.

    Names must be non-empty and contain no "/" (the separator of `SyncEvent.region_path`).
    An instance may be kept at module level and re-entered, recursively too.
    """

    def __init__(self, name: str) -> None:
        if not name or "/" in name:
            raise ValueError(f"hot_path name must be non-empty and contain no '/': {name!r}")
        self.name = name

    def __enter__(self) -> hot_path:
        if _STATE.active:
            _LOCAL.regions.append((self, self.name))
            with _STATE.lock:
                _STATE.pushed += 1
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if _STATE.pushed:
            regions = _LOCAL.regions
            if regions and regions[-1][0] is self:
                regions.pop()
                with _STATE.lock:
                    _STATE.pushed -= 1


class ignore_syncs(ContextDecorator):
    """Do not record syncs made inside (test bookkeeping such as digests; never trainer code).

    While a counter is active the counting modes also come off this thread's mode stacks inside
    (`hooks.take_modes_off`), so bookkeeping runs at a bare call's cost instead of paying a trip through Python
    for every torch call it makes; nothing inside is marked or classified either (a tensor made inside and moved
    to a device outside counts as one the counter never saw being made). Nested inside suppressed code (another
    `ignore_syncs`, a counted call) it only suppresses: the outermost one took the modes off, and a digest enters
    one per tensor."""

    def __enter__(self) -> None:
        _LOCAL.suppress += 1
        if _STATE.active and _LOCAL.suppress == 1:  # nested inside another: the outer one took the modes off
            from tripwire.sync import hooks as _sync_hooks

            _LOCAL.modes_off.append(_sync_hooks.take_modes_off())
        else:
            _LOCAL.modes_off.append(None)

    def __exit__(self, *exc_info: object) -> None:
        taken = _LOCAL.modes_off.pop()
        try:
            if taken is not None:
                from tripwire.sync import hooks as _sync_hooks

                _sync_hooks.put_modes_back(taken)
        finally:
            _LOCAL.suppress -= 1


class sync_kind(ContextDecorator):
    """Record every sync made inside under `kind` (e.g. the timer's end-event wait as `timer_sync`)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._previous: list[str | None] = []

    def __enter__(self) -> None:
        self._previous.append(_LOCAL.label)
        _LOCAL.label = self.kind

    def __exit__(self, *exc_info: object) -> None:
        _LOCAL.label = self._previous.pop()


def carried(fn: Callable[..., T]) -> Callable[..., T]:
    """Wrap `fn` to run on another thread as if it ran here: inside this thread's hot-path regions, with its
    syncs counted by the active counters (the counting modes are pushed on the worker thread for the call).

    Capture happens now, on the submitting thread; call the result on any thread. With no counter active
    the wrapper only calls `fn`. The work counts only under the counting it was wrapped in (or, wrapped while
    none ran, the one running when it starts): a thread one recording starts and leaves running, or a pool task it
    leaves queued, counts nothing in a later one, whose regions it never ran in.
    """
    regions = list(_LOCAL.regions)
    suppress, label = _LOCAL.suppress, _LOCAL.label
    given = _STATE.generation if _STATE.active else None

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> T:
        if not _STATE.active or given not in (None, _STATE.generation):
            return fn(*args, **kwargs)  # pass-through
        from tripwire.sync import hooks as _sync_hooks

        local = _LOCAL
        saved = (local.regions, local.suppress, local.label, local.generation)
        local.regions, local.suppress, local.label, local.generation = list(regions), suppress, label, _STATE.generation
        try:
            with _sync_hooks.thread_modes(implicit=any(c.implicit for c in _STATE.counters)):
                return fn(*args, **kwargs)  # pass-through
        finally:
            local.regions, local.suppress, local.label, local.generation = saved

    return run


def record_sync(kind: str) -> None:
    """Record a sync tripwire cannot see (C extensions, custom kernels, CPU timer fallbacks)."""
    if _STATE.active:
        deliver(kind)


def _current_regions() -> list[str]:
    """The current thread's region names, outermost first (tests and diagnostics)."""
    return [name for _, name in _LOCAL.regions]
