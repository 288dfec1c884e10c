"""An event log: events recorded while active, each with its region and call site, and the loop's iterations.

`SyncCounter` (host syncs) and `tripwire.compile.CompileCounter` (what torch.compile does) keep their events the
same way, so budgets (`tripwire.sync.budget.check_budget`), results and reports read either one: per region, per
call site, per source line with its callers, and per iteration of the user's loop. This module loads no torch.
"""

from __future__ import annotations

import itertools
from collections import Counter

from tripwire.sync.sites import SiteRecord, group_records, site_key
from tripwire.sync.state import SyncEvent

__all__ = ["EventLog"]


class EventLog:
    """Recorded events (`SyncEvent`s, whatever their kind) and the iteration boundaries marked between them."""

    def __init__(self) -> None:
        self.events: list[SyncEvent] = []
        self._marks: list[int] = []  # len(events) at each iteration boundary
        self._mark_mode = ""  # "end" (mark_iteration) or "start" (start_iteration)

    @property
    def total(self) -> int:
        """Number of events recorded."""
        return len(self.events)

    def counts_by_region(self, *, by_path: bool = False) -> dict[str, int]:
        """Events per region (innermost name, or the full "outer/inner" path), sorted by region."""
        counts = Counter(event.region_path if by_path else event.region for event in self.events)
        return dict(sorted(counts.items()))

    def counts_by_kind(self, region: str | None = None) -> dict[str, int]:
        """Events per kind, over all regions or one."""
        counts = Counter(e.kind for e in self.events if region is None or e.region == region)
        return dict(sorted(counts.items()))

    def sites(self, region: str) -> Counter[str]:
        """Events per call site (`file:line`) within `region`."""
        return Counter(event.site for event in self.events if event.region == region)

    def sites_by_region(self) -> dict[str, Counter[str]]:
        """`sites(region)` for every region that synced."""
        return {region: self.sites(region) for region in self.counts_by_region()}

    def site_keys(self, region: str) -> Counter[str]:
        """Events per budget key (`file::function [kind]`, see `tripwire.sync.budget.site_key`) within `region`."""
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
            raise ValueError(
                f"{type(self).__name__}: use mark_iteration() (at ends) or start_iteration() (at starts), not both"
            )
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
        """Events per region in each iteration (see `mark_iteration` and `start_iteration`), in order: a count that
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
