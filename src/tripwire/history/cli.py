"""`python -m tripwire history`: walk a scenario over a commit range, or bisect the first commit of each change.

    python -m tripwire history --repo PATH --range A..B --scenario FILE [--out DIR] [--paths P ...] [--jobs N]
    python -m tripwire history ... --bisect [all]

The walk runs every commit of the range (A first, then `git rev-list A..B`, only those touching `--paths` when
given), compares each with the one before and writes `history.md`, `history.json` and `history.png`/`.svg` under
`--out`; each row names the commit it was compared with and how many commits between them it did not run.
`--bisect` runs A and B, and for each check that differs finds the first commit that shows it; `--bisect all` finds
every change point of each check, each classified against its own predecessor (`bisect.md`, `bisect.json`,
`bisect.png`). Results are cached under `--out`: a second run is free, and an interrupted one (Ctrl-C) resumes
where it stopped. A commit that changed nothing an earlier commit's run read takes that result instead of running
(`tripwire.history.reuse`; `--no-reuse` runs every commit). Progress is live on a terminal (rich), one line per
commit elsewhere. The scenario file is loaded once before anything runs: one that cannot load is a usage error, not
a crash at every commit. Exit codes: 0 the walk or bisection finished, 1 it could not (the base did not run), 2 a
usage error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tripwire.common.errors import TripwireError
from tripwire.common.files import output_folder
from tripwire.history.bisect import Finding, bisect, bisect_all
from tripwire.history.commits import Commit, commits_between, list_commits, merged_in
from tripwire.history.report import write_report
from tripwire.history.rows import Row, walk_rows
from tripwire.history.runner import Runner, WalkSettings
from tripwire.outside.result import Result


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = _Parser(prog="python -m tripwire history", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True, help="the git repository to walk")
    parser.add_argument("--range", dest="span", required=True, help="A..B: A is the base, then every commit to B")
    parser.add_argument("--scenario", type=Path, required=True, help="the scenario file run on each commit")
    parser.add_argument("--out", type=Path, help="report and cache folder (default: build/history/<scenario>)")
    parser.add_argument("--paths", nargs="+", default=[], help="only commits touching these paths (and A)")
    parser.add_argument("--first-parent", action="store_true", help="only the first-parent line (merges as steps)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="commits run at once")
    parser.add_argument(
        "--bisect",
        nargs="?",
        const="first",
        choices=("first", "all"),
        help="find the first commit of each kind of change (`all`: every change point)",
    )
    parser.add_argument("--cpu-pin", choices=("avx2", "native"), default="avx2", help="the workers' CPU kernels")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a commit may run")
    parser.add_argument("--keep-trees", action="store_true", help="keep each commit's worktree under OUT/trees")
    parser.add_argument(
        "--no-reuse",
        action="store_true",
        help="run every commit, even one that changed nothing an earlier run read (tripwire.history.reuse)",
    )
    return parser.parse_args(argv)


class Progress:
    """Live progress: a rich bar on a terminal, else one line per commit on stderr. `total` None: not known
    ahead (a bisection), so the count is shown without one."""

    def __init__(self, total: int | None) -> None:
        self.total, self.done, self.ran, self.reused, self.start = total, 0, 0, 0, time.perf_counter()
        self._seen: set[str] = set()
        self._rich: Any = None
        if sys.stderr.isatty():
            try:
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            except ImportError:
                pass
            else:
                columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
                self._rich = Progress(*columns, transient=True)
                self._task = self._rich.add_task("commits", total=total)
                self._rich.start()

    def __call__(self, commit: Commit, what: str, result: Result, seconds: float) -> None:
        if commit.sha in self._seen:
            return  # bisection asks for a commit more than once: it is counted, and shown, once
        self._seen.add(commit.sha)
        self.done += 1
        self.ran += what == "ran"
        self.reused += what == "reused"
        counter = f"[{self.done}/{self.total}]" if self.total else f"[{self.done}]"
        line = f"{counter} {commit.short} {result.status:<5} {what:<6} {seconds:5.1f} s  {commit.subject[:60]}"
        if self._rich is not None:
            self._rich.update(self._task, advance=1, description=f"{commit.short} {result.status}")
            self._rich.console.print(line, highlight=False)
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._rich is not None:
            self._rich.stop()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # before the walk started, or while writing its report: nothing to lose
        print("interrupted: run the same command again (results already recorded are kept)", file=sys.stderr)
        return 130


def _main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    repo = args.repo.resolve()
    out = (args.out or Path("build") / "history" / args.scenario.stem).resolve()
    try:
        _loads(args.scenario)
        output_folder(out, "--out")  # before the walk: its report and cache go there
        commits = list_commits(repo, args.span, args.paths, first_parent=args.first_parent)
    except TripwireError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if len(commits) < 2:
        touching = args.paths or "anything"
        print(f"error: --range {args.span} holds no commit after the base (touching {touching})", file=sys.stderr)
        return 2
    settings = WalkSettings(
        repo,
        args.scenario.resolve(),
        out,
        args.jobs,
        args.cpu_pin,
        args.timeout,
        args.keep_trees,
        reuse=not args.no_reuse,
    )
    progress = Progress(None if args.bisect else len(commits))
    start = time.perf_counter()
    runner = Runner(settings, progress)
    try:
        if args.bisect:
            findings, _, _ = (bisect_all if args.bisect == "all" else bisect)(runner, commits)
            probed = [commit for commit in commits if commit.sha in runner.asked]
            rows = walk_rows(probed, runner.asked, runner.seconds)
        else:
            findings = []
            results = runner.results(commits)
            rows = walk_rows(commits, results, runner.seconds)
        for row in rows:
            if row.against:
                row.between = commits_between(repo, row.against, row.commit.sha, first_parent=args.first_parent)
                row.merged = merged_in(repo, row.commit.sha) if args.first_parent else []
    except KeyboardInterrupt:
        runner.stop()
        progress.close()
        print(
            f"interrupted: {progress.done} commit(s) done and kept under {runner.cache}; run the same command again "
            "to resume",
            file=sys.stderr,
        )
        return 130
    except (TripwireError, ValueError) as error:
        progress.close()
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        runner.close()
    progress.close()
    elapsed = time.perf_counter() - start
    meta = {
        "repo": str(repo),
        "range": args.span,
        "paths": args.paths,
        "scenario": str(settings.scenario),
        "cache": str(runner.cache),
        "commits": len(commits),
        "ran": progress.ran,
        "reused": progress.reused,
        "seconds": round(elapsed, 1),
        # what recording these results cost when each was first run (kept with each cached result): a walk over a
        # cache reports its own seconds above, never in place of the walk that produced it
        "recorded_seconds": round(sum(row.seconds for row in rows), 1),
        "jobs": args.jobs,
    }
    span = f"{commits[0].short}..{commits[-1].short}"
    what = {"first": " (bisection)", "all": " (every change point)"}.get(args.bisect or "", "")
    title = f"tripwire history: {settings.scenario.name} over {span}{what}"
    files = write_report(out, rows, findings, meta, title, "bisect" if args.bisect else "history")
    _print_summary(rows, findings, progress, elapsed, files, "" if args.bisect == "all" else "first ")
    if args.bisect == "first":
        more = more_with_all(findings)
        if more:
            print(more)
    if rows and all(row.status in FAILED_RUNS for row in rows):
        print(
            f"error: no commit of the walk ran the scenario to the end ({_statuses(rows)}): the scenario does not "
            f"fit this history; read the first row's cause in {files[0] if files else out}",
            file=sys.stderr,
        )
        return 1
    return 0


FAILED_RUNS = ("crash", "error", "fault")


def _statuses(rows: list[Row]) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    return ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))


def more_with_all(findings: Sequence[Finding]) -> str:
    """A plain `--bisect` finds the first commit of each check that differs between A and B; a check can change more
    than once (a drift, then a value change), and `--bisect all` finds every change point. One line when a finding's
    check changed again after its first change point, or when its kind at B is not the kind it first showed."""
    hinted = [finding for finding in findings if finding.more_after]
    if not hinted:
        return ""
    names = ", ".join(f"{finding.check} (first at {finding.first.short})" for finding in hinted if finding.first)
    return f"note: {names} changed again later in the range: --bisect all finds every change point"


def _loads(scenario: Path) -> None:
    """Load the scenario file here, once, as each worker will: a syntax error or a missing `scenario` is a usage
    error before the walk, not a crash recorded at every commit."""
    from tripwire.scenario import load_scenario

    load_scenario(scenario)


def _print_summary(
    rows: Sequence[Any],
    findings: Sequence[Finding],
    progress: Progress,
    elapsed: float,
    files: Sequence[Path],
    first: str = "first ",
) -> None:
    for row in rows if not findings else ():
        compared = f"  ({row.compared})" if row.between or row.merged else ""
        print(f"{row.commit.short}  {row.step:<17} {row.commit.subject[:70]}{compared}")
    for finding in findings:
        where = f"{finding.first.short} {finding.first.subject[:60]}" if finding.first else "a range"
        rounds = f" in {finding.rounds} rounds" if finding.rounds else ""
        print(f"{first}{finding.check} change: {where} ({finding.steps} probes{rounds}): {finding.summary[:100]}")
    per = f", {elapsed / progress.done:.2f} s per commit" if progress.ran + progress.reused else ""
    recorded = sum(row.seconds for row in rows)
    cost = f"; recording them took {recorded:.0f} s of worker time" if progress.ran < progress.done else ""
    cached = progress.done - progress.ran - progress.reused
    print(
        f"{progress.done} commits ({progress.ran} run, {progress.reused} reused, {cached} cached) in {elapsed:.1f} s"
        f"{per}{cost}"
    )
    print("wrote " + ", ".join(str(path) for path in files))
