"""Compare two results: a verdict per check, each saying where a difference is, what kind it is and how big.

`compare_results(a, b)` checks, in order:

| check | same when | a difference reads |
|---|---|---|
| run | both ran to the end, as far, with the same child processes | `b crashed: ValueError: bad shape (model.py:42)` |
| context | the determinism contexts match (a note, not a failure) | `torch_build: 'cpu' -> 'cuda 13.0' (...)` |
| trajectory | every checkpoint is bitwise equal (a difference between runs that did not seed torch, seeded it
differently, drew from it on several threads or made NumPy generators from OS entropy says so: `Result.unseeded`,
`seed`, `draw_threads`, `entropy`) |
`low-bit drift at #5 'Adam.step#1': max |Δ| 2.4e-09 = 3 ULP` |
| syncs | every region and call site syncs as often | `NEW update ppo.py:264 in main ×3 [item] `v.item()`` |
| compile | torch.compile breaks, recompiles, compiles as often, at the same lines | `NEW 'update' ppo.py:88 ...` |
| telemetry | event counts, order and payload schema match | `SEED_PRUNED: 1 -> 0 (-1)` |
| payloads | every event payload field is bitwise equal | `telemetry payload diverged at event 3 of 22 ...` |
| clock | each wall-clock field the payloads left out is within x/30 of its scale against its run's seconds (only when
both results hold such fields: `tripwire.telemetry.clock`) | `charts/SPS::data.scalar_value: 1e+03x smaller ...` |

Sites are matched by file, function, kind and source line (`tripwire.sync.sites.match_lines`), never by line
number, so two results of one tree recorded in two folders, or of two commits whose code only moved, show no site
change. Under a NEW or GREW site, the project lines that call its function and are new in B (`new caller:`) or
call it more often (`caller grew:`) are named, with the frames above them; when A recorded no callers (an older
result), B's callers are listed with their counts (`caller:`). How big a trajectory difference is needs both
sides' values (`values.pt`), which results recorded on one machine have.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tripwire.bitwise.magnitude import AMPLIFIED, DRIFT, VALUE_CHANGE
from tripwire.bitwise.trajectory import TrajectoryReport, compare_trajectories
from tripwire.common.context import mismatches
from tripwire.outside import seeds
from tripwire.outside.result import Result, SyncSummary
from tripwire.sync import kinds
from tripwire.sync.sites import CallerChange, SiteRecord, caller_changes, match_lines, merge_callers, via_label
from tripwire.telemetry.clock import wall_clock_named
from tripwire.telemetry.counts import diff_counts
from tripwire.telemetry.payloads import format_payload_report, payload_magnitude

SAME, DIFFERS, NOTE, NOT_COMPARED, FAILED = "same", "differs", "note", "n/a", "failed"


@dataclass(frozen=True)
class Verdict:
    """One check's outcome: `same`, `differs`, `note` (context only), `n/a` or `failed` (both sides crashed)."""

    check: str
    status: str
    summary: str
    details: tuple[str, ...] = ()
    kind: str = ""  # what kind of difference: `low-bit drift`, `value change`, `structure`, `new sync`, ...


@dataclass(frozen=True)
class Comparison:
    """Every verdict of comparing result `b` with result `a`."""

    a: str
    b: str
    verdicts: tuple[Verdict, ...]

    @property
    def ok(self) -> bool:
        """True when no check differs or failed."""
        return all(verdict.status in (SAME, NOTE, NOT_COMPARED) for verdict in self.verdicts)

    def verdict(self, check: str) -> Verdict:
        return next(verdict for verdict in self.verdicts if verdict.check == check)

    def format(self, *, details: bool = True) -> str:
        """The verdict table, then the details of each difference."""
        width = max(len(verdict.check) for verdict in self.verdicts)
        lines = [f"tripwire compare: A = {self.a}", f"                  B = {self.b}", ""]
        for verdict in self.verdicts:
            lines.append(f"  {verdict.check:<{width}}  {verdict.status:<7}  {verdict.summary}")
        if details:
            for verdict in self.verdicts:
                if verdict.details and verdict.status in (DIFFERS, FAILED, NOTE):
                    lines += ["", f"{verdict.check}:", *(f"  {line}" for line in verdict.details)]
        lines += ["", "identical" if self.ok else "DIFFERENT: see the checks above"]
        return "\n".join(lines)


@dataclass(frozen=True)
class SiteChange:
    """A call site that syncs on one side only, more or less often on B, or whose line moved to another function."""

    change: str  # NEW, GONE, GREW, FEWER, MOVED (the same line, now in another function or file)
    record: SiteRecord  # B's record (A's for GONE)
    before: int
    after: int
    origin: SiteRecord | None = None  # A's record of a MOVED site
    callers: tuple[CallerChange, ...] = ()  # of a NEW or GREW site: its new callers (`tripwire.sync.sites`)

    def format_lines(self) -> list[str]:
        """`format()`, then one indented line per caller worth naming."""
        return [self.format(), *(f"    {change.format()}" for change in self.callers)]

    def format(self) -> str:
        record = self.record
        if self.change in ("NEW", "GONE"):
            counts = f"×{self.after if self.change == 'NEW' else self.before}"
        else:
            counts = f"×{self.before} -> ×{self.after}"
        inside = f"  ({via_label(record.kind)}: {record.via})" if record.via else ""
        where = f"{record.site} in {record.function}"
        origin = f" (was {self.origin.site} in {self.origin.function})" if self.origin is not None else ""
        return f"{self.change:<5} {record.region!r} {where}{origin}  {counts} [{record.kind}]  `{record.text}`{inside}"


def site_changes(a: Sequence[SiteRecord], b: Sequence[SiteRecord]) -> list[SiteChange]:
    """Sites of B that are new or sync more or less often than in A, and sites of A gone in B, matched by source
    line within each (region, file, function, kind, via)."""
    groups: dict[tuple[str, str, str], tuple[list[SiteRecord], list[SiteRecord]]] = {}
    for side, records in ((0, a), (1, b)):
        for record in records:
            groups.setdefault((record.region, record.key, record.via), ([], []))[side].append(record)
    changes = []
    for before_records, after_records in groups.values():
        before = _by_identity(before_records)
        after = _by_identity(after_records)
        matched = match_lines({key: count for key, (count, _) in before.items()}, after)
        for identity, (count, record) in after.items():
            old = matched[identity]
            if old is None:
                # a NEW line's callers are named, never claimed new: only the line is new
                changes.append(SiteChange("NEW", record, 0, count, callers=_callers(record, None)))
            elif count > before[old][0]:
                callers = _callers(record, _caller_counts(before[old][1]))
                changes.append(SiteChange("GREW", record, before[old][0], count, callers=callers))
            elif count < before[old][0]:
                changes.append(SiteChange("FEWER", record, before[old][0], count))
        taken = {old for old in matched.values() if old is not None}
        changes += [SiteChange("GONE", record, count, 0) for key, (count, record) in before.items() if key not in taken]
    changes = _pair_moves(changes)
    order = {"NEW": 0, "GREW": 1, "FEWER": 2, "GONE": 3, "MOVED": 4}
    return sorted(changes, key=lambda c: (order[c.change], c.record.region, c.record.site))


def _pair_moves(changes: list[SiteChange]) -> list[SiteChange]:
    """A NEW and a GONE site of the same region, kind, torch code and source line: one line that moved to another
    function or file (code extracted into a helper), reported once as MOVED."""
    gone: dict[tuple[str, str, str, str], list[SiteChange]] = {}
    for change in changes:
        if change.change == "GONE" and change.record.text:
            gone.setdefault(_line_of(change.record), []).append(change)
    paired, out = set(), []
    for change in changes:
        candidates = gone.get(_line_of(change.record), []) if change.change == "NEW" else []
        origin = next((c for c in candidates if id(c) not in paired), None)
        if origin is None:
            out.append(change)
            continue
        paired.add(id(origin))
        out.append(SiteChange("MOVED", change.record, origin.before, change.after, origin.record))
    return [change for change in out if id(change) not in paired]


def _callers(record: SiteRecord, recorded: dict[str, int] | None) -> tuple[CallerChange, ...]:
    """The callers of B's NEW or GREW `record` worth naming against A's (`recorded`; None: A recorded none)."""
    return () if record.callers is None else caller_changes(recorded, record.callers)


def _caller_counts(record: SiteRecord) -> dict[str, int] | None:
    """A's callers of one line by identity (None: not recorded)."""
    return None if record.callers is None else {caller.identity: caller.count for caller in record.callers}


def _line_of(record: SiteRecord) -> tuple[str, str, str, str]:
    return (record.region, record.kind, record.via, record.text)


def _by_identity(records: Iterable[SiteRecord]) -> dict[str, tuple[int, SiteRecord]]:
    """`{line identity: (count, a record with every line number and every caller of that identity)}`."""
    out: dict[str, tuple[int, SiteRecord]] = {}
    for record in records:
        count, first = out.get(record.identity, (0, record))
        lines = sorted({*first.site.rsplit(":", 1)[-1].split(","), str(record.line)}, key=lambda x: (len(x), x))
        callers = None
        if first.callers is not None and record.callers is not None:
            callers = record.callers if first is record else merge_callers([*first.callers, *record.callers])
        merged = SiteRecord(
            first.region,
            f"{first.file}:{','.join(lines)}",
            first.function,
            first.kind,
            first.via,
            first.text,
            0,
            callers,
        )
        out[record.identity] = (count + record.count, merged)
    return out


def compare_syncs(a: SyncSummary, b: SyncSummary) -> Verdict:
    """Region totals, the typical iteration and every site change."""
    return compare_events("syncs", "syncs", a, b)


def compare_compile(a: SyncSummary | None, b: SyncSummary | None) -> Verdict:
    """What torch.compile did, compared like syncs: a NEW graph break named at its line, a recompile with the guard
    that failed; `n/a` when a side was recorded before compilation was counted."""
    if a is None or b is None:
        side = "A" if a is None else "B"
        return Verdict("compile", NOT_COMPARED, f"{side} was recorded before compilation was counted")
    return compare_events("compile", "compilation events", a, b)


def _event_kind(check: str, changes: Sequence[SiteChange]) -> str:
    """What kind of difference a site-level change is: for syncs more or fewer of them, for compilation the most
    telling kind among new or grown sites (a graph break, a recompile, a fallback to eager)."""
    grown = [change for change in changes if change.change in ("NEW", "GREW")]
    if check == "syncs":
        return "new sync" if grown else "fewer syncs" if changes else "count"
    kinds = {change.record.kind for change in grown}
    for kind, name in COMPILE_KINDS:
        if kind in kinds:
            return name
    return "compile change"


# the kind of compilation change, most telling first (`tripwire.compile.trace`'s kinds)
COMPILE_KINDS = (
    (kinds.GRAPH_BREAK, "graph break"),
    (kinds.DISABLE, "graph break"),
    (kinds.RECOMPILE, "recompile"),
    (kinds.EAGER, "eager fallback"),
)


def compare_events(check: str, noun: str, a: SyncSummary, b: SyncSummary) -> Verdict:
    """Region totals, the typical iteration and every site change of one kind of event (syncs, compilation)."""
    changes = site_changes(a.records, b.records)
    totals_a, totals_b = a.counts_by_region(), b.counts_by_region()
    regions = [r for r in sorted(set(totals_a) | set(totals_b)) if totals_a.get(r, 0) != totals_b.get(r, 0)]
    moved = [change for change in changes if change.change == "MOVED" and change.before == change.after]
    if len(moved) == len(changes) and not regions:
        note = f"; {len(moved)} site(s) moved, as often" if moved else ""
        return Verdict(check, SAME, f"identical ({b.total} {noun}{note})", tuple(c.format() for c in moved))
    details = [f"region {r!r}: {totals_a.get(r, 0)} -> {totals_b.get(r, 0)}" for r in regions]
    typical_a, typical_b = a.typical_iteration(), b.typical_iteration()
    if a.iterations and b.iterations and typical_a != typical_b:
        per = [f"{r} {typical_a.get(r, 0)} -> {typical_b.get(r, 0)}" for r in sorted(set(typical_a) | set(typical_b))]
        details.append(f"per iteration: {', '.join(p for p in per if p.split()[1] != p.split()[3])}")
    details += [line for change in changes for line in change.format_lines()]
    head = changes[0].format() if changes else details[0]
    return Verdict(
        check, DIFFERS, f"{b.total - a.total:+d} {noun}; {head}", tuple(details), _event_kind(check, changes)
    )


def compare_trajectory(a: Result, b: Result) -> Verdict:
    """The first divergence, what kind it is and, with both sides' values, how big; with what alone can explain it
    (`chance`)."""
    report: TrajectoryReport = compare_trajectories(
        a.trajectory, b.trajectory, source="", expected_values=a.values, actual_values=b.values
    )
    if report.ok:
        return Verdict("trajectory", SAME, f"identical ({report.total} checkpoints)")
    where = f"at #{report.first_index} of {report.total} {report.first_name!r}"
    if report.kind == "checkpoints":
        summary = f"{report.structure} ({where})"
    elif report.kind == "structure" and report.changes is not None:
        summary = f"structure {where}: {report.changes.format_structure(shown=2)}"
    elif report.magnitude is not None and (report.magnitude.deltas or report.magnitude.below_resolution):
        summary = f"{report.magnitude.summary()} {where}"
    else:
        summary = f"values differ {where} (values not kept: magnitude unknown)"
    details = report.format(labels=("A", "B")).splitlines()
    context = mismatches(a.context, b.context)
    if context:
        details.append(f"the contexts differ ({'; '.join(context)}): that alone can explain a bitwise difference")
    clock = _clock_named_only(report)
    if clock:
        summary = f"{summary}; only wall-clock-named values differ"
        details.append(clock)
    return _with_chance(Verdict("trajectory", DIFFERS, summary, tuple(details), report.kind), *chance(a, b))


def _clock_named_only(report: TrajectoryReport) -> str:
    """The line saying so when every value that differs at the first diverging checkpoint has a wall-clock name
    (`tripwire.telemetry.clock.wall_clock_named`: SB3's `Monitor` keeps each episode's seconds as `episode.t`, which
    two runs of one seeded loop differ in by their timing alone), with the exclusion that leaves them out; "" when
    anything else differs there, or its structure does."""
    if report.structure or (report.changes is not None and report.changes.structural):
        return ""
    changed = report.changes.changed if report.changes is not None else report.differing_tensors
    names = sorted({*changed, *(name for name, _a, _b in report.plain)})
    if not names or not all(wall_clock_named(name) for name in names):
        return ""
    patterns = sorted({".".join("*" if part.isdigit() else part for part in name.split(".")) for name in names})
    shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
    return (
        f"every value that differs there has a wall-clock name ({shown}): two runs of one loop differ in such values "
        "by their timing alone; if they are clock readings, leave them out of the checkpoint "
        f"(`exclude=({', '.join(repr(pattern) for pattern in patterns[:4])},)`) and record again"
    )


def chance(a: Result, b: Result) -> tuple[str, list[str]]:
    """What alone can make two runs of one seeded loop draw other numbers, as a tag for a differing verdict's summary
    and the lines that explain it: a side drew from torch's default generator on several threads, or from a generator
    it never seeded (`Result.unseeded`), made NumPy generators from OS entropy (`Result.entropy`, between two runs of
    one tree), the two ended with torch seeded differently, or the same events came in another order while a side
    hashed strings at random. ("", []) when none is known."""
    tags: list[str] = []
    lines: list[str] = []
    for side, drew in (("A", a.draw_threads), ("B", b.draw_threads)):
        if drew and len(drew) > 1:
            named = ", ".join(f"{name!r} first at {first}" for name, _count, first in drew[:4])
            lines.append(
                f"{side} drew from torch's default generator on {len(drew)} threads ({named}): their draws interleave "
                "as the OS runs them, which alone can explain the difference; draw on one thread, or give each other "
                "thread a torch.Generator of its own"
            )
    if lines:
        tags.append("torch drawn on several threads")
    generators = sorted({generator for result in (a, b) for generator in result.unseeded})
    for generator in generators:
        sides = [side for side, result in (("A", a), ("B", b)) if generator in result.unseeded]
        tags.append(f"{generator} unseeded by the loop")
        lines.append(
            f"{' and '.join(sides)} drew from {seeds.described(generator)} without seeding it while the run went on: "
            "unless something seeded it the same way before each run, each run draws other random numbers, which "
            "alone can explain the difference; seed it in the loop or in an adapter"
        )
    # named only between two runs of one tree: gymnasium makes such a generator for every space it batches, mostly
    # never drawn from, and between two trees their difference is the change's to explain
    entropy = [(side, made) for side, made in (("A", a.entropy), ("B", b.entropy)) if made] if _one_tree(a, b) else []
    for side, made in entropy:
        shown = ", ".join(f"{line} ({count:,})" for line, count in made[:3])
        lines.append(
            f"{side} made NumPy generators from OS entropy ({shown}{', ...' if len(made) > 3 else ''}): each run draws "
            "other numbers from them, which alone can explain the difference where their draws reach the loop; seed "
            "them (`space.seed(n)`, `env.reset(seed=n)`, `np.random.default_rng(n)`)"
        )
    if entropy:
        tags.append("NumPy generators from OS entropy")
    hashing = _hashing_can_reorder(a, b)
    if hashing:
        tags.append("string hashing not fixed")
        lines.append(hashing)
    if seeds.TORCH not in generators and a.seed is not None and b.seed is not None and a.seed != b.seed:
        if _drew_nothing(a) and _drew_nothing(b):
            lines.append(
                f"the runs ended with torch's default generator seeded differently (A {a.seed}, B {b.seed}), but "
                "neither drew from it: not what made them differ"
            )
        else:
            tags.append("torch seeded differently")
            lines.append(
                f"the runs ended with torch's default generator seeded differently (A {a.seed}, B {b.seed}): the "
                "loop does not seed it the same way every run, so each run draws other random numbers and that alone "
                "can explain the difference; seed it with a fixed value"
            )
    return "; ".join(tags), lines


def _one_tree(a: Result, b: Result) -> bool:
    """Whether the two results are runs of one tree: the same source folder at the same commit."""
    return a.source.get("root") == b.source.get("root") and a.source.get("commit") == b.source.get("commit")


def _drew_nothing(result: Result) -> bool:
    """Whether a run is known to have drawn nothing from torch's default generators: a CPU run (a CUDA generator's
    draws are not watched) whose draws were watched and found none, in a process that started no other (whose draws
    go unseen)."""
    return (
        result.draw_threads == []
        and result.cuda_used is False
        and result.children is not None
        and not any(result.children.values())
    )


def _hashing_can_reorder(a: Result, b: Result) -> str:
    """Why the same events came in another order, when Python's string hashing alone can explain it: a side hashed
    with a seed of its own (`PYTHONHASHSEED` unset), or the two with different seeds, and the two runs wrote the same
    events, as many of each type in each round, in another order (a loop iterating a set of strings: rsl_rl's
    logger writes its episode scalars in the order of a set of their names). "" otherwise."""
    if a.hash_seed is None or b.hash_seed is None or not _reordered(a.telemetry, b.telemetry):
        return ""
    random = [side for side, result in (("A", a), ("B", b)) if result.hash_seed == seeds.RANDOM_HASHING]
    if random:
        how = f"{' and '.join(random)} hashed strings with a seed of {'their' if len(random) > 1 else 'its'} own"
        how += " (PYTHONHASHSEED unset)"
    elif a.hash_seed != b.hash_seed:
        how = f"the runs hashed strings with different seeds (PYTHONHASHSEED {a.hash_seed} and {b.hash_seed})"
    else:
        return ""
    return (
        f"{how}, and the same events came in another order: a loop that iterates a set of strings meets them in the "
        "order of their hashes, which alone can explain it; record both runs with PYTHONHASHSEED=0"
    )


def _reordered(a: object, b: object) -> bool:
    """Whether two telemetry snapshots hold the same events, as many of each type in each round and env, in another
    order."""
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        return False
    if any(a.get(section) != b.get(section) for section in ("by_type", "by_round", "by_env")):
        return False
    orders = sorted(key for key in {*a, *b} if str(key).startswith("sequence_round_"))
    if all(a.get(key) == b.get(key) for key in orders):
        return False
    return all(
        isinstance(a.get(key), list)
        and isinstance(b.get(key), list)
        and sorted(map(str, a[key])) == sorted(map(str, b[key]))
        for key in orders
    )


def _with_chance(verdict: Verdict, tag: str, lines: list[str]) -> Verdict:
    """A differing verdict with what alone can explain it added (its summary tagged, the lines after its own)."""
    if verdict.status != DIFFERS or not (tag or lines):
        return verdict
    summary = f"{verdict.summary}; {tag}" if tag else verdict.summary  # a line alone rules a cause out
    return dataclasses.replace(verdict, summary=summary, details=(*verdict.details, *lines))


def compare_telemetry(a: Result, b: Result) -> list[Verdict]:
    """Event counts, order and schema; then every payload field."""
    if a.telemetry is None and b.telemetry is None:
        return [Verdict(check, NOT_COMPARED, "no events recorded") for check in ("telemetry", "payloads")]
    if a.telemetry is None or b.telemetry is None:
        side = "A" if a.telemetry is None else "B"
        return [
            Verdict("telemetry", DIFFERS, f"{side} recorded no events", kind="events"),
            Verdict("payloads", NOT_COMPARED, f"{side} recorded no events"),
        ]
    lines = diff_counts(a.telemetry, b.telemetry)
    counts = (
        Verdict("telemetry", SAME, f"identical ({b.telemetry.get('total', 0)} events)")
        if not lines
        else Verdict("telemetry", DIFFERS, lines[0], tuple(lines), "events")
    )
    if a.payloads is None or b.payloads is None:
        return [counts, Verdict("payloads", NOT_COMPARED, "no payload digests")]
    return [counts, compare_payloads_verdict(a, b)]


def compare_payloads_verdict(a: Result, b: Result) -> Verdict:
    """Every payload field, and, when both sides kept the numbers, how big the first difference is and what kind
    (`low-bit drift` or `value change`, the trajectory's rule), else `events` (added, dropped, reordered) or
    `field` (a field appeared or went away); with what alone can explain a difference (`chance`)."""
    return _with_chance(_payloads_verdict(a, b), *chance(a, b))


def _payloads_verdict(a: Result, b: Result) -> Verdict:
    report = compare_trajectories(
        a.payloads, b.payloads, expected_values=a.payload_values, actual_values=b.payload_values
    )
    if report.ok:
        return Verdict("payloads", SAME, f"identical ({len(b.payloads)} events)")
    lines = format_payload_report(report, a.payloads, b.payloads, labels=("A", "B")).splitlines()
    lines.append(f"  events that differ: {differing_labels(a.payloads, b.payloads)}")
    if report.structure:
        return Verdict("payloads", DIFFERS, lines[0], tuple(lines), "events")
    if "<absent>" in (report.expected_digest, report.actual_digest):
        return Verdict("payloads", DIFFERS, lines[0], tuple(lines), "field")
    magnitude = report.magnitude
    if magnitude is not None and magnitude.deltas:
        magnitude = payload_magnitude(magnitude, report.first_name, a.payload_values, b.payload_values)
    where = f"at event {report.first_index} of {report.total} {report.first_name.split(' ', 1)[-1]!r}"
    if magnitude is not None and not magnitude.deltas and magnitude.below_resolution:
        return Verdict("payloads", DIFFERS, f"{magnitude.summary()} {where}", tuple(lines), "values")
    if magnitude is None or not magnitude.deltas:
        kept = a.payload_values is not None and b.payload_values is not None
        why = "the field is not a number" if kept else "values not kept on both sides (recorded with --no-values)"
        lines.append(f"  {why}: compared by digest, magnitude unknown")
        return Verdict("payloads", DIFFERS, lines[0], tuple(lines), "values")
    return Verdict("payloads", DIFFERS, f"{magnitude.summary()} {where}", (*lines, *magnitude.format()), magnitude.kind)


def compare_clock(a: Result, b: Result) -> Verdict:
    """The wall-clock fields the payloads left out, each by its scale against its own run's seconds
    (`tripwire.telemetry.clock`): a unit changed moves one by 1,000 where a slower machine moves field and run
    together."""
    from tripwire.telemetry.clock import ClockField, clock_differences

    fields = {key: ClockField.from_json(key, row) for key, row in dict(b.clock or {}).get("fields", {}).items()}
    lines = clock_differences(a.clock or {}, fields, float((b.clock or {}).get("wall_s", b.seconds)))
    if not lines:
        return Verdict("clock", SAME, f"{len(fields)} wall-clock fields on the same scale")
    return Verdict("clock", DIFFERS, lines[0], tuple(lines), "unit")


def differing_labels(a: Any, b: Any) -> str:
    """Every event label whose payload differs between two payload trajectories, with how often (in run order)."""
    counts: dict[str, int] = {}
    for (name, digests_a), (_, digests_b) in zip(a.checkpoints, b.checkpoints):
        if digests_a != digests_b:
            label = name.split(" ", 1)[-1]
            counts[label] = counts.get(label, 0) + 1
    return ", ".join(f"{label} x{count}" if count > 1 else label for label, count in counts.items()) or "none"


_MEASURED = (DRIFT, AMPLIFIED, VALUE_CHANGE)


def one_kind(trajectory: Verdict, telemetry: list[Verdict]) -> list[Verdict]:
    """`telemetry`'s verdicts, the payload's told which kind stands when it and the trajectory's disagree: the
    trajectory's, which measures the state itself, where a payload is a number the loop logged from it."""
    fixed = []
    for verdict in telemetry:
        disagree = verdict.check == "payloads" and trajectory.kind in _MEASURED and verdict.kind in _MEASURED
        if disagree and verdict.kind != trajectory.kind:
            stands = f"the trajectory's verdict stands: {trajectory.kind} (it measures the state; a payload logs it)"
            verdict = Verdict(
                verdict.check, verdict.status, f"{verdict.summary}; {stands}", verdict.details, verdict.kind
            )
        fixed.append(verdict)
    return fixed


def compare_results(a: Result, b: Result, *, a_label: str = "", b_label: str = "") -> Comparison:
    """Compare result `b` with result `a` (see the module docstring)."""
    labels = (a_label or _label(a), b_label or _label(b))
    run = _run_verdict(a, b)
    context = mismatches(a.context, b.context)
    verdicts = [run, Verdict("context", NOTE if context else SAME, "; ".join(context) or "same", tuple(context))]
    if a.ok and b.ok:
        verdicts += [compare_trajectory(a, b), compare_syncs(a.syncs, b.syncs), compare_compile(a.compile, b.compile)]
        verdicts += one_kind(verdicts[-3], compare_telemetry(a, b))
        tag, lines = chance(a, b)  # the data a run draws moves its counts too (episodes' ends, data-dependent syncs)
        verdicts = [
            _with_chance(verdict, tag, lines) if verdict.check in ("syncs", "compile", "telemetry") else verdict
            for verdict in verdicts
        ]
        if a.clock is not None and b.clock is not None:  # both left wall-clock fields out of their payloads
            verdicts.append(compare_clock(a, b))
    else:
        verdicts += [
            Verdict(check, NOT_COMPARED, "not compared: a side did not run to the end")
            for check in ("trajectory", "syncs", "compile", "telemetry", "payloads")
        ]
    return Comparison(labels[0], labels[1], tuple(verdicts))


def _run_verdict(a: Result, b: Result) -> Verdict:
    if a.ok and b.ok:
        fired = _instruments_differ(a, b)
        if fired:
            return Verdict("run", DIFFERS, fired[0], tuple(fired), "instruments")
        return Verdict("run", SAME, f"both ran ({a.seconds:.1f} s, {b.seconds:.1f} s)")
    if a.status == b.status and a.cause == b.cause:
        status = NOT_COMPARED if a.status == "n/a" else FAILED
        return Verdict("run", status, f"both {a.status}: {a.cause}", kind=a.status)
    details = [f"A {a.status}{': ' + a.cause if a.cause else ''}", f"B {b.status}{': ' + b.cause if b.cause else ''}"]
    side, result = ("B", b) if not b.ok else ("A", a)
    verb = {
        "crash": "crashed",
        "error": "could not run the scenario",
        "n/a": "is not applicable",
        "fault": "was not recorded (tripwire failed)",
    }.get(result.status, "")
    summary = f"{side} {verb}: {result.cause}" if verb else f"{side} {result.status}"
    return Verdict("run", DIFFERS, summary, tuple(details), result.status if not b.ok else "fixed")


def _instruments_differ(a: Result, b: Result) -> list[str]:
    """How the two runs' iteration counts, instrument calls and child processes differ ([] when they agree): fewer
    iterations or an instrument called less often means one side saw less of the loop, and a child process one side
    started and the other did not holds work that neither result shows, whatever else compares equal."""
    lines = []
    iterations_a, iterations_b = len(a.syncs.iterations), len(b.syncs.iterations)
    if iterations_a != iterations_b:
        lines.append(f"iterations: {iterations_a} -> {iterations_b}")
    if a.calls and b.calls:  # a result saved before calls were kept has none
        for target in sorted(set(a.calls) | set(b.calls)):
            before, after = a.calls.get(target), b.calls.get(target)
            if before != after:
                shown = [("not instrumented" if n is None else f"{n} call(s)") for n in (before, after)]
                lines.append(f"{target}: {shown[0]} -> {shown[1]}")
    # a `program` (git, nvidia-smi) runs none of the loop's code: noted in the result, not a difference here
    unseen = [
        {kind: n for kind, n in side.items() if kind != "program"} for side in (a.children or {}, b.children or {})
    ]
    if a.children is not None and b.children is not None and unseen[0] != unseen[1]:
        shown = [", ".join(f"{n} {kind}" for kind, n in side.items()) or "none" for side in unseen]
        lines.append(
            f"child processes started: {shown[0]} -> {shown[1]} (what a child runs is not recorded: the checks "
            "below cover this process only)"
        )
    return lines


def _label(result: Result) -> str:
    commit = result.source.get("commit", "")
    where = str(result.folder) if result.folder is not None else result.source.get("root", "")
    return f"{where}" + (f" ({commit[:12]})" if commit else "")


__all__: list[Any] = [
    "Comparison",
    "SiteChange",
    "Verdict",
    "compare_compile",
    "compare_events",
    "compare_results",
    "compare_syncs",
    "site_changes",
]
