"""`python -m tripwire.bench.ab`: benchmark two source trees on one machine in interleaved turns, then gate B on A.

    python -m tripwire.bench.ab --base ../base --head . [--turns 2] [--out build/bench-ab] [-k train_pass]

Each turn runs the benchmark suite of both trees once, alternating which goes first (A B, then B A, ...), so a
machine that gets slower or faster during the job affects both sides alike. Each tree runs its own suite
(`<tree>/benchmarks`) with `PYTHONPATH=<tree>/src`. The per-round samples of all turns are pooled per side and
compared by the same gate as `python -m tripwire.bench --compare` (calibration-normalized rounds, Mann-Whitney U
plus a per-benchmark threshold, exact proxies). This is the pull-request check: no committed baseline is needed,
because base and head are measured side by side. Arguments the tool does not know go to pytest.

Exit codes: 0 pass, 1 regression / changed proxy / missing benchmark (or a suite failed), 2 a usage error.
The markdown report is appended to `$GITHUB_STEP_SUMMARY` when it is set.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from tripwire.bench.gate import compare_runs
from tripwire.bench.report import dumps_json, render_markdown, render_text
from tripwire.bench.store import BenchRecord, BenchRun, ResultsError, load_results

DEVICE_ENV = "TRIPWIRE_BENCH_DEVICE"
SIDES = ("base", "head")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tripwire.bench.ab", description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the tree to compare against (A), e.g. a checkout of main")
    parser.add_argument("--head", required=True, help="the tree under test (B)")
    parser.add_argument("--turns", type=int, default=2, help="interleaved turns; each runs both suites (default 2)")
    parser.add_argument("--suite", default="benchmarks", help="suite folder inside each tree (default benchmarks)")
    parser.add_argument("--device", default="cpu", help="device the suites run on (default cpu)")
    parser.add_argument("--out", default="build/bench-ab", help="results and reports (default build/bench-ab)")
    return parser


def turn_order(turn: int) -> tuple[str, str]:
    """A B on even turns, B A on odd ones."""
    return SIDES if turn % 2 == 0 else (SIDES[1], SIDES[0])


def run_suite(tree: Path, suite: str, device: str, results: Path, extra: Sequence[str]) -> int:
    """Run `tree`'s benchmark suite against `tree`'s own sources; returns pytest's exit code."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(tree / suite),
        "-p",
        "no:cacheprovider",
        "--benchmark-only",
        f"--benchmark-json={results}",
        "--benchmark-columns=min,median,max,rounds",
        "-q",
        *extra,
    ]
    path = os.pathsep.join([str(tree / "src"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env = {**os.environ, DEVICE_ENV: device, "PYTHONPATH": path}
    print(f"running {tree}: {' '.join(command[1:])}", flush=True)
    return subprocess.run(command, cwd=tree, env=env, check=False).returncode


def pool(runs: Sequence[BenchRun]) -> BenchRun:
    """One run whose records hold the rounds of every run (the first run's settings, proxies and context)."""
    first = runs[0]
    records: dict[str, BenchRecord] = {}
    for name, record in first.records.items():
        same = [run.records[name] for run in runs if name in run.records]
        records[name] = replace(
            record,
            samples_ms=tuple(v for r in same for v in r.samples_ms),
            calibration_ms=tuple(v for r in same for v in r.calibration_ms),
            cpu_ms=tuple(v for r in same for v in r.cpu_ms),
            calibration_cpu_ms=tuple(v for r in same for v in r.calibration_cpu_ms),
        )
    return BenchRun(device=first.device, context=dict(first.context), records=records)


def report(base: BenchRun, head: BenchRun, out: Path, title: str) -> int:
    comparison = compare_runs(base, head)
    markdown = f"### {title}\n\n{render_markdown(comparison)}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench-ab.md").write_text(markdown, encoding="utf-8")
    (out / "bench-ab.json").write_text(dumps_json(comparison), encoding="utf-8")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as handle:
            handle.write(markdown + "\n")
    print(f"\n{title}\n{render_text(comparison)}\nreports: {out / 'bench-ab.md'}, {out / 'bench-ab.json'}")
    return 1 if comparison.failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    args, extra = build_parser().parse_known_args(sys.argv[1:] if argv is None else list(argv))
    trees = {"base": Path(args.base).resolve(), "head": Path(args.head).resolve()}
    for side, tree in trees.items():
        if not (tree / args.suite).is_dir():
            print(f"error: --{side} {tree} has no {args.suite}/ folder; pass the root of a checkout", file=sys.stderr)
            return 2
    if args.turns < 1:
        print(f"error: --turns {args.turns}: need at least 1 turn", file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[BenchRun]] = {side: [] for side in SIDES}
    try:
        for turn in range(args.turns):
            for side in turn_order(turn):
                path = out / f"{side}-{turn}.json"
                code = run_suite(trees[side], args.suite, args.device, path, extra)
                if code != 0:
                    print(f"error: the {side} suite failed (pytest exit {code}); nothing was gated", file=sys.stderr)
                    return 1
                results[side].append(load_results(path))
    except ResultsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    title = f"Benchmarks A/B: head vs base, {args.turns} interleaved turn(s) on one machine"
    return report(pool(results["base"]), pool(results["head"]), out, title)


if __name__ == "__main__":
    raise SystemExit(main())
