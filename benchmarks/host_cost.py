"""The host's cost per env-epoch: our trainer against the plain PyTorch loop where the host is the bottleneck.

    python benchmarks/host_cost.py [--envs 1 4] [--blocks 8] [--json build/host_cost.json] [--aim 1.10]

On a GPU the trainer's speed is bounded by the host issuing ops (docs/measurements.md: 1,501 aten ops an epoch at
about 30 us each while the GPU waits). The same regime is measurable on a CPU with one thread and a workload whose
compute is small: `HOST_BOUND` in workloads.py (cifar_baseline's host on 8x8 images, batches of 4, 1,000 train and
200 validation samples per env, the first epoch of fresh envs, so neither side has seeds). Both sides run in their
own persistent worker process of the paired A/B (`tripwire.bench.paired`), alternating unit by unit in ABBA order on
one CPU, on process CPU time. Printed per env count: env-epochs/s of each, ours / plain with its interval, and aten
ops per env-epoch of each (counted once on a fresh copy). Exits 1 when the estimate at any env count is above
`--aim` (1.10). `--base faithful` measures against the plain loop plus the per-step work the original's trainer
does and the bare loop skips (gradient clipping, the train loss and accuracy sums: `FaithfulPlainLoopWorkload`, which
trains the host to our bits), splitting our cost into what the original's semantics ask and what our trainer adds.
A measurement of this tree against its own reference loop; the head-against-base guard of the same unit is
`host_bound[1env]` in `python -m tripwire bench-ab` (workloads.paired_benchmarks).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from tripwire.bench.paired import Schedule, Side, compare_sides

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from workloads import HOST_BOUND_AIM  # noqa: E402 - the benchmarks folder is not a package

BASES = {"plain": "workloads:host_plain_side", "faithful": "workloads:host_faithful_plain_side"}  # --base: its side


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 4], choices=[1, 4])
    parser.add_argument("--blocks", type=int, default=8, help="ABBA blocks per env count (default 8)")
    parser.add_argument("--aim", type=float, default=HOST_BOUND_AIM, help="ours / plain at most (default 1.10)")
    parser.add_argument(
        "--base",
        choices=sorted(BASES),
        default="plain",
        help="plain: the bare loop (the aim's base); faithful: it plus the original's clipping and train sums",
    )
    parser.add_argument("--json", help="also write every figure here")
    args = parser.parse_args()
    schedule = Schedule(
        warmup_units=1, fresh_every=0, min_blocks=args.blocks, max_blocks=args.blocks, budget_s=1e9, clock="cpu"
    )
    plain = Side("plain", ROOT, HERE, BASES[args.base])
    ours = Side("ours", ROOT, HERE, "workloads:host_trainer_side")
    with tempfile.TemporaryDirectory(prefix="host-cost-") as scratch:
        compared = compare_sides((plain, ours), schedule, Path(scratch), keywords=[f"[{n}env]" for n in args.envs])
    rows = []
    header = (
        "| envs | plain, env-epochs/s | ours, env-epochs/s | ours / plain (interval) | aten ops / env-epoch: plain |"
    )
    print(header + " ours |")
    print("|---|---|---|---|---|---|")
    for outcome in compared.outcomes:
        ratio = outcome.ratios.get(compared.clock)
        if ratio is None:
            print(f"{outcome.name}: no estimate ({outcome.note or outcome.verdict.value})", file=sys.stderr)
            return 2
        envs = float(outcome.settings["units"]["env_epochs"])
        rate = {
            side: 1000.0 * envs / statistics.median(units.on(compared.clock))
            for side, units in (("plain", outcome.base), ("ours", outcome.head))
        }
        ops = outcome.proxies.get("aten_ops", (None, None))
        per_env = [None if count is None else count / envs for count in ops]
        row = {
            "name": outcome.name,
            "envs": envs,
            "plain_env_epochs_per_s": rate["plain"],
            "ours_env_epochs_per_s": rate["ours"],
            "ratio": 1.0 + ratio.change,
            "low": 1.0 + ratio.low,
            "high": 1.0 + ratio.high,
            "plain_aten_ops_per_env_epoch": per_env[0],
            "ours_aten_ops_per_env_epoch": per_env[1],
            "base": args.base,
        }
        rows.append(row)
        print(
            f"| {envs:.0f} | {rate['plain']:.3f} | {rate['ours']:.3f} | {row['ratio']:.3f}x "
            f"({row['low']:.3f}-{row['high']:.3f}) | {per_env[0]:,.0f} | {per_env[1]:,.0f} |"
        )
    over = [row for row in rows if row["ratio"] > args.aim]
    for row in over:
        print(
            f"{row['name']}: ours costs {row['ratio']:.3f}x the plain loop per env-epoch, over the aim of {args.aim}x"
        )
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"aim": args.aim, "rows": rows}, indent=1), encoding="utf-8")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
