"""Wall-clock throughput on the original's workload, against the original's published figures.

    python benchmarks/original_comparison.py [--episodes 6] [--json build/original_comparison.json]

The workload is the one the original was measured on (cifar_baseline, 1000 train / 200 val samples per env per
epoch, batch 50 per env, whole 5-epoch episodes through `VectorizedPPOTrainer.run_epoch`, fresh envs per
episode), built by `workloads.EpochWorkload` exactly as `run_training` builds a run. Each setting runs one
warm-up episode, then `--episodes` timed ones; the figure is the median episode's env-epochs per second.

Settings, all on this machine's cores (2 here):
- `sequential, 1 thread`: envs one after another, one torch thread (what the gated `nox -s bench` runs);
- `best`: one env uses every core as torch intra-op threads; several envs run on `env_workers = cores`
  threads with one torch thread each (`--env-workers N` on the command line).

Overhead: the trainer's first epoch of fresh envs (no seeds yet, so both train the same hosts) against
`workloads.PlainLoopWorkload` (the same hosts, batches and validation set, no controller), one torch thread,
envs in turn, the two interleaved; the figure is the ratio of the median epoch times minus one.

This is a measurement, not a gate: run it on a quiet machine (the gate, with its noise handling, is
`nox -s bench`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from esper.leyline import TelemetryLevel
from esper.nissa import TelemetryHub
from workloads import ORIGINAL, EpochWorkload, PlainLoopWorkload, bench_config

ORIGINAL_ENV_EPOCHS_PER_S = {1: 3.9, 2: 4.8, 4: 5.2}  # ../shared/reference/esper-lite-measured.md
TARGET_FACTOR = 1.5


def settings(n_envs: int, cores: int) -> dict[str, tuple[int, int]]:
    """name -> (torch threads, env workers)."""
    best = (cores, 1) if n_envs == 1 else (1, min(cores, n_envs))
    return {"sequential, 1 thread": (1, 1), "best": best}


def measure(n_envs: int, threads: int, workers: int, episodes: int) -> float:
    """Median env-epochs/s over `episodes` whole episodes, after one warm-up episode."""
    torch.set_num_threads(threads)
    config = dataclasses.replace(bench_config(n_envs, ORIGINAL), env_workers=workers)
    workload = EpochWorkload(config, TelemetryHub(TelemetryLevel.NORMAL), episodes=True)
    rates: list[float] = []
    try:
        for episode in range(episodes + 1):
            elapsed = 0.0
            for _ in range(config.max_epochs):
                workload.prepare()
                start = time.perf_counter()
                workload.run()
                elapsed += time.perf_counter() - start
            if episode > 0:
                rates.append(n_envs * config.max_epochs / elapsed)
    finally:
        workload.parts.engine.close()
    return statistics.median(rates)


def overhead(n_envs: int, repeats: int) -> float:
    """Trainer epoch time over plain-loop epoch time, minus one (medians of `repeats` interleaved runs)."""
    torch.set_num_threads(1)
    config = bench_config(n_envs, ORIGINAL)
    hub = TelemetryHub(TelemetryLevel.NORMAL)
    trainer, plain = EpochWorkload(config, hub), PlainLoopWorkload(config, hub)
    times: dict[str, list[float]] = {"trainer": [], "plain": []}
    for index in range(repeats + 1):
        for name, workload in (("trainer", trainer), ("plain", plain)):
            workload.prepare()
            start = time.perf_counter()
            workload.run()
            if index > 0:  # the first round of each warms up
                times[name].append(time.perf_counter() - start)
    return statistics.median(times["trainer"]) / statistics.median(times["plain"]) - 1.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=6, help="timed episodes per setting")
    parser.add_argument("--envs", type=int, nargs="+", default=sorted(ORIGINAL_ENV_EPOCHS_PER_S))
    parser.add_argument("--overhead-repeats", type=int, default=15, help="interleaved epochs per overhead figure")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    rows = []
    print(f"| envs | original | target (x{TARGET_FACTOR}) | setting | threads x workers | ours | vs original |")
    print("|---|---|---|---|---|---|---|")
    for n_envs in args.envs:
        original = ORIGINAL_ENV_EPOCHS_PER_S.get(n_envs)
        for name, (threads, workers) in settings(n_envs, cores).items():
            rate = measure(n_envs, threads, workers, args.episodes)
            ratio = f"{rate / original:.2f}x" if original else "-"
            target = f"{original * TARGET_FACTOR:.1f}" if original else "-"
            print(
                f"| {n_envs} | {original or '-'} | {target} | {name} | {threads} x {workers} | {rate:.2f} | {ratio} |"
            )
            rows.append({"envs": n_envs, "setting": name, "threads": threads, "workers": workers, "rate": rate})
    print("\n| envs | trainer overhead over the plain loop (1 thread, epoch 1) |\n|---|---|")
    overheads = {}
    for n_envs in args.envs:
        overheads[n_envs] = overhead(n_envs, args.overhead_repeats)
        print(f"| {n_envs} | {overheads[n_envs]:+.1%} |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        payload = {"cores": cores, "torch": torch.__version__, "rows": rows, "overhead": overheads}
        Path(args.json).write_text(json.dumps(payload, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
