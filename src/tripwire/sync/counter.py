"""SyncCounter: record every host sync while active, per region, with call sites.

Mark hot-path code with `hot_path("name")` (a context manager or decorator). While a `SyncCounter` is
active, every host synchronization is recorded as a `SyncEvent(kind, region, site, function)`:

- `region` is the INNERMOST enclosing `hot_path` name (`"<outside>"` when in none), so wrapping a
  region in a new outer region during a refactor does not move its budget; the full nesting is kept
  in `SyncEvent.region_path` (`"epoch/train_pass"`) for messages.
- `site` is `file:line` of the first frame outside torch and tripwire (relative to the counter's `root`, by
  default the working directory, when under it; else to the `sys.path` entry it is imported from) and
  `function` that frame's qualified name; `SyncEvent.text` is that line's source, which identifies a site
  across edits that move its line.
- `kind` says what synced: one of `tripwire.sync.kinds` (`item`, `to_cpu`, `to_device`, `cuda_synchronize`,
  `timer_sync`, `implicit:<op>`, `collective:<op>`, ...; `python -m tripwire.sync.kinds` prints the table).

Counts are device-independent: on CPU these are "would-sync" sites (`.item()` on a CPU tensor counts
the same as on CUDA), so one budget serves CPU CI and GPU runs. With no counter active, entering a
region costs one global check: no torch mode is pushed and no stack is walked.

Threads: torch function modes are thread-local, so tensor-method syncs are seen on the thread that
entered the counter and on threads running work wrapped with `carried(fn)`, which also gives the work the
submitting thread's regions (the engine's parallel env workers use it). With `threads=True` (the default) the
counter carries the threads and pool tasks the counted code starts itself the same way (`tripwire.sync.threads`),
so a `.item()` in a thread it starts is counted, not missed. Patched `synchronize` functions are seen on every
thread, references taken before the counter started included.

Budgets (`SyncBudget`, `check_budget`, `write_budget`) live in `tripwire.sync.budget`; see that module for
how to read a budget failure.
"""

from __future__ import annotations

import os
from collections import Counter
from types import TracebackType
from typing import TYPE_CHECKING, Any

from tripwire.sync.log import EventLog
from tripwire.sync.sites import via_label
from tripwire.sync.state import _STATE, clear_caches, new_recording, set_root, stale_sources

if TYPE_CHECKING:
    from tripwire.sync.crosscheck import CrossCheck, WarningSites
    from tripwire.sync.hooks import Installation

__all__ = ["SyncCounter"]


class SyncCounter(EventLog):
    """Record every host sync while active (`with SyncCounter() as counter:`); counters may nest.

    `implicit` (default on) also records data-dependent ops found by dispatch tags (`nonzero`, mask indexing, ...).
    `cuda_cross_check` additionally runs under `torch.cuda.set_sync_debug_mode("warn")` and counts torch's own sync
    warnings by the line that made each (`cuda_warning_sites`, `cross_check()`: `tripwire.sync.crosscheck`); without
    CUDA it is skipped and `cross_check_note` says why. `threads` (default on) counts what the threads and thread-
    pool tasks started while it is active do, under their starter's regions (`tripwire.sync.threads.ThreadWatch`);
    off, only this thread and `carried` work count.
    """

    def __init__(
        self,
        *,
        implicit: bool = True,
        cuda_cross_check: bool = False,
        root: str | os.PathLike[str] | None = None,
        threads: bool = True,
    ) -> None:
        self.implicit = implicit
        self.threads = threads
        # Call sites are named relative to this folder (the source root of the code under test); default: cwd.
        self.root = os.path.join(os.path.abspath(root), "") if root is not None else None
        self.cuda_cross_check = cuda_cross_check
        super().__init__()
        self.cuda_sync_warnings: int | None = None
        self.cuda_warning_sites: Counter[str] = Counter()
        self.cross_check_note = ""
        # the loop's files found edited since it imported them, when this counter stopped (`state.stale_sources`)
        self.stale_sources: list[str] = []
        self._installation: Installation | None = None
        self._warnings: WarningSites | None = None

    def __enter__(self) -> SyncCounter:
        from tripwire.sync import hooks as _sync_hooks

        if not _STATE.counters:
            set_root(self.root or os.path.join(os.getcwd(), ""))
            _STATE.generation += 1
        if not _STATE.active:  # no counter of either kind runs: a recording starts
            new_recording()
        self._installation = _sync_hooks.install(implicit=self.implicit)
        _STATE.counters.append(self)
        _STATE.active += 1
        if self.threads and not _THREAD_WATCH:
            from tripwire.sync.threads import ThreadWatch

            _THREAD_WATCH.append(ThreadWatch().__enter__())
        if self.cuda_cross_check:
            self._start_cross_check()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        from tripwire.sync import copies as _sync_copies
        from tripwire.sync import hooks as _sync_hooks
        from tripwire.sync import watched as _sync_watched

        try:
            if self.cuda_cross_check:
                self._stop_cross_check()
        finally:
            self.stale_sources = stale_sources()
            _STATE.active -= 1
            _STATE.counters.remove(self)
            if _THREAD_WATCH and not any(counter.threads for counter in _STATE.counters):
                _THREAD_WATCH.pop().__exit__(None, None, None)
            if not _STATE.counters:
                clear_caches()  # the caller lookup's caches hold code objects and frames
                _sync_copies.forget_sources()  # and the decoded instruction positions of the `.to` spellings read
                _sync_copies.forget_tensors()  # and which tensors were host memory: nothing of them outlives it
                _sync_watched.forget_callers()  # and the runners made on the loop's lines, with its modules' globals
            installation, self._installation = self._installation, None
            if installation is not None:
                _sync_hooks.uninstall(installation)

    def _start_cross_check(self) -> None:
        import torch

        if not torch.cuda.is_available():
            self.cross_check_note = "cuda_cross_check skipped: torch.cuda.is_available() is False"
            return
        from tripwire.sync.crosscheck import WarningSites

        self._warnings = WarningSites().__enter__()

    def _stop_cross_check(self) -> None:
        watched, self._warnings = self._warnings, None
        if watched is None:
            return
        watched.__exit__(None, None, None)
        self.cuda_sync_warnings = watched.total
        self.cuda_warning_sites = Counter(watched.sites)

    def cross_check(self) -> CrossCheck | None:
        """tripwire's count against torch's sync warnings, line by line (`tripwire.sync.crosscheck`); None when the
        cross-check did not run."""
        if self.cuda_sync_warnings is None:
            return None
        from tripwire.sync.crosscheck import compare

        return compare(self.events, self.cuda_warning_sites)

    def format(self) -> str:
        """A per-region table of counts and call sites, for logs and failure messages."""
        if not self.events:
            return "no host syncs recorded"
        lines = [f"{self.total} host syncs recorded:"]
        for region, count in self.counts_by_region().items():
            lines.append(f"  region {region!r}: {count}")
            for record in sorted(self.site_records(region), key=lambda r: (r.file, r.line, r.kind, r.via)):
                inside = f"  ({via_label(record.kind)}: {record.via})" if record.via else ""
                lines.append(f"    {record.site} in {record.function}  [{record.kind}×{record.count}]{inside}")
        check = self.cross_check()
        if check is not None:
            lines.append("  " + check.format().replace("\n", "\n  "))
        if self.cross_check_note:
            lines.append(f"  {self.cross_check_note}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"SyncCounter(total={self.total}, regions={self.counts_by_region()})"


def _active_counters() -> list[Any]:
    """Active counters, outermost first (diagnostics)."""
    return list(_STATE.counters)


# The one ThreadWatch, while any active counter counts threads (counters nest): started by the first such counter,
# stopped when no active counter wants it.
_THREAD_WATCH: list[Any] = []
