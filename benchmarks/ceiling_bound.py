"""How close to the 2-core ceiling any execution engine could bring the trainer: separate processes, no lock.

    python benchmarks/ceiling_bound.py [--rounds 6] [--epochs 40] [--json build/ceiling_bound.json]

The ceiling of `original_comparison.py` is twice one env's plain-loop rate on one CPU. Our trainer reaches 75-80 % of
it with its env workers (threads). An engine that ran each env in a process of its own would lose the interpreter's
lock and the epoch barrier; the most it could reach is what two copies of the trainer reach when each trains one env
in its own process, on its own CPU, with nothing shared. This measures that, and the same for the plain loop itself:

- `plain`: one env's plain loop (`workloads.PlainLoopWorkload`), one process on one CPU: the ceiling's unit;
- `plain x2`: two of them at once, one per CPU: how much of the ceiling the arithmetic alone reaches when both cores
  work (they share the memory bus and the last-level cache);
- `ours`: one env of our trainer, whole 5-epoch episodes (seeds, fused validation and the controller included), one
  process on one CPU;
- `ours x2`: two of them at once, one per CPU: the bound for any engine;
- `ours 2 envs`: the trainer as it runs, 2 envs on 2 env workers in one process.

Every side runs in fresh processes, one torch thread each, at the original's workload size (1000 train / 200
validation samples per env, batch 50), timing `--epochs` epochs after 3 untimed ones; the five sides run one after
the other in every round, so drift reaches them alike; figures are medians over rounds with their range. A
measurement, not a gate; run it on an otherwise quiet machine with at least 2 CPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIDES = ("plain", "plain x2", "ours", "ours x2", "ours 2 envs")


def _child(kind: str, epochs: int, cpu: int | None) -> None:
    """One side's process: pin, build the workload, run 3 untimed epochs, print env-epochs per second."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    sys.path.insert(0, str(HERE))
    import torch

    torch.set_num_threads(1)
    from workloads import ORIGINAL, _epoch_workload, _plain

    workload = {
        "plain": _plain(1),
        "ours": _epoch_workload(1, ORIGINAL),
        "ours2": _epoch_workload(2, ORIGINAL, workers=2),
    }[kind]()
    envs = 2 if kind == "ours2" else 1
    for _ in range(3):
        workload.prepare()
        workload.run()
    spent = 0.0
    for _ in range(epochs):
        workload.prepare()  # fresh envs at an episode's start: not timed
        start = time.perf_counter()
        workload.run()
        spent += time.perf_counter() - start
    print(f"RATE {envs * epochs / spent}")


def _rates(kind: str, epochs: int, cpus: list[int | None]) -> list[float]:
    """Start one child per entry of `cpus` at once and return each one's rate."""
    command = [sys.executable, __file__, "--child", kind, "--epochs", str(epochs)]
    children = [
        subprocess.Popen(
            [*command, "--cpu", str(cpu)] if cpu is not None else command, stdout=subprocess.PIPE, text=True
        )
        for cpu in cpus
    ]
    rates = []
    for child in children:
        out, _ = child.communicate()
        if child.returncode != 0:
            raise SystemExit(f"a {kind} process failed (exit {child.returncode}); run it alone to see why")
        rates.append(float(next(line for line in out.splitlines() if line.startswith("RATE ")).split()[1]))
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--epochs", type=int, default=40, help="timed epochs per process (default 40)")
    parser.add_argument("--json", help="also write every round's figures here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--cpu", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.epochs, args.cpu)
        return
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit(f"this process may run on {len(cpus)} CPU: the bound needs 2 (check taskset or the container)")
    one, two = cpus[-1], cpus[:2]
    rounds = []
    for number in range(1, args.rounds + 1):
        row = {
            "plain": sum(_rates("plain", args.epochs, [one])),
            "plain x2": sum(_rates("plain", args.epochs, list(two))),
            "ours": sum(_rates("ours", args.epochs, [one])),
            "ours x2": sum(_rates("ours", args.epochs, list(two))),
            "ours 2 envs": sum(_rates("ours2", max(1, args.epochs // 2), [None])),
        }
        rounds.append(row)
        ceiling = 2 * row["plain"]
        print(
            f"round {number}: " + ", ".join(f"{side} {row[side]:.2f}" for side in SIDES) + f" env-epochs/s; of the "
            f"ceiling {ceiling:.2f}: plain x2 {row['plain x2'] / ceiling:.1%}, ours x2 {row['ours x2'] / ceiling:.1%}, "
            f"ours 2 envs {row['ours 2 envs'] / ceiling:.1%}",
            flush=True,
        )
    figures = {
        "plain x2 / ceiling": [r["plain x2"] / (2 * r["plain"]) for r in rounds],
        "ours / plain (one CPU)": [r["ours"] / r["plain"] for r in rounds],
        "ours x2 / ceiling (any engine's bound)": [r["ours x2"] / (2 * r["plain"]) for r in rounds],
        "ours 2 envs / ceiling (env workers)": [r["ours 2 envs"] / (2 * r["plain"]) for r in rounds],
        "ours 2 envs / ours x2": [r["ours 2 envs"] / r["ours x2"] for r in rounds],
    }
    print(f"\nmedians over {len(rounds)} rounds (range), load average {os.getloadavg()[0]:.1f}:")
    for name, values in figures.items():
        print(f"  {name}: {statistics.median(values):.1%} ({min(values):.1%}-{max(values):.1%})")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"rounds": rounds, "figures": figures}, indent=2) + "\n")


if __name__ == "__main__":
    main()
