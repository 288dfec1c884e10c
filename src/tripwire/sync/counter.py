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
- `kind` says what synced: `item`, `cpu`, `tolist`, `numpy`, `bool`, `float`, `int`, `index`,
  `complex`, `format` (printing a tensor), `contains`, `to_cpu`, `to_cpu_nonblocking`,
  `copy_to_cpu`, `cuda_synchronize`, `accelerator_synchronize`, `stream_synchronize`,
  `event_synchronize`, `timer_sync` (a `tripwire.timing.CUDATimer` reading its end event; it counts,
  because it is a real sync), `implicit:<op>` for ops whose output size or value depends on data
  (`nonzero`, boolean-mask indexing, `unique`, `_local_scalar_dense`, ...; see `tripwire.sync.hooks`), and
  `collective:<op>` for a `torch.distributed` collective or point-to-point call (`collective:all_gather`):
  every rank waits there for the others.

Counts are device-independent: on CPU these are "would-sync" sites (`.item()` on a CPU tensor counts
the same as on CUDA), so one budget serves CPU CI and GPU runs. With no counter active, entering a
region costs one global check: no torch mode is pushed and no stack is walked.

Threads: torch function modes are thread-local, so tensor-method syncs are seen on the thread that
entered the counter and on threads running work wrapped with `carried(fn)`, which also gives the work the
submitting thread's regions (the engine's parallel env workers use it). Patched `synchronize`
functions are seen on every thread. A reference taken
before the counter started (`sync = torch.cuda.synchronize`) bypasses the patch.

Budgets (`SyncBudget`, `check_budget`, `write_budget`) live in `tripwire.sync.budget`; see that module for
how to read a budget failure.
"""

from __future__ import annotations

import itertools
import os
import warnings
from collections import Counter
from types import TracebackType
from typing import TYPE_CHECKING, Any

from tripwire.sync.sites import SiteRecord, group_records, site_key
from tripwire.sync.state import _STATE, SyncEvent, clear_caches, relative_path, set_root

if TYPE_CHECKING:
    from tripwire.sync.hooks import Installation

__all__ = ["SyncCounter"]


class SyncCounter:
    """Record every host sync while active (`with SyncCounter() as counter:`); counters may nest.

    `implicit` (default on) also records data-dependent ops found by dispatch tags (`nonzero`, mask
    indexing, ...). `cuda_cross_check` additionally runs under `torch.cuda.set_sync_debug_mode("warn")`
    and counts torch's own sync warnings into `cuda_sync_warnings`; without CUDA it is skipped and
    `cross_check_note` says why.
    """

    def __init__(
        self, *, implicit: bool = True, cuda_cross_check: bool = False, root: str | os.PathLike[str] | None = None
    ) -> None:
        self.implicit = implicit
        # Call sites are named relative to this folder (the source root of the code under test); default: cwd.
        self.root = os.path.join(os.path.abspath(root), "") if root is not None else None
        self.cuda_cross_check = cuda_cross_check
        self.events: list[SyncEvent] = []
        self._marks: list[int] = []  # len(events) at each iteration boundary
        self._mark_mode = ""  # "end" (mark_iteration) or "start" (start_iteration)
        self.cuda_sync_warnings: int | None = None
        self.cuda_warning_sites: Counter[str] = Counter()
        self.cross_check_note = ""
        self._installation: Installation | None = None
        self._warning_log: list[warnings.WarningMessage] | None = None
        self._warning_guard: warnings.catch_warnings | None = None
        self._previous_debug_mode: int | None = None

    def __enter__(self) -> SyncCounter:
        from tripwire.sync import hooks as _sync_hooks

        if not _STATE.counters:
            set_root(self.root or os.path.join(os.getcwd(), ""))
        self._installation = _sync_hooks.install(implicit=self.implicit)
        _STATE.counters.append(self)
        _STATE.active += 1
        if self.cuda_cross_check:
            self._start_cross_check()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        from tripwire.sync import hooks as _sync_hooks

        try:
            if self.cuda_cross_check:
                self._stop_cross_check()
        finally:
            _STATE.active -= 1
            _STATE.counters.remove(self)
            if not _STATE.counters:
                clear_caches()  # the caller lookup's caches hold code objects and frames
            installation, self._installation = self._installation, None
            if installation is not None:
                _sync_hooks.uninstall(installation)

    def _start_cross_check(self) -> None:
        import torch

        if not torch.cuda.is_available():
            self.cross_check_note = "cuda_cross_check skipped: torch.cuda.is_available() is False"
            return
        self._previous_debug_mode = torch.cuda.get_sync_debug_mode()
        self._warning_guard = warnings.catch_warnings(record=True)
        self._warning_log = self._warning_guard.__enter__()
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")

    def _stop_cross_check(self) -> None:
        if self._warning_guard is None or self._warning_log is None:
            return
        import torch

        torch.cuda.set_sync_debug_mode(self._previous_debug_mode or 0)
        self._warning_guard.__exit__(None, None, None)
        recorded, self._warning_log, self._warning_guard = self._warning_log, None, None
        self.cuda_sync_warnings = 0
        for message in recorded:
            if "synchronizing CUDA operation" in str(message.message):
                self.cuda_sync_warnings += 1
                self.cuda_warning_sites[f"{relative_path(message.filename)}:{message.lineno}"] += 1
            else:
                warnings.warn_explicit(message.message, message.category, message.filename, message.lineno)

    @property
    def total(self) -> int:
        """Number of syncs recorded."""
        return len(self.events)

    def counts_by_region(self, *, by_path: bool = False) -> dict[str, int]:
        """Syncs per region (innermost name, or the full "outer/inner" path), sorted by region."""
        counts = Counter(event.region_path if by_path else event.region for event in self.events)
        return dict(sorted(counts.items()))

    def counts_by_kind(self, region: str | None = None) -> dict[str, int]:
        """Syncs per kind, over all regions or one."""
        counts = Counter(e.kind for e in self.events if region is None or e.region == region)
        return dict(sorted(counts.items()))

    def sites(self, region: str) -> Counter[str]:
        """Syncs per call site (`file:line`) within `region`."""
        return Counter(event.site for event in self.events if event.region == region)

    def sites_by_region(self) -> dict[str, Counter[str]]:
        """`sites(region)` for every region that synced."""
        return {region: self.sites(region) for region in self.counts_by_region()}

    def site_keys(self, region: str) -> Counter[str]:
        """Syncs per budget key (`file::function [kind]`, see `tripwire.sync.budget.site_key`) within `region`."""
        return Counter(site_key(e.site, e.function, e.kind) for e in self.events if e.region == region)

    def site_keys_by_region(self) -> dict[str, Counter[str]]:
        """`site_keys(region)` for every region that synced: what a budget file records."""
        return {region: self.site_keys(region) for region in self.counts_by_region()}

    def site_details(self, region: str) -> dict[str, tuple[str, Counter[str]]]:
        """Per call site in `region`: (function, syncs per kind); used by budget reports."""
        details: dict[str, tuple[str, Counter[str]]] = {}
        for event in self.events:
            if event.region == region:
                details.setdefault(event.site, (event.function, Counter()))[1][event.kind] += 1
        return details

    def mark_iteration(self) -> None:
        """Close one iteration of the user's loop (call it at the end of each step, epoch or update)."""
        self._mark("end")

    def start_iteration(self) -> None:
        """Open one iteration of the user's loop (call it at the start of each step, epoch or update); what ran
        before the first call is setup, not an iteration. Use this or `mark_iteration`, not both."""
        self._mark("start")

    def _mark(self, mode: str) -> None:
        if self._mark_mode not in ("", mode):
            raise ValueError("SyncCounter: use mark_iteration() (at ends) or start_iteration() (at starts), not both")
        self._mark_mode = mode
        self._marks.append(len(self.events))

    def segments(self) -> tuple[list[SyncEvent], list[list[SyncEvent]], list[SyncEvent]]:
        """`(setup, iterations, tail)`: the events before the first iteration, of each iteration, and after the last."""
        marks, events = self._marks, self.events
        if not marks:
            return list(events), [], []
        if self._mark_mode == "start":
            bounds = [*marks, len(events)]
            return events[: marks[0]], [events[a:b] for a, b in itertools.pairwise(bounds)], []
        bounds = [0, *marks]
        return [], [events[a:b] for a, b in itertools.pairwise(bounds)], events[marks[-1] :]

    def iteration_counts(self) -> list[dict[str, int]]:
        """Syncs per region in each iteration (see `mark_iteration` and `start_iteration`), in order: a count that
        grows with the iteration index, or one iteration that differs, points at a sync that depends on the loop's
        state."""
        return [dict(sorted(Counter(event.region for event in part).items())) for part in self.segments()[1]]

    def site_records(self, region: str | None = None) -> list[SiteRecord]:
        """One record per (region, site, function, kind, via) with its source line: what reports point with."""
        return group_records(e for e in self.events if region is None or e.region == region)

    def site_internals(self, region: str) -> dict[str, set[str]]:
        """Per call site in `region`: the torch code that synced on its behalf (see `SyncEvent.via`), if any."""
        internals: dict[str, set[str]] = {}
        for event in self.events:
            if event.region == region and event.via:
                internals.setdefault(event.site, set()).add(event.via)
        return internals

    def clear(self) -> None:
        """Forget the events and iteration marks recorded so far (e.g. after warm-up); the counter stays active."""
        self.events.clear()
        self._marks.clear()
        self._mark_mode = ""

    def format(self) -> str:
        """A per-region table of counts and call sites, for logs and failure messages."""
        if not self.events:
            return "no host syncs recorded"
        lines = [f"{self.total} host syncs recorded:"]
        for region, count in self.counts_by_region().items():
            lines.append(f"  region {region!r}: {count}")
            for record in sorted(self.site_records(region), key=lambda r: (r.file, r.line, r.kind, r.via)):
                inside = f"  (inside torch: {record.via})" if record.via else ""
                lines.append(f"    {record.site} in {record.function}  [{record.kind}×{record.count}]{inside}")
        if self.cuda_sync_warnings is not None:
            lines.append(f"  cuda sync-debug warnings: {self.cuda_sync_warnings}")
        if self.cross_check_note:
            lines.append(f"  {self.cross_check_note}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"SyncCounter(total={self.total}, regions={self.counts_by_region()})"


def _active_counters() -> list[Any]:
    """Active counters, outermost first (diagnostics)."""
    return list(_STATE.counters)
