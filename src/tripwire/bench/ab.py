"""`python -m tripwire bench-ab`: paired A/B of two source trees on one machine, gated on a confidence interval.

    python -m tripwire bench-ab --base ../base --head . [-k train_pass] [--out build/bench-ab]
    python -m tripwire bench-ab --base . --head . --head-env ESPER_BENCH_SLOWDOWN=train_pass:0.10   # prove it

Base and head each run in a persistent worker process (`tripwire.bench.worker`) that imports its own tree's
trainer; the two alternate unit by unit (ABBA, then BAAB), warm-ups discarded, so both see the same machine noise.
The verdict per benchmark comes from the distribution of paired ratios: REGRESSION when the 95 % bootstrap
interval lies above zero and the estimate exceeds the benchmark's tolerance (`tripwire.bench.paired_stats`); any
difference in the exact proxies (aten ops, host syncs per run) fails as CHANGED. No stored baseline is involved,
so the figures never mix machines or days. This is what the pull-request workflow runs.

Each tree's suite is `<tree>/benchmarks/workloads.py:paired_benchmarks` (`--suite`, `--suite-dir`); a base whose
suite lacks the function is timed with the head's suite (`--workloads-from` chooses explicitly). Outputs in `--out`:
`bench-ab.md` (also appended to `$GITHUB_STEP_SUMMARY`), `bench-ab.json` (every raw unit), `bench-ab.png` and
`bench-ab.svg`, and each worker's log. Exit codes: 0 pass, 1 a regression / changed proxy / missing benchmark or a
worker failure, 2 a usage error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from tripwire.bench.paired import PairedComparison, PairedError, Schedule, Side, compare_sides
from tripwire.bench.paired_report import dumps_json, render_markdown, render_text
from tripwire.bench.plots import plot_paired
from tripwire.bench.report import publish_report


class UsageError(Exception):
    """A bad invocation; the message is one line saying what to do instead."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tripwire bench-ab", description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the tree to compare against (A), e.g. a checkout of main")
    parser.add_argument("--head", required=True, help="the tree under test (B)")
    parser.add_argument("--suite", default="workloads:paired_benchmarks", help="module:function of the suite")
    parser.add_argument("--suite-dir", default="benchmarks", help="folder of the suite module inside each tree")
    parser.add_argument(
        "--workloads-from",
        choices=("auto", "own", "head"),
        default="auto",
        help="whose suite each side runs (auto: its own, or the head's for a base that has none)",
    )
    parser.add_argument("--device", default="cpu", help="device the workers run on (default cpu)")
    parser.add_argument("--clock", choices=("cpu", "wall"), help="gated clock (default: cpu on CPU, wall on CUDA)")
    parser.add_argument("-k", dest="keywords", action="append", default=[], help="only benchmarks containing this")
    parser.add_argument("--budget-s", type=float, default=30.0, help="seconds per benchmark at most (default 30)")
    parser.add_argument("--min-blocks", type=int, default=12, help="ABBA blocks at least (default 12)")
    parser.add_argument("--max-blocks", type=int, default=48, help="ABBA blocks at most (default 48)")
    parser.add_argument("--warmup-units", type=int, default=2, help="discarded units per side (default 2)")
    parser.add_argument("--base-env", action="append", default=[], metavar="KEY=VALUE", help="extra env for base")
    parser.add_argument("--head-env", action="append", default=[], metavar="KEY=VALUE", help="extra env for head")
    parser.add_argument(
        "--pin-cpu",
        type=cpu_choice,
        default="auto",
        metavar="N|auto|none",
        help="the CPU both workers run benchmarks of one thread in all on (one torch thread, one worker; "
        "default auto: the highest allowed one)",
    )
    parser.add_argument("--out", default="build/bench-ab", help="reports, plots and logs (default build/bench-ab)")
    parser.add_argument("--title", default="Benchmarks A/B: head vs base, paired units on one machine")
    return parser


def cpu_choice(text: str) -> int | str | None:
    if text in ("auto", "none"):
        return None if text == "none" else text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a CPU number, auto or none, got {text!r}") from None


def parse_env(pairs: Sequence[str], flag: str) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} {pair!r}: expected KEY=VALUE, e.g. {flag} ESPER_BENCH_SLOWDOWN=train_pass:0.1")
        env[key] = value
    return env


def defines(suite_dir: Path, suite: str) -> bool:
    """Whether `suite_dir` holds the module of `module:function` and the module defines the function."""
    module, _, function = suite.partition(":")
    path = suite_dir / (module.replace(".", "/") + ".py")
    return path.is_file() and f"def {function}(" in path.read_text(encoding="utf-8", errors="replace")


def sides_from(args: argparse.Namespace) -> tuple[Side, Side]:
    trees = {"base": Path(args.base).resolve(), "head": Path(args.head).resolve()}
    for label, tree in trees.items():
        if not (tree / args.suite_dir).is_dir():
            raise UsageError(f"--{label} {tree} has no {args.suite_dir}/ folder; pass the root of a checkout")
    suite_dirs = {label: tree / args.suite_dir for label, tree in trees.items()}
    if args.workloads_from == "head" or (args.workloads_from == "auto" and not defines(suite_dirs["base"], args.suite)):
        if args.workloads_from == "auto":
            print(f"note: the base has no {args.suite}; timing the base with the head's suite", file=sys.stderr)
        suite_dirs["base"] = suite_dirs["head"]
    envs = {"base": parse_env(args.base_env, "--base-env"), "head": parse_env(args.head_env, "--head-env")}
    base, head = (Side(label, trees[label], suite_dirs[label], args.suite, env=envs[label]) for label in trees)
    return base, head


def schedule_from(args: argparse.Namespace) -> Schedule:
    clock = args.clock or ("cpu" if args.device.split(":")[0] == "cpu" else "wall")
    try:
        return Schedule(
            warmup_units=args.warmup_units,
            min_blocks=args.min_blocks,
            max_blocks=args.max_blocks,
            budget_s=args.budget_s,
            clock=clock,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def write_reports(comparison: PairedComparison, out: Path, title: str) -> Path:
    plots = plot_paired(comparison, out)
    markdown = render_markdown(comparison, title, [path.name for path in plots if path.suffix == ".png"])
    report, data = publish_report(out, "bench-ab", markdown, dumps_json(comparison))
    print(f"\n{title}\n{render_text(comparison)}")
    print(f"reports: {report}, {data}; plots: {', '.join(str(p) for p in plots) or 'none'}")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        sides, schedule = sides_from(args), schedule_from(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    try:
        comparison = compare_sides(
            sides, schedule, out, device=args.device, keywords=args.keywords, pin_cpu=args.pin_cpu
        )
    except PairedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    write_reports(comparison, out, args.title)
    return 1 if comparison.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
