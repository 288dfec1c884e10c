"""Sync budgets: committed per-region sync counts, checked against a `SyncCounter`'s counts.

A budget file is JSON: `{"context": {...}, "regions": {"train_pass": 3, ...}, "sites": {"train_pass":
{"src/engine.py::Engine.train_step [cpu]": 3}}}`. `context` records where it was measured; `sites` records
the call sites seen when it was written, keyed by FILE, FUNCTION and KIND (`site_key`), never by line: moving
code within a function neither changes the file nor marks a site NEW. Line numbers are shown in reports, from
the live counter, for the reader.

Reading a failure (`BudgetReport.format()`):

    sync budget exceeded in 1 region:
      region 'train_pass': 5 syncs, budget 3 (+2)
        NEW tests/test_loop.py:42 in run_epoch  ×2  [item×2]
            src/engine.py:120 in train_step  ×3  [cpu×3]

means two syncs came from a (file, function, kind) the budget never saw; NEW sites are listed first. An
"unbudgeted region" is a region that synced but has no entry: add it deliberately. Lines starting
"budget can be tightened" are not failures unless `strict=True`: the code now syncs less than
budgeted, so regenerate the budget to lock the gain in. A budget written before sites were keyed this way
(`file:line` keys) still loads; its sites are matched by file only, and the report says to regenerate it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from tripwire.errors import GoldenFileError, read_golden_json, update_command


def _update_hint() -> str:
    return f"if intended, regenerate with `{update_command()}` (refused under CI) and commit the diff"


def site_key(site: str, function: str, kind: str) -> str:
    """The budget key of a sync: `file::function [kind]` (the line of `site` = `file:line` is dropped)."""
    file = site.rsplit(":", 1)[0] if site.rsplit(":", 1)[-1].isdigit() else site
    return f"{file}::{function} [{kind}]"


def _is_keyed(recorded: Mapping[str, int]) -> bool:
    """True for sites keyed by `site_key` (every budget written since keys dropped line numbers)."""
    return all("::" in key for key in recorded)


def _known(key: str, recorded: Mapping[str, int]) -> bool:
    """Whether a live site's key was recorded; old `file:line` budgets are matched by file only."""
    if _is_keyed(recorded):
        return key in recorded
    file = key.split("::", 1)[0]
    return any(old.rsplit(":", 1)[0] == file for old in recorded)


@runtime_checkable
class CountSource(Protocol):
    """What `check_budget` reads from a `SyncCounter` (kept structural to avoid an import cycle)."""

    def counts_by_region(self, *, by_path: bool = False) -> dict[str, int]: ...

    def site_details(self, region: str) -> dict[str, tuple[str, Counter[str]]]: ...


@dataclass(frozen=True)
class SyncBudget:
    """Per-region sync allowances, the call sites seen when recorded, and the recording context."""

    regions: dict[str, int]
    sites: dict[str, dict[str, int]] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    source: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<dict>") -> SyncBudget:
        """Build from the parsed JSON form; raises `GoldenFileError` naming `source` when malformed."""
        regions = data.get("regions")
        if not isinstance(regions, Mapping) or not all(
            isinstance(k, str) and isinstance(v, int) and v >= 0 for k, v in regions.items()
        ):
            raise GoldenFileError(f"{source}: 'regions' must map region names to non-negative ints")
        sites = data.get("sites", {})
        if not isinstance(sites, Mapping):
            raise GoldenFileError(f"{source}: 'sites' must map region names to {{site: count}}")
        context = data.get("context", {})
        return cls(
            regions=dict(regions),
            sites={str(region): dict(entries) for region, entries in sites.items()},
            context=dict(context) if isinstance(context, Mapping) else {},
            source=source,
        )

    @classmethod
    def load(cls, path: str | Path) -> SyncBudget:
        """Read a budget file; a missing or malformed file raises `GoldenFileError` naming it."""
        path = Path(path)
        data = read_golden_json(path, f"sync budget file does not exist ({_update_hint()})")
        if not isinstance(data, Mapping):
            raise GoldenFileError(f"{path}: expected a JSON object")
        return cls.from_dict(data, source=str(path))


@dataclass(frozen=True)
class SiteCount:
    """Syncs from one call site within a region."""

    site: str
    count: int
    function: str = ""
    kinds: dict[str, int] = field(default_factory=dict)
    new: bool = False
    via: tuple[str, ...] = ()  # torch code that synced on the site's behalf (Adam's step counters, ...)


@dataclass(frozen=True)
class RegionProblem:
    """A region over its budget (`budget` None: unbudgeted) or, in `under`, below it."""

    region: str
    budget: int | None
    count: int
    sites: tuple[SiteCount, ...] = ()


@dataclass(frozen=True)
class BudgetReport:
    """Outcome of `check_budget`; `format()` is the message a failing test shows."""

    over: tuple[RegionProblem, ...]
    unbudgeted: tuple[RegionProblem, ...]
    under: tuple[RegionProblem, ...]
    strict: bool = False
    source: str = ""
    sites_known: bool = True
    old_format: bool = False

    @property
    def ok(self) -> bool:
        """True when no region is over budget or unbudgeted (or, with `strict`, under budget)."""
        return not self.over and not self.unbudgeted and not (self.strict and self.under)

    def format(self) -> str:
        """Multi-line report: region, budget, count, and every call site with NEW ones marked."""
        failing = len(self.over) + len(self.unbudgeted) + (len(self.under) if self.strict else 0)
        where = f" ({self.source})" if self.source else ""
        lines = [f"sync budget exceeded in {failing} region(s){where}:" if failing else f"sync budget ok{where}"]
        for problem in self.over:
            excess = problem.count - (problem.budget or 0)
            lines.append(f"  region {problem.region!r}: {problem.count} syncs, budget {problem.budget} (+{excess})")
            lines.extend(_site_lines(problem, self.sites_known))
        for problem in self.unbudgeted:
            lines.append(f"  unbudgeted region {problem.region!r}: {problem.count} syncs, no budget entry")
            lines.extend(_site_lines(problem, self.sites_known))
        for problem in self.under:
            marker = "  FAIL (strict) " if self.strict else "  "
            lines.append(
                f"{marker}budget can be tightened for region {problem.region!r} "
                f"from {problem.budget} to {problem.count}"
            )
        if failing:
            lines.append(f"  remove the syncs, or {_update_hint()}")
        if self.old_format:
            lines.append("  (an old-format budget keyed by file:line: sites matched by file only; regenerate it)")
        return "\n".join(lines)


def _site_lines(problem: RegionProblem, sites_known: bool) -> list[str]:
    """Indented call-site lines for one failing region."""
    if not sites_known:
        return ["    (call sites unknown: pass the SyncCounter, not bare counts, to see them)"]
    lines = []
    for site in problem.sites:
        kinds = ", ".join(f"{kind}×{n}" for kind, n in sorted(site.kinds.items()))
        marker = "NEW " if site.new else "    "
        function = f" in {site.function}" if site.function else ""
        inside = f"  (inside torch: {', '.join(site.via)})" if site.via else ""
        lines.append(f"    {marker}{site.site}{function}  ×{site.count}  [{kinds}]{inside}")
    return lines


def _region_sites(source: CountSource, region: str, recorded: Mapping[str, int] | None) -> tuple[SiteCount, ...]:
    """Call sites of one region, one row per (file, function, kind), NEW ones (key not in `recorded`) first.

    A row shows the lines it was seen on now (`src/engine.py:120,131`), for the reader only.
    """
    rows: dict[str, tuple[str, list[str], int, str]] = {}
    internals_of = getattr(source, "site_internals", None)
    internals: dict[str, set[str]] = internals_of(region) if callable(internals_of) else {}
    via_by_key: dict[str, set[str]] = {}
    for site, (function, kinds) in source.site_details(region).items():
        line = site.rsplit(":", 1)[-1]
        for kind, count in kinds.items():
            key = site_key(site, function, kind)
            via_by_key.setdefault(key, set()).update(internals.get(site, ()))
            file, lines, total, _ = rows.get(key, (key.split("::", 1)[0], [], 0, kind))
            rows[key] = (file, sorted({*lines, line}, key=lambda x: (len(x), x)), total + count, kind)
    sites = [
        SiteCount(
            f"{file}:{','.join(lines)}",
            count,
            key.split("::", 1)[1].rsplit(" [", 1)[0],
            {kind: count},
            new=recorded is None or not _known(key, recorded),
            via=tuple(sorted(via_by_key.get(key, ()))),
        )
        for key, (file, lines, count, kind) in rows.items()
    ]
    return tuple(sorted(sites, key=lambda s: (not s.new, -s.count, s.site)))


def check_budget(
    counter_or_counts: CountSource | Mapping[str, int],
    budget: SyncBudget,
    *,
    strict: bool = False,
) -> BudgetReport:
    """Compare per-region counts with `budget`; pass the counter itself to get call sites in the report."""
    if isinstance(counter_or_counts, CountSource):
        source: CountSource | None = counter_or_counts
        counts = counter_or_counts.counts_by_region()
    else:
        source, counts = None, dict(counter_or_counts)
    over: list[RegionProblem] = []
    unbudgeted: list[RegionProblem] = []
    under: list[RegionProblem] = []
    for region in sorted(set(counts) | set(budget.regions)):
        count, allowed = counts.get(region, 0), budget.regions.get(region)
        if allowed is not None and count == allowed:
            continue
        if allowed is not None and count < allowed:
            under.append(RegionProblem(region, allowed, count))
            continue
        recorded = budget.sites.get(region) if budget.sites else None
        sites = _region_sites(source, region, recorded) if source is not None else ()
        (over if allowed is not None else unbudgeted).append(RegionProblem(region, allowed, count, sites))
    old_format = any(not _is_keyed(entries) for entries in budget.sites.values())
    return BudgetReport(
        tuple(over), tuple(unbudgeted), tuple(under), strict, budget.source, source is not None, old_format
    )


def budget_payload(
    counts: Mapping[str, int],
    sites: Mapping[str, Mapping[str, int]] | None = None,
    context: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON form `write_budget` writes (keys sorted, plain ints)."""
    return {
        "context": dict(sorted((context or {}).items())),
        "regions": {str(region): int(counts[region]) for region in sorted(counts)},
        "sites": {
            str(region): {str(site): int(n) for site, n in sorted(entries.items())}
            for region, entries in sorted((sites or {}).items())
        },
    }


def write_budget(
    path: str | Path,
    counts: Mapping[str, int],
    sites: Mapping[str, Mapping[str, int]] | None = None,
    context: Mapping[str, Any] | None = None,
) -> Path:
    """Write a budget file (the regenerate path): sorted, indented JSON with a trailing newline."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(budget_payload(counts, sites, context), indent=2) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


@dataclass(frozen=True)
class ScalingReport:
    """Regions whose sync count changes with a scale parameter (e.g. the number of envs)."""

    counts: dict[str, dict[str, int]]
    varying: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """True when every region's count is the same at every scale."""
        return not self.varying

    def format(self) -> str:
        """One line per varying region with its count at each scale."""
        if self.ok:
            return f"sync counts independent of scale ({', '.join(self.counts)})"
        lines = ["sync count depends on scale (a per-item sync in a hot path?):"]
        for region in self.varying:
            per_scale = ", ".join(f"{scale}: {counts.get(region, 0)}" for scale, counts in self.counts.items())
            lines.append(f"  region {region!r}: {per_scale}")
        return "\n".join(lines)


def check_scaling(runs: Mapping[Any, CountSource | Mapping[str, int]]) -> ScalingReport:
    """Check per-region counts are equal across runs at different scales (`{n_envs: counter}`)."""
    counts = {
        str(scale): (run.counts_by_region() if isinstance(run, CountSource) else dict(run))
        for scale, run in runs.items()
    }
    regions = sorted({region for per_scale in counts.values() for region in per_scale})
    varying = tuple(r for r in regions if len({per_scale.get(r, 0) for per_scale in counts.values()}) > 1)
    return ScalingReport(counts, varying)
