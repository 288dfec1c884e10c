"""Sync budgets: committed per-region sync counts, checked against a `SyncCounter`'s counts.

A budget file is JSON: `{"context": {...}, "regions": {"train_pass": 3, ...}, "sites": {"train_pass":
{"src/engine.py::Engine.train_step [cpu]": 3}}, "lines": {"train_pass": {"src/engine.py::Engine.train_step [cpu]":
{"rows = values.cpu()": 3}}}, "callers": {"train_pass": {"src/engine.py::Engine.train_step [cpu]":
{"rows = values.cpu()": {"src/engine.py::Engine.run `self.train_step(batch)`": 3}}}}, "per_iteration":
{"train_pass": 1}}`. `context` records where it was measured; `sites` records the call sites seen when it was
written, keyed by FILE, FUNCTION and KIND (`site_key`), never by line: moving code within a function neither
changes the file nor marks a site NEW. `lines` records, per key, each site's source line
(`tripwire.sync.sites.line_identity`), so a new sync in a function that already synced is named at its own line.
`callers` (optional when read, always written) records, per line, the project lines that called its function
(`tripwire.sync.sites.callers_by_line`: file, function and the stripped call line, so a call that only moved is
the same caller), so a line that grew because a helper gained a caller names that caller. `regions` are totals
over the whole run; `per_iteration` (optional) caps every iteration of the loop (`SyncCounter.mark_iteration`).
Line numbers are shown in reports, from the live counter, for the reader.

Reading a failure (`BudgetReport.format()`):

    sync budget exceeded in 1 region:
      region 'train_pass': 6 syncs, budget 3 (+3)
        NEW tests/test_loop.py:42 in run_epoch  ×2  [item×2]  `loss.item()`
        GREW src/engine.py:131 in train_step  ×2 (was 1)  [cpu×2]  `rows = values.cpu()`
            new caller: src/engine.py:88 in Engine.evaluate `self.train_step(batch)` ×1 (from src/run.py:12 in main)
            src/engine.py:120 in train_step  ×2  [cpu×2]

means two syncs came from a line the budget never saw and one line syncs once more than it did, because
`Engine.evaluate` now calls `train_step` (then the frames that called it, innermost first); NEW and GREW rows
come first, each naming its own line, and `(inside torch: torch/optim/...)` marks a sync torch made on that line's
behalf. Under a NEW or GREW row, `new caller:` names a project line that calls the line's function and was not
recorded, `caller grew:` one that calls it more often; a budget without `callers` names every current `caller:`
with its count instead (no claim of what is new). An
"unbudgeted region" is a region that synced but has no entry: add it deliberately. Lines starting
"budget can be tightened" are not failures unless `strict=True`: the code now syncs less than
budgeted, so regenerate the budget to lock the gain in. A budget written before sites were keyed this way
(`file:line` keys) still loads; its sites are matched by file only, and the report says to regenerate it. Each
row under a region is built in `tripwire.sync.rows`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tripwire.common.errors import GoldenFileError, read_golden_json, update_command
from tripwire.common.files import write_text
from tripwire.sync.rows import (
    CountSource,
    IterationProblem,
    RegionProblem,
    SiteCount,
    is_keyed,
    region_sites,
    site_lines,
)
from tripwire.sync.sites import site_key

__all__ = ["BudgetReport", "SyncBudget", "budget_payload", "check_budget", "check_scaling", "site_key", "write_budget"]


def _update_hint() -> str:
    return f"if intended, regenerate with `{update_command()}` (refused under CI) and commit the diff"


def _int_map(value: Any) -> bool:
    return isinstance(value, Mapping) and all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0 for k, v in value.items()
    )


@dataclass(frozen=True)
class SyncBudget:
    """Per-region sync allowances (totals and, optionally, per iteration), the call sites and lines seen when
    recorded, and the recording context."""

    regions: dict[str, int]
    sites: dict[str, dict[str, int]] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    lines: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # region -> key -> line -> count
    per_iteration: dict[str, int] = field(default_factory=dict)
    # region -> key -> line -> caller identity -> count; None: the file has no `callers` section
    callers: dict[str, dict[str, dict[str, dict[str, int]]]] | None = None
    # what torch.compile may do (`tripwire.compile`), budgeted the same way; None: the file has no `compile` section
    compile: SyncBudget | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<dict>") -> SyncBudget:
        """Build from the parsed JSON form; raises `GoldenFileError` naming `source` when malformed."""
        regions = data.get("regions", {} if "per_iteration" in data else None)
        if not _int_map(regions):
            raise GoldenFileError(f"{source}: 'regions' must map region names to non-negative ints")
        per_iteration = data.get("per_iteration", {})
        if not _int_map(per_iteration):
            raise GoldenFileError(f"{source}: 'per_iteration' must map region names to non-negative ints")
        sites = data.get("sites", {})
        if not isinstance(sites, Mapping) or not all(_int_map(entries) for entries in sites.values()):
            raise GoldenFileError(f"{source}: 'sites' must map region names to {{site: count}}")
        lines = data.get("lines", {})
        if not isinstance(lines, Mapping) or not all(
            isinstance(keys, Mapping) and all(_int_map(entries) for entries in keys.values()) for keys in lines.values()
        ):
            raise GoldenFileError(f"{source}: 'lines' must map region names to {{site key: {{line: count}}}}")
        callers = data.get("callers")
        if callers is not None and not (
            isinstance(callers, Mapping)
            and all(
                isinstance(keys, Mapping)
                and all(
                    isinstance(by_line, Mapping) and all(_int_map(c) for c in by_line.values())
                    for by_line in keys.values()
                )
                for keys in callers.values()
            )
        ):
            raise GoldenFileError(
                f"{source}: 'callers' must map region names to {{site key: {{line: {{caller: count}}}}}}"
            )
        context = data.get("context", {})
        compiled = data.get("compile")
        if compiled is not None and not isinstance(compiled, Mapping):
            raise GoldenFileError(f"{source}: 'compile' must be a budget object like the file itself")
        return cls(
            regions=dict(regions),
            sites={str(region): dict(entries) for region, entries in sites.items()},
            context=dict(context) if isinstance(context, Mapping) else {},
            source=source,
            lines={str(region): {str(k): dict(v) for k, v in keys.items()} for region, keys in lines.items()},
            per_iteration=dict(per_iteration),
            callers=None
            if callers is None
            else {
                str(region): {
                    str(key): {str(line): dict(by_caller) for line, by_caller in by_line.items()}
                    for key, by_line in keys.items()
                }
                for region, keys in callers.items()
            },
            compile=None if compiled is None else cls.from_dict(compiled, f"{source} (compile)"),
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
class BudgetReport:
    """Outcome of `check_budget`; `format()` is the message a failing test shows."""

    over: tuple[RegionProblem, ...]
    unbudgeted: tuple[RegionProblem, ...]
    under: tuple[RegionProblem, ...]
    strict: bool = False
    source: str = ""
    sites_known: bool = True
    old_format: bool = False
    per_iteration: tuple[IterationProblem, ...] = ()
    what: str = "sync"  # "compile": the report of a budget's `compile` section
    swapped: tuple[RegionProblem, ...] = ()  # within their totals, but with a line the budget never saw
    no_iterations: bool = False  # a per-iteration budget, and the run marked no iteration: nothing was capped

    @property
    def ok(self) -> bool:
        """True when no region is over budget or unbudgeted (or, with `strict`, under budget), and a per-iteration
        budget had iterations to cap."""
        failing = self.over or self.unbudgeted or self.per_iteration or self.swapped or self.no_iterations
        return not failing and not (self.strict and self.under)

    def format(self) -> str:
        """Multi-line report: region, budget, count, and every call site with NEW and GREW ones marked."""
        failing = len(self.over) + len(self.unbudgeted) + len(self.per_iteration) + len(self.swapped)
        failing += len(self.under) if self.strict else 0
        where = f" ({self.source})" if self.source else ""
        what, events = self.what, "syncs" if self.what == "sync" else "compilation events"
        if self.no_iterations:
            return (
                f"{what} budget not checked{where}: it caps each iteration and the run marked none (the iteration "
                "target was never called, or called fewer times than `every`): point the scenario's `iteration=` at "
                "what this loop calls once per iteration"
            )
        lines = [f"{what} budget exceeded in {failing} region(s){where}:" if failing else f"{what} budget ok{where}"]
        for problem in self.over:
            excess = problem.count - (problem.budget or 0)
            lines.append(f"  region {problem.region!r}: {problem.count} {events}, budget {problem.budget} (+{excess})")
            lines.extend(site_lines(problem, self.sites_known))
        for problem in self.unbudgeted:
            lines.append(f"  unbudgeted region {problem.region!r}: {problem.count} {events}, no budget entry")
            lines.extend(site_lines(problem, self.sites_known))
        for problem in self.swapped:
            new = sum(1 for site in problem.sites if site.new)
            lines.append(
                f"  region {problem.region!r}: {problem.count} {events}, within its budget of {problem.budget}, "
                f"but {new} line(s) the budget never saw (a new line fails whatever the total)"
            )
            lines.extend(site_lines(problem, self.sites_known))
        for iteration in self.per_iteration:
            shown = ", ".join(f"#{index} {count}" for index, count in iteration.iterations[:6])
            more = f", ... ({len(iteration.iterations)} iterations)" if len(iteration.iterations) > 6 else ""
            limit = f"budget {iteration.budget} per iteration" if iteration.budget is not None else "no budget"
            lines.append(f"  region {iteration.region!r} per iteration: {limit}, exceeded in {shown}{more}")
            problem = RegionProblem(iteration.region, iteration.budget, 0, iteration.sites)
            lines.extend(site_lines(problem, self.sites_known))
        for problem in self.under:
            marker = "  FAIL (strict) " if self.strict else "  "
            lines.append(
                f"{marker}budget can be tightened for region {problem.region!r} "
                f"from {problem.budget} to {problem.count}"
            )
        if failing:
            lines.append(f"  remove the {events}, or {_update_hint()}")
        if self.old_format:
            lines.append("  (an old-format budget keyed by file:line: sites matched by file only; regenerate it)")
        return "\n".join(lines)


def _region_callers(budget: SyncBudget, region: str) -> Mapping[str, Mapping[str, Mapping[str, int]]] | None:
    """The region's recorded callers (key -> line -> caller -> count), or None when the budget records none."""
    return None if budget.callers is None else budget.callers.get(region, {})


def _iteration_problems(source: CountSource | None, budget: SyncBudget) -> tuple[IterationProblem, ...]:
    """Regions over their per-iteration budget, with the iterations where they were and the new or grown sites."""
    iteration_counts = getattr(source, "iteration_counts", None)
    if source is None or not budget.per_iteration or not callable(iteration_counts):
        return ()
    seen: dict[str, list[tuple[int, int]]] = {}
    for index, counts in enumerate(iteration_counts()):
        for region, count in counts.items():
            allowed = budget.per_iteration.get(region)
            if allowed is None or count > allowed:
                seen.setdefault(region, []).append((index, count))
    problems = []
    for region, found in sorted(seen.items()):
        sites = region_sites(
            source, region, budget.sites.get(region), budget.lines.get(region), _region_callers(budget, region)
        )
        pointed = tuple(site for site in sites if site.new or site.was is not None)
        problems.append(IterationProblem(region, budget.per_iteration.get(region), tuple(found), pointed))
    return tuple(problems)


def check_budget(
    counter_or_counts: CountSource | Mapping[str, int],
    budget: SyncBudget,
    *,
    strict: bool = False,
    what: str = "sync",
) -> BudgetReport:
    """Compare per-region counts with `budget` (totals, and per iteration when it has `per_iteration`); pass the
    counter itself to get call sites in the report. `what` names the events in the report ("compile": a
    `CompileCounter` against a budget's `compile` section)."""
    if isinstance(counter_or_counts, CountSource):
        source: CountSource | None = counter_or_counts
        counts = counter_or_counts.counts_by_region()
    else:
        source, counts = None, dict(counter_or_counts)
    over: list[RegionProblem] = []
    unbudgeted: list[RegionProblem] = []
    under: list[RegionProblem] = []
    swapped: list[RegionProblem] = []
    totals_checked = bool(budget.regions) or not budget.per_iteration
    for region in sorted(set(counts) | set(budget.regions)) if totals_checked else ():
        count, allowed = counts.get(region, 0), budget.regions.get(region)
        recorded = budget.sites.get(region) if budget.sites else None
        lines = budget.lines.get(region) if budget.lines else None
        callers = _region_callers(budget, region)
        if allowed is not None and count <= allowed:
            # within its total, a region still fails on a line the budget never saw: a new sync paid for by one
            # that went away is a second device-to-host copy on a GPU, whatever the count says
            within = _new_lines(source, region, recorded, lines, callers)
            if within:
                swapped.append(RegionProblem(region, allowed, count, within))
            elif count < allowed:
                under.append(RegionProblem(region, allowed, count))
            continue
        sites = region_sites(source, region, recorded, lines, callers) if source is not None else ()
        (over if allowed is not None else unbudgeted).append(RegionProblem(region, allowed, count, sites))
    per_iteration = _iteration_problems(source, budget)
    failing_iterations = {problem.region for problem in per_iteration}
    for region in () if totals_checked else sorted(set(budget.per_iteration) - failing_iterations):
        # a per-iteration budget: a region within its cap still fails on a line the budget never saw
        recorded = budget.sites.get(region) if budget.sites else None
        lines = budget.lines.get(region) if budget.lines else None
        within = _new_lines(source, region, recorded, lines, _region_callers(budget, region))
        if within:
            per = getattr(source, "iteration_counts", None)
            most = max((it.get(region, 0) for it in per()), default=0) if callable(per) else 0
            swapped.append(RegionProblem(region, budget.per_iteration[region], most, within))
    old_format = any(not is_keyed(entries) for entries in budget.sites.values())
    iteration_counts = getattr(source, "iteration_counts", None)
    no_iterations = bool(budget.per_iteration) and callable(iteration_counts) and not iteration_counts()
    return BudgetReport(
        tuple(over),
        tuple(unbudgeted),
        tuple(under),
        strict,
        budget.source,
        source is not None,
        old_format,
        per_iteration,
        what,
        tuple(swapped),
        no_iterations,
    )


def _new_lines(
    source: CountSource | None,
    region: str,
    recorded: Mapping[str, int] | None,
    lines: Mapping[str, Mapping[str, int]] | None,
    callers: Mapping[str, Mapping[str, Mapping[str, int]]] | None,
) -> tuple[SiteCount, ...]:
    """The region's rows when one of its lines is new (a line that only moved is not), else nothing. Needs a source
    with line records and a budget that recorded lines: without them a line cannot be told new."""
    if source is None or lines is None or not callable(getattr(source, "site_records", None)):
        return ()
    rows = region_sites(source, region, recorded, lines, callers)
    return rows if any(row.new for row in rows) else ()


def budget_payload(
    counts: Mapping[str, int],
    sites: Mapping[str, Mapping[str, int]] | None = None,
    context: Mapping[str, Any] | None = None,
    lines: Mapping[str, Mapping[str, Mapping[str, int]]] | None = None,
    per_iteration: Mapping[str, int] | None = None,
    callers: Mapping[str, Mapping[str, Mapping[str, Mapping[str, int]]]] | None = None,
    compile: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON form `write_budget` writes (keys sorted, plain ints; `lines` and `per_iteration` when given,
    `callers` always: `tripwire.sync.sites.callers_by_line`, `{}` when not given; `compile`, a budget payload of
    compilation events, when given)."""
    payload: dict[str, Any] = {
        "context": dict(sorted((context or {}).items())),
        "regions": {str(region): int(counts[region]) for region in sorted(counts)},
        "sites": {
            str(region): {str(site): int(n) for site, n in sorted(entries.items())}
            for region, entries in sorted((sites or {}).items())
        },
    }
    if lines:
        payload["lines"] = {
            str(region): {
                str(key): {str(text): int(n) for text, n in sorted(entries.items())}
                for key, entries in sorted(keys.items())
            }
            for region, keys in sorted(lines.items())
        }
    payload["callers"] = {
        str(region): {
            str(key): {
                str(line): {str(caller): int(n) for caller, n in sorted(by_caller.items())}
                for line, by_caller in sorted(by_line.items())
            }
            for key, by_line in sorted(keys.items())
        }
        for region, keys in sorted((callers or {}).items())
    }
    if per_iteration:
        payload["per_iteration"] = {str(region): int(n) for region, n in sorted(per_iteration.items())}
    if compile is not None:
        payload["compile"] = dict(compile)
    return payload


def write_budget(
    path: str | Path,
    counts: Mapping[str, int],
    sites: Mapping[str, Mapping[str, int]] | None = None,
    context: Mapping[str, Any] | None = None,
    lines: Mapping[str, Mapping[str, Mapping[str, int]]] | None = None,
    per_iteration: Mapping[str, int] | None = None,
    callers: Mapping[str, Mapping[str, Mapping[str, Mapping[str, int]]]] | None = None,
    compile: Mapping[str, Any] | None = None,
) -> Path:
    """Write a budget file (the regenerate path): sorted, indented JSON with a trailing newline."""
    path = Path(path)
    payload = budget_payload(counts, sites, context, lines, per_iteration, callers, compile)
    write_text(path, json.dumps(payload, indent=2) + "\n")  # whole or not at all: never a half-written golden
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
