"""`python -m tripwire.bench`: run a pytest-benchmark suite, then save it as a baseline or gate it against one.

    python -m tripwire.bench --suite benchmarks                       # run, print pytest-benchmark's table
    python -m tripwire.bench --suite benchmarks --compare baselines/  # ... and gate against baselines/bench/<dev>.json
    python -m tripwire.bench --suite benchmarks --save                # ... and write baselines/bench/<dev>.json
    python -m tripwire.bench --current build/bench/current.json --compare baselines/   # gate saved results

The suite's benchmarks must record their rounds with `tripwire.bench.fixture.measure`; the device they run on is
passed to the suite in the `TRIPWIRE_BENCH_DEVICE` environment variable. Arguments the tool does not know are
passed on to pytest (e.g. `-k epoch`). pytest-benchmark's own `--benchmark-compare` cannot take a directory,
has no significance test and gates neither throughput nor exact counts; this tool does (see `tripwire.bench.gate`).

Outputs (under `--out`, default build/bench): `current.json` (pytest-benchmark JSON, raw rounds included),
`bench-report.json`, `bench-report.md` (appended to `$GITHUB_STEP_SUMMARY` when that is set) and, with
`--compare`, `bench.png` / `bench.svg`: baseline vs this run per benchmark, and the baseline's committed history.
Comparing against a stored baseline is for local use: across machines it can only judge by the threshold (the
report says so); the pull-request gate is the paired A/B, `python -m tripwire bench-ab`.
Exit codes: 0 pass, 1 regression / changed proxy / missing benchmark (or the suite failed), 2 a usage error or a
missing, corrupted or hand-edited baseline (one line on stderr naming the file and the fix).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tripwire.bench.gate import compare_runs
from tripwire.bench.history import baseline_history
from tripwire.bench.plots import plot_baseline
from tripwire.bench.report import dumps_json, publish_report, render_markdown, render_text
from tripwire.bench.store import BaselineError, BenchRun, ResultsError, baseline_path, load_results, read_baseline
from tripwire.bench.store import write_baseline as write_baseline_file

DEVICE_ENV = "TRIPWIRE_BENCH_DEVICE"
DEFAULT_BASELINES = "baselines"
EXIT_FAIL = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """A bad invocation; the message is one line saying what to do instead."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tripwire.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="benchmarks", help="pytest-benchmark suite to run (default: benchmarks)")
    parser.add_argument("--device", default="cpu", help="device the suite runs on: cpu or cuda (default: cpu)")
    parser.add_argument("--compare", metavar="DIR_OR_FILE", help="gate against DIR/bench/<device>.json or a file")
    parser.add_argument("--save", nargs="?", const=DEFAULT_BASELINES, metavar="DIR", help="write a new baseline")
    parser.add_argument("--current", metavar="FILE", help="use these pytest-benchmark results instead of running")
    parser.add_argument("--out", default="build/bench", help="where results and reports go (default: build/bench)")
    return parser


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    args, extra = build_parser().parse_known_args(list(argv))
    if args.save is not None and args.compare is not None:
        raise UsageError("--save and --compare exclude each other: gate first, then record a baseline on purpose")
    if args.save is not None and os.environ.get("CI"):
        raise UsageError(
            f"--save refuses to run under CI (CI={os.environ['CI']!r}): baselines are recorded on purpose on a "
            "quiet machine and committed; unset CI to record one"
        )
    if args.current is not None and extra:
        raise UsageError(f"--current gates saved results, so pytest arguments {extra} would be ignored; drop them")
    return args, extra


def run_suite(args: argparse.Namespace, extra: Sequence[str], results: Path) -> int:
    """Run the benchmark suite in a subprocess; returns pytest's exit code."""
    results.parent.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "pytest",
        args.suite,
        "-p",
        "no:cacheprovider",
        "--benchmark-only",
        f"--benchmark-json={results}",
        "--benchmark-columns=min,median,max,rounds",
        "--benchmark-sort=name",
        *extra,
    ]
    env = {**os.environ, DEVICE_ENV: args.device}
    print("running:", " ".join(command), flush=True)
    return subprocess.run(command, env=env, check=False).returncode


def gate(baseline_file: Path, current: BenchRun, out: Path) -> int:
    baseline = read_baseline(baseline_file)
    if baseline.device != current.device:
        raise BaselineError(f"{baseline_file}: recorded on {baseline.device}, this run is on {current.device}")
    comparison = compare_runs(baseline, current)
    plots = plot_baseline(baseline, current, baseline_history(baseline_file), out)
    markdown = render_markdown(comparison, [path.name for path in plots if path.suffix == ".png"])
    report, data = publish_report(out, "bench-report", markdown, dumps_json(comparison))
    print(f"\ncompared against {baseline_file}\n{render_text(comparison)}")
    print(f"reports: {report}, {data}; plots: {', '.join(map(str, plots))}")
    return EXIT_FAIL if comparison.failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args, extra = parse(sys.argv[1:] if argv is None else argv)
        out = Path(args.out)
        if args.current is not None:
            results = Path(args.current)
        else:
            results = out / "current.json"
            code = run_suite(args, extra, results)
            if code != 0:
                print(
                    f"error: the benchmark suite failed (pytest exit code {code}); nothing was gated", file=sys.stderr
                )
                return EXIT_FAIL
        current = load_results(results)
        if args.save is not None:
            written = write_baseline_file(baseline_path(args.save, current.device), current)
            print(f"baseline written: {written} ({len(current.records)} benchmarks); review and commit it")
            return 0
        if args.compare is not None:
            return gate(baseline_path(args.compare, current.device), current, out)
        return 0
    except (UsageError, BaselineError, ResultsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    raise SystemExit(main())
