"""The rows of a sync budget report: each call site of a failing region, matched line by line against the budget.

A row is one source line of one site key (`file::function [kind]`): NEW when the budget never saw it, GREW when it
syncs more often than recorded, with the project lines that newly call its function (`tripwire.sync.sites`). A
source without line records (bare counts per site) gets one row per key instead. `tripwire.sync.budget` decides
which regions fail; this module says where, and prints it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable

from tripwire.sync import kinds
from tripwire.sync.sites import CallerChange, SiteRecord, caller_changes, match_lines, site_key, via_label

__all__ = [
    "CountSource",
    "IterationProblem",
    "RegionProblem",
    "SiteCount",
    "is_keyed",
    "region_sites",
    "site_lines",
]


SHOWN_CALLERS = 5  # caller rows under one NEW or GREW line


def is_keyed(recorded: Mapping[str, int]) -> bool:
    """True for sites keyed by `site_key` (every budget written since keys dropped line numbers)."""
    return all("::" in key for key in recorded)


def _known(key: str, recorded: Mapping[str, int]) -> bool:
    """Whether a live site's key was recorded; old `file:line` budgets are matched by file only."""
    if is_keyed(recorded):
        return key in recorded
    file = key.split("::", 1)[0]
    return any(old.rsplit(":", 1)[0] == file for old in recorded)


@runtime_checkable
class CountSource(Protocol):
    """What `check_budget` reads from a `SyncCounter` (kept structural to avoid an import cycle). A source that also
    has `site_records(region)` and `iteration_counts()` gets reports per line and per-iteration checks."""

    def counts_by_region(self, *, by_path: bool = False) -> dict[str, int]: ...

    def site_details(self, region: str) -> dict[str, tuple[str, Counter[str]]]: ...


@dataclass(frozen=True)
class SiteCount:
    """Syncs from one call site (or, without line records, one site key) within a region."""

    site: str
    count: int
    function: str = ""
    kinds: dict[str, int] = field(default_factory=dict)
    new: bool = False
    via: tuple[str, ...] = ()  # torch code that synced on the site's behalf (Adam's step counters, ...)
    text: str = ""  # the site's source line, shown for new and grown sites
    was: int | None = None  # the recorded count of a line that now syncs more often (or, GONE, synced)
    callers: tuple[CallerChange, ...] = ()  # of a new or grown line: its new (or, unrecorded, all) callers
    gone: bool = False  # a recorded line that no longer syncs
    moved_from: str = ""  # a line that only moved: where the budget recorded it ("file in function")

    @property
    def marker(self) -> str:
        if self.gone:
            return "GONE "
        if self.moved_from:
            return "MOVED "
        return "NEW " if self.new else "GREW " if self.was is not None else "    "


@dataclass(frozen=True)
class RegionProblem:
    """A region over its budget (`budget` None: unbudgeted) or, in `under`, below it."""

    region: str
    budget: int | None
    count: int
    sites: tuple[SiteCount, ...] = ()


@dataclass(frozen=True)
class IterationProblem:
    """A region over its per-iteration budget (`budget` None: none declared) in the listed iterations, with the
    region's new and grown sites."""

    region: str
    budget: int | None
    iterations: tuple[tuple[int, int], ...]  # (0-based iteration, count)
    sites: tuple[SiteCount, ...] = ()


def site_lines(problem: RegionProblem, sites_known: bool) -> list[str]:
    """Indented call-site lines for one failing region."""
    if not sites_known:
        return ["    (call sites unknown: pass the SyncCounter, not bare counts, to see them)"]
    lines = []
    for site in problem.sites:
        kinds = ", ".join(f"{kind}×{n}" for kind, n in sorted(site.kinds.items()))
        function = f" in {site.function}" if site.function else ""
        was = f" (was {site.was})" if site.was is not None else ""
        shown = site.new or site.was is not None or site.gone or site.moved_from
        text = f"  `{site.text}`" if site.text and shown else ""
        label = via_label(next(iter(site.kinds), ""))
        inside = f"  ({label}: {', '.join(site.via)})" if site.via else ""
        moved = f"  (moved from {site.moved_from})" if site.moved_from else ""
        count = "×0" if site.gone else f"×{site.count}"
        lines.append(f"    {site.marker}{site.site}{function}  {count}{was}  [{kinds}]{text}{inside}{moved}")
        lines.extend(f"        {change.format()}" for change in site.callers[:SHOWN_CALLERS])
        if len(site.callers) > SHOWN_CALLERS:
            lines.append(f"        ... {len(site.callers) - SHOWN_CALLERS} more callers")
    return lines


# Among new and grown rows, the compilation events that say what changed come before the frames and graphs
# that follow from them (a graph break also compiles a frame after it); every other kind sits between.
_TELLING = (kinds.GRAPH_BREAK, kinds.DISABLE, kinds.RECOMPILE, kinds.EAGER)
_FOLLOWING = (kinds.FRAME, kinds.GRAPH)


def _kind_rank(site: SiteCount) -> int:
    kinds = set(site.kinds)
    return 0 if kinds & set(_TELLING) else 2 if kinds and kinds <= set(_FOLLOWING) else 1


def _sort_sites(sites: list[SiteCount]) -> tuple[SiteCount, ...]:
    """NEW first, then GREW, then the rest; GONE and MOVED rows last."""
    return tuple(
        sorted(
            sites,
            key=lambda s: (s.gone or bool(s.moved_from), not s.new, s.was is None, _kind_rank(s), -s.count, s.site),
        )
    )


def region_sites(
    source: CountSource,
    region: str,
    recorded: Mapping[str, int] | None,
    recorded_lines: Mapping[str, Mapping[str, int]] | None,
    recorded_callers: Mapping[str, Mapping[str, Mapping[str, int]]] | None = None,
) -> tuple[SiteCount, ...]:
    """Call sites of one region, NEW (a key or line the budget never saw) and GREW first.

    With line records (a `SyncCounter`), each row is one source line of one key, on its own, and a NEW or GREW row
    names its new callers (`recorded_callers`: key -> line -> caller -> count; None when the budget has no
    `callers`); without them, one row per key lists the lines it was seen on now (`src/engine.py:120,131`), for the
    reader only.
    """
    records_of = getattr(source, "site_records", None)
    if not callable(records_of):
        return _key_rows(source, region, recorded)
    rows: dict[tuple[str, str, str], list[SiteRecord]] = {}
    for record in records_of(region):
        rows.setdefault((record.key, record.via, record.identity), []).append(record)
    matches: dict[str, dict[str, str | None]] = {}
    for key in {row_key for row_key, _, _ in rows}:
        if recorded_lines is not None and key in recorded_lines:
            live = [row_identity for row_key, _, row_identity in rows if row_key == key]
            matches[key] = match_lines(recorded_lines[key], live)
    sites = []
    for (key, via, identity), group in rows.items():
        count = sum(record.count for record in group)
        new = recorded is None or not _known(key, recorded)
        was = None
        old: str | None = None
        if not new and key in matches:
            old = matches[key][identity]
            new = old is None
            was = None if old is None else recorded_lines[key][old] if recorded_lines is not None else None
        numbers = sorted({str(record.line) for record in group}, key=lambda x: (len(x), x))
        grew = was is not None and count > was
        callers: tuple[CallerChange, ...] = ()
        if (new or grew) and all(record.callers is not None for record in group):
            # a NEW line had no callers to compare with: its callers are named, never claimed new (the call that
            # reaches it may be as old as the function; only the line is new)
            line_callers = None if new or old is None else (recorded_callers or {}).get(key, {}).get(old)
            live_callers = [caller for record in group for caller in record.callers or ()]
            callers = caller_changes(line_callers if recorded_callers is not None else None, live_callers)
        sites.append(
            SiteCount(
                f"{group[0].file}:{','.join(numbers)}",
                count,
                group[0].function,
                {group[0].kind: count},
                new=new,
                via=(via,) if via else (),
                text=group[0].text,
                was=was if grew else None,
                callers=callers,
            )
        )
    if recorded_lines is not None:
        matched = {(key, old) for key, by_live in matches.items() for old in by_live.values() if old is not None}
        live_keys = {key for key, _, _ in rows}
        gone = [
            _gone_row(key, identity, count)
            for key, by_line in recorded_lines.items()
            for identity, count in by_line.items()
            if count and (key, identity) not in matched and (key in live_keys or key in (recorded or {}))
        ]
        sites = _pair_moves(sites, gone)
    return _sort_sites(sites)


def _gone_row(key: str, identity: str, count: int) -> SiteCount:
    """A recorded line of `key` that no longer syncs."""
    file, _, rest = key.partition("::")
    function, _, kind = rest.rpartition(" [")
    text, _, via = identity.partition("  <- ")
    return SiteCount(
        file, 0, function, {kind.rstrip("]"): count}, via=(via,) if via else (), text=text, was=count, gone=True
    )


def _short_name(function: str) -> str:
    """`Engine.run` -> `run`: a function is the same function wherever it moved, in a class or out of one."""
    return function.rsplit(".", 1)[-1]


def _same_place(gone: SiteCount, site: SiteCount) -> bool:
    """Whether a GONE line and a NEW one are one line that moved: in a function of the same name (moved to another
    file, or into or out of a class), or in the same file (its function renamed, or the line moved between two of
    the file's functions). A line moved to another file under another name at once is a change."""
    return _short_name(gone.function) == _short_name(site.function) or gone.site == site.site.rsplit(":", 1)[0]


def _pair_moves(sites: list[SiteCount], gone: list[SiteCount]) -> list[SiteCount]:
    """A NEW line with the same text, kind and torch code as a GONE one, in the same place (`_same_place`), moved:
    reported MOVED, not new, and the GONE row is dropped. Anything else stays."""
    left = list(gone)
    out = []
    for site in sites:
        origin = None
        if site.new and site.text:
            origin = next(
                (
                    g
                    for g in left
                    if (g.text, g.kinds.keys(), g.via) == (site.text, site.kinds.keys(), site.via)
                    and _same_place(g, site)
                ),
                None,
            )
        if origin is None:
            out.append(site)
            continue
        left.remove(origin)
        out.append(replace(site, new=False, moved_from=f"{origin.site} in {origin.function}", callers=()))
    return out + left


def _key_rows(source: CountSource, region: str, recorded: Mapping[str, int] | None) -> tuple[SiteCount, ...]:
    """One row per (file, function, kind) from a source without line records."""
    rows: dict[str, tuple[str, list[str], int, str]] = {}
    for site, (function, site_kinds) in source.site_details(region).items():
        line = site.rsplit(":", 1)[-1]
        for kind, count in site_kinds.items():
            key = site_key(site, function, kind)
            file, lines, total, _ = rows.get(key, (key.split("::", 1)[0], [], 0, kind))
            rows[key] = (file, sorted({*lines, line}, key=lambda x: (len(x), x)), total + count, kind)
    return _sort_sites(
        [
            SiteCount(
                f"{file}:{','.join(lines)}",
                count,
                key.split("::", 1)[1].rsplit(" [", 1)[0],
                {kind: count},
                new=recorded is None or not _known(key, recorded),
            )
            for key, (file, lines, count, kind) in rows.items()
        ]
    )
