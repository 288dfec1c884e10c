"""Ours against the original, side by side in one run on one machine: env-epochs/s, their ratio, our overhead.

    python benchmarks/original_comparison.py --original PATH [--runs 3] [--json build/original_comparison.json]

PATH is a checkout of the original (esper-lite; commit 11ebe0f6 is the one the refactor plans describe, e.g.
`git clone https://github.com/tachyon-beep/esper-lite && git -C esper-lite checkout 11ebe0f6`). Nothing of it is
stored here, not even its figures: both systems are measured now, interleaved, on the same workload (task
cifar_baseline, mock CIFAR-10 data scaled per env, 1000 train / 200 val samples per env per epoch, batch 50 per env,
whole 5-epoch episodes with fresh envs, one epoch per measured unit), each in its own persistent worker process of
the paired A/B (`tripwire.bench.paired`), the two alternating epoch by epoch in ABBA order, wall clock.

Settings, for 1, 2 and 4 envs:
- `best`: each at its best on this machine. The original: `--num-workers 0`, compile off, torch's default thread
  count (benchmarks/original_workloads.py). Ours: one env on every core as torch threads, several envs on
  min(cores, n) env workers of one thread each (`original_side_benchmarks` in workloads.py).
- `1 thread`: both on one torch thread (ours: envs in turn).
Then the overhead of our trainer over the plain PyTorch loop on the same hosts and batches (one thread, the first
epoch of fresh envs, so neither has seeds yet), measured the same paired way; and ours at its best at 2 and 4
envs against the machine's ceiling: as many times one env's plain-loop rate on one thread as the process has
CPUs (the plain loop on one CPU against ours on all of them, paired the same way; ours runs whole episodes, seeds
included, the plain loop trains the host alone).

The interpreter must import the original too: this project's environment plus `psutil` (in the `test` extra).
Each figure is the median over `--runs` runs (fresh workers each run) with the range; one run takes about 3 minutes
on a 2-core machine. A measurement, not a gate; run it on a machine that is otherwise quiet and quote its load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tripwire.bench.paired import BenchOutcome, PairedComparison, Schedule, Side, compare_sides
from tripwire.common.context import usable_cpus

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SETTINGS = {  # setting -> (the original's suite function, ours)
    "best": ("paired_benchmarks", "original_side_benchmarks"),
    "1 thread": ("paired_benchmarks_one_thread", "original_side_one_thread"),
}
TARGET = 1.5  # the aim: at least 1.5x the original at its best, at every env count
OVERHEAD_AIM = 3.0  # per cent over the plain loop at 1 env, at most
CEILING_AIM = 0.9  # of the ceiling at 2 and 4 envs, at least


@dataclass
class Figure:
    """One benchmark of one run: both sides' env-epochs/s and ours / original with its interval."""

    original: float
    ours: float
    speedup: float
    low: float
    high: float


def env_epochs_per_s(outcome: BenchOutcome, times_ms: list[float]) -> float:
    envs = float(outcome.settings["units"]["env_epochs"]) * int(outcome.settings.get("runs_per_unit", 1))
    return 1000.0 * envs / statistics.median(times_ms)


def figures(comparison: PairedComparison) -> dict[str, Figure]:
    """Per benchmark: the base side is the slower reference (original, or the plain loop), the head is ours."""
    found = {}
    for outcome in comparison.outcomes:
        ratio = outcome.ratios.get(comparison.clock)
        if ratio is None:
            continue
        found[outcome.name] = Figure(
            original=env_epochs_per_s(outcome, outcome.base.on(comparison.clock)),
            ours=env_epochs_per_s(outcome, outcome.head.on(comparison.clock)),
            speedup=1.0 / (1.0 + ratio.change),
            low=1.0 / (1.0 + ratio.high),
            high=1.0 / (1.0 + ratio.low),
        )
    return found


def ceiling_figures(comparison: PairedComparison, cpus: int) -> dict[str, Figure]:
    """Per env count N: one env's plain-loop rate (`original`), ours (`ours`) and ours / (cpus x plain) with its
    interval (`speedup`, `low`, `high`). The base side ran one env per unit, the head N."""
    found = {}
    for outcome in comparison.outcomes:
        ratio = outcome.ratios.get(comparison.clock)
        if ratio is None:
            continue
        n = float(envs_of(outcome.name))
        found[outcome.name] = Figure(
            original=1000.0 / statistics.median(outcome.base.on(comparison.clock)),
            ours=env_epochs_per_s(outcome, outcome.head.on(comparison.clock)),
            speedup=n / (cpus * (1.0 + ratio.change)),
            low=n / (cpus * (1.0 + ratio.high)),
            high=n / (cpus * (1.0 + ratio.low)),
        )
    return found


def measure(original: Side, ours: Side, envs: list[int], schedule: Schedule, out: Path) -> PairedComparison:
    keywords = [f"[{n}env]" for n in envs]
    return compare_sides((original, ours), schedule, out, keywords=keywords)


def envs_of(name: str) -> str:
    """`original_workload[4env]` -> `4`."""
    return name.split("[")[1].rstrip("]").removesuffix("env")


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def print_tables(
    results: dict[str, dict[str, list[Figure]]],
    overhead: dict[str, list[Figure]],
    ceiling: dict[str, list[Figure]],
    cpus: int,
    load: str,
) -> None:
    print(f"\n| envs | setting | original, env-epochs/s | ours, env-epochs/s | ours / original | target x{TARGET} |")
    print("|---|---|---|---|---|---|")
    for setting, by_name in results.items():
        for name, runs in by_name.items():
            speedups = [f.speedup for f in runs]
            target = "met" if min(speedups) >= TARGET else "not met"
            row = f"| {envs_of(name)} | {setting} | {spread([f.original for f in runs])} | "
            print(
                row
                + f"{spread([f.ours for f in runs])} | {spread(speedups)}x | {target if setting == 'best' else '-'} |"
            )
    print("\n| envs | trainer overhead over the plain loop (1 thread, epoch 1 of fresh envs), median (range) |")
    print("|---|---|")
    for name, runs in overhead.items():
        over = [100.0 * (1.0 / f.speedup - 1.0) for f in runs]
        aim = ""
        if envs_of(name) == "1":
            aim = f" aim at most {OVERHEAD_AIM:.0f} %: {'met' if max(over) <= OVERHEAD_AIM else 'not met'}"
        print(f"| {envs_of(name)} | {statistics.median(over):+.1f} % ({min(over):+.1f} to {max(over):+.1f} %){aim} |")
    if ceiling:
        print(
            f"\n| envs | one env's plain loop, 1 thread | the {cpus}-CPU ceiling | ours at its best | "
            f"ours / ceiling | aim {CEILING_AIM:.0%} |"
        )
        print("|---|---|---|---|---|---|")
    for name, runs in ceiling.items():
        fractions = [f.speedup for f in runs]
        plain = [f.original for f in runs]
        ceiling_rate = spread([cpus * value for value in plain])
        target = "met" if min(fractions) >= CEILING_AIM else "not met"
        print(
            f"| {envs_of(name)} | {spread(plain)} | {ceiling_rate} | {spread([f.ours for f in runs])} | "
            f"{statistics.median(fractions):.1%} ({min(fractions):.1%}-{max(fractions):.1%}) | {target} |"
        )
    print(f"\nmedians over {len(next(iter(overhead.values()), []))} runs (range in brackets); load average: {load}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--original", required=True, help="a checkout of the original (esper-lite, e.g. 11ebe0f6)")
    parser.add_argument("--original-python", default=sys.executable, help="interpreter for the original's worker")
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--runs", type=int, default=3, help="whole repetitions, fresh workers each (default 3)")
    parser.add_argument("--blocks", type=int, default=6, help="ABBA blocks per benchmark and run (default 6)")
    parser.add_argument("--json", help="also write every figure here")
    args = parser.parse_args()
    checkout = Path(args.original).resolve()
    if not (checkout / "src" / "esper" / "simic").is_dir():
        print(
            f"error: --original {checkout} has no src/esper/simic: pass the root of an esper-lite checkout",
            file=sys.stderr,
        )
        return 2
    schedule = Schedule(
        warmup_units=2, fresh_every=0, min_blocks=args.blocks, max_blocks=args.blocks, budget_s=1e9, clock="wall"
    )
    results: dict[str, dict[str, list[Figure]]] = {setting: {} for setting in SETTINGS}
    overhead: dict[str, list[Figure]] = {}
    ceiling: dict[str, list[Figure]] = {}
    cpus = usable_cpus()
    loads = []
    with tempfile.TemporaryDirectory(prefix="original-comparison-") as scratch:
        for run in range(args.runs):
            loads.append(os.getloadavg()[0])
            for setting, (theirs, mine) in SETTINGS.items():
                original = Side("original", checkout, HERE, f"original_workloads:{theirs}", python=args.original_python)
                ours = Side("ours", ROOT, HERE, f"workloads:{mine}")
                out = Path(scratch) / f"{run}-{setting.replace(' ', '')}"
                for name, figure in figures(measure(original, ours, args.envs, schedule, out)).items():
                    results[setting].setdefault(name, []).append(figure)
            plain, trainer = (
                Side("plain", ROOT, HERE, "workloads:plain_loop_side"),
                Side("ours", ROOT, HERE, "workloads:trainer_epoch_side"),
            )
            compared = measure(plain, trainer, args.envs, schedule, Path(scratch) / f"{run}-overhead")
            for name, figure in figures(compared).items():
                overhead.setdefault(name, []).append(figure)
            several = [n for n in args.envs if n > 1]
            if several:
                one_env, best = (
                    Side("plain", ROOT, HERE, "workloads:ceiling_plain_side"),
                    Side("ours", ROOT, HERE, "workloads:ceiling_ours_side"),
                )
                compared = measure(one_env, best, several, schedule, Path(scratch) / f"{run}-ceiling")
                for name, figure in ceiling_figures(compared, cpus).items():
                    ceiling.setdefault(name, []).append(figure)
            print(f"run {run + 1} of {args.runs} done", file=sys.stderr, flush=True)
    loads.append(os.getloadavg()[0])
    load = ", ".join(f"{value:.2f}" for value in loads)
    print_tables(results, overhead, ceiling, cpus, load)
    if args.json:
        payload: dict[str, Any] = {
            "original": str(checkout),
            "load": loads,
            "results": {s: {n: [vars(f) for f in runs] for n, runs in by.items()} for s, by in results.items()},
            "overhead": {n: [vars(f) for f in runs] for n, runs in overhead.items()},
            "ceiling": {"cpus": cpus, **{n: [vars(f) for f in runs] for n, runs in ceiling.items()}},
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(payload, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
