"""The first commit that shows each kind of change between A and B, found by bisection.

A and B are run and compared. For each check that differs between them (the run's status, the trajectory, the
syncs, the telemetry counts, the payloads), a binary search over the commits between them finds the first commit
whose result differs from A's in that check. A trajectory that differs by more than drift between A and B is
searched twice: for the first difference of any kind (often a low-bit drift) and for the first of B's kind (the
first value change, or structure change): a probe that differs moves the upper end down, one that matches moves
the lower end up. Like `git bisect`, this assumes a change, once made, stays: a change that comes and goes is found
once, at some commit where it is present. A probe that did not run to the end cannot say anything about the
trajectory, syncs or telemetry: the nearest commit between the ends that did run is probed instead (as
`git bisect skip` would), and when none did, the answer is the range. Results are shared with the walk's cache, so
every probe runs at most once, whatever the number of kinds.

`bisect_all` (`--bisect all`) finds every change point instead: a segment whose two ends differ in a check is split
at a commit between them until each difference sits between two neighbouring commits, and each point is measured
and classified against its own predecessor, so a reassociation after an earlier, unrelated value change is found
and named as drift without a second hand-made bisection. Segments whose ends agree are not searched: a change that
a later commit undoes within one segment is not found (`git bisect`'s assumption, one level down).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from tripwire.history.commits import Commit
from tripwire.history.rows import has_values, measured_verdict, with_values
from tripwire.history.runner import Runner
from tripwire.outside.compare import (
    DIFFERS,
    Verdict,
    compare_compile,
    compare_payloads_verdict,
    compare_syncs,
    compare_telemetry,
    compare_trajectory,
)
from tripwire.outside.result import Result

BISECTED = ("run", "trajectory", "syncs", "compile", "telemetry", "payloads")


@dataclass
class Finding:
    """The first commit showing a change of one check, how many probes it took, and what the change is."""

    check: str
    first: Commit | None  # None: only a range could be named (every commit in it failed to run)
    steps: int
    summary: str
    range: tuple[Commit, Commit] | None = None
    probes: list[str] = field(default_factory=list)  # the shas probed, in order
    rounds: int = 0  # rounds of probes run at once (`--jobs` of them a round)
    more_after: bool = False  # plain bisection: the check changed again between this first commit and B


def _verdict(check: str, base: Result, probe: Result, *, measured: bool = False) -> Verdict:
    """`check`'s verdict of `probe` against `base`; `measured`: the trajectory and payloads with both sides' values
    (how big, what kind), which costs a pass over every differing tensor."""
    if check == "trajectory":
        if measured and has_values(base) and has_values(probe):
            return measured_verdict(
                base, probe, check, lambda: compare_trajectory(with_values(base), with_values(probe))
            )
        return compare_trajectory(base, probe)
    if check == "syncs":
        return compare_syncs(base.syncs, probe.syncs)
    if check == "compile":
        return compare_compile(base.compile, probe.compile)
    if check == "payloads" and measured and has_values(base) and has_values(probe):
        return measured_verdict(
            base, probe, check, lambda: compare_payloads_verdict(with_values(base), with_values(probe))
        )
    return next(verdict for verdict in compare_telemetry(base, probe) if verdict.check == check)


def _differs(check: str, kind: str, base: Result, probe: Result) -> bool:
    """Whether `probe` differs from `base` in `check` (and, when `kind` is given, by a difference of that kind)."""
    if check == "run":
        return probe.status != base.status
    verdict = _verdict(check, base, probe, measured=bool(kind))
    if verdict.status != DIFFERS:
        return False
    return not kind or _kind(verdict) == kind


def _kind(verdict: Verdict) -> str:
    return {"checkpoints": "structure"}.get(verdict.kind, verdict.kind)


def _usable(runner: Runner, commits: Sequence[Commit], low: int, high: int, middle: int) -> tuple[int, Result] | None:
    """The commit nearest `middle`, strictly between `low` and `high`, that ran to the end."""
    order = sorted(range(low + 1, high), key=lambda index: (abs(index - middle), index))
    for index in order:
        result = runner.result(commits[index])
        if result.ok:
            return index, result
    return None


def _points(low: int, high: int, jobs: int) -> list[int]:
    """Up to `jobs` commits strictly between `low` and `high`, evenly spaced (one job: the middle)."""
    count = min(jobs, high - low - 1)
    return sorted({low + (step * (high - low)) // (count + 1) for step in range(1, count + 1)})


def bisect_check(runner: Runner, commits: Sequence[Commit], check: str, base: Result, kind: str = "") -> Finding:
    """Search for the first commit whose `check` differs from the first commit's (see the module docstring); with
    `kind`, by a difference of that kind. With `jobs` > 1 each round probes that many commits at once, evenly
    spaced, and keeps the part between the last that matches and the first that differs (k jobs cut the range
    k + 1 ways a round, instead of two)."""
    label = f"{check} ({kind})" if kind else check
    low, high = 0, len(commits) - 1
    steps = rounds = 0
    probes: list[str] = []
    while high - low > 1:
        points = _points(low, high, max(1, runner.settings.jobs))
        ran = runner.results([commits[index] for index in points])
        usable = [(index, ran[commits[index].sha]) for index in points]
        steps += len(points)
        probes += [commits[index].sha for index in points]
        if check != "run":
            usable = [(index, result) for index, result in usable if result.ok]
        if not usable:  # every probe of the round failed to run: the nearest commit that did, one at a time
            found = _usable(runner, commits, low, high, (low + high) // 2)
            if found is None:
                summary = f"every commit between {commits[low].short} and {commits[high].short} failed to run"
                return Finding(label, None, steps, summary, (commits[low], commits[high]), probes, rounds + 1)
            usable = [found]
            steps += 1
            probes.append(commits[found[0]].sha)
        rounds += 1
        for index, result in usable:
            if _differs(check, kind, base, result):
                high = index
                break
            low = index
    first = commits[high]
    final = runner.result(first)
    summary = (
        f"{final.status}: {final.cause}" if check == "run" else _verdict(check, base, final, measured=True).summary
    )
    return Finding(label, first, steps, summary, probes=probes, rounds=rounds)


def _base_and_head(runner: Runner, commits: Sequence[Commit]) -> tuple[Result, Result]:
    ran = runner.results([commits[0], commits[-1]])  # together, with two jobs
    base, head = ran[commits[0].sha], ran[commits[-1].sha]
    if not base.ok:
        raise ValueError(f"the base {commits[0].short} did not run ({base.status}: {base.cause}): pick another A")
    return base, head


def bisect_all(runner: Runner, commits: Sequence[Commit]) -> tuple[list[Finding], Result, Result]:
    """`(findings, A's result, B's result)`: one finding per change point of each check between A and B, in commit
    order, each labelled with its own kind (see the module docstring)."""
    base, head = _base_and_head(runner, commits)
    findings: list[Finding] = []
    last = len(commits) - 1
    for check in BISECTED:
        end = (last, head) if check == "run" or head.ok else _usable(runner, commits, 0, last + 1, last)
        if end is None:
            continue
        probes: list[str] = []
        _split(runner, commits, check, (0, base), end, probes, findings)
    return findings, base, head


def _split(
    runner: Runner,
    commits: Sequence[Commit],
    check: str,
    low: tuple[int, Result],
    high: tuple[int, Result],
    probes: list[str],
    findings: list[Finding],
) -> None:
    """Every change point of `check` between two commits that differ in it (a stack, not recursion: a long walk
    with many points must not hit Python's recursion limit). With `jobs` > 1, that many segments are split at once:
    their middles run together, then each is split as with one job."""
    pending = [(low, high)]
    jobs = max(1, runner.settings.jobs)
    found: list[Finding] = []
    while pending:
        batch = [pending.pop() for _ in range(min(jobs, len(pending)))]
        batch = [((lo, a), (hi, b)) for (lo, a), (hi, b) in batch if _differs(check, "", a, b)]
        middles = [commits[(lo + hi) // 2] for (lo, _), (hi, _) in batch if hi - lo > 1]
        if len(middles) > 1:
            runner.results(middles)  # run together; each is read from the cache below
        split: list[tuple[tuple[int, Result], tuple[int, Result]]] = []
        for (lo, a), (hi, b) in batch:
            if hi - lo == 1:
                verdict = None if check == "run" else _verdict(check, a, b, measured=True)
                kind = "run" if verdict is None else _kind(verdict) or "differs"
                summary = f"{b.status}: {b.cause}" if verdict is None else verdict.summary
                label = check if check == "run" else f"{check} ({kind})"
                found.append(Finding(label, commits[hi], len(probes), summary, probes=list(probes)))
                continue
            middle = (lo + hi) // 2
            point = (
                (middle, runner.result(commits[middle])) if check == "run" else _usable(runner, commits, lo, hi, middle)
            )
            if point is None:
                summary = f"every commit between {commits[lo].short} and {commits[hi].short} failed to run"
                found.append(Finding(check, None, len(probes), summary, (commits[lo], commits[hi]), list(probes)))
                continue
            probes.append(commits[point[0]].sha)
            split += [((lo, a), point), (point, (hi, b))]
        pending += reversed(split)  # the earliest segment on top: points are found roughly in commit order
    order = {commit.sha: index for index, commit in enumerate(commits)}
    found.sort(key=lambda finding: order[(finding.first or _range_start(finding, commits)).sha])
    findings += found


def _range_start(finding: Finding, commits: Sequence[Commit]) -> Commit:
    """Where a finding that names only a range begins (every finding names a first commit or a range)."""
    return finding.range[0] if finding.range else commits[0]


def bisect(runner: Runner, commits: Sequence[Commit]) -> tuple[list[Finding], Result, Result]:
    """`(findings, A's result, B's result)`: one finding per check that differs between A and B."""
    base, head = _base_and_head(runner, commits)
    findings = []
    for check in BISECTED:
        if check != "run" and not head.ok:
            continue  # a crashed B says nothing of the other checks; the run finding names where it broke
        if _differs(check, "", base, head):
            findings.append(_with_more(runner, bisect_check(runner, commits, check, base), head))
        if check == "trajectory" and head.ok:
            kind = _kind(_verdict(check, base, head, measured=True))
            if kind in ("value change", "structure"):
                findings.append(_with_more(runner, bisect_check(runner, commits, check, base, kind), head))
    return findings, base, head


def _with_more(runner: Runner, finding: Finding, head: Result) -> Finding:
    """`finding`, marked when its check changed again between its first commit and B (so `--bisect all` would name
    more change points than the first): the first commit's result differs from B's in that check."""
    if finding.first is None:
        return finding
    first = runner.result(finding.first)
    check = finding.check.split(" (", 1)[0]
    if (
        first.ok
        and head.ok
        and first.source.get("commit") != head.source.get("commit")
        and _differs(check, "", first, head)
    ):
        return dataclasses.replace(finding, more_after=True)
    return finding
