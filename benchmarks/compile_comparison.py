"""What compiling the policy network buys on this machine: eager against compiled, side by side, paired.

    python benchmarks/compile_comparison.py [--backend inductor] [--runs 3] [--blocks 12] [--json FILE]

Both sides are this tree, each in its own persistent worker process of the paired A/B (`tripwire.bench.paired`):
the base side runs the policy call and the PPO update eagerly (`--compile off`), the head side with the network
compiled (`--compile BACKEND`), alternating unit by unit in ABBA order, one torch thread, the gate's sizes (4 envs).
The change is compiled time / eager time - 1 on process CPU time, with its bootstrap interval; compiling itself
happens in each side's first unit and is reported apart (the `first unit` seconds: building the workload, and on
the compiled side compiling it, with a cache of its own per side, so cold). A measurement, not a gate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

from tripwire.bench.paired import Schedule, Side, compare_sides

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("inductor", "aot_eager"), default="inductor")
    parser.add_argument("--runs", type=int, default=3, help="whole repetitions, fresh workers each (default 3)")
    parser.add_argument("--blocks", type=int, default=12, help="ABBA blocks per unit and run (default 12)")
    parser.add_argument("--json", help="also write every figure here")
    args = parser.parse_args()
    eager = Side("eager", ROOT, HERE, suite="workloads:eager_side")
    compiled = Side(args.backend, ROOT, HERE, suite=f"workloads:{args.backend}_side")
    schedule = Schedule(warmup_units=2, fresh_every=0, min_blocks=args.blocks, max_blocks=args.blocks, budget_s=1e9)
    figures: dict[str, list[dict[str, float]]] = {}
    loads = []
    with tempfile.TemporaryDirectory(prefix="compile-comparison-") as scratch:
        for run in range(args.runs):
            loads.append(os.getloadavg()[0])
            comparison = compare_sides((eager, compiled), schedule, Path(scratch) / f"run{run}")
            for outcome in comparison.outcomes:
                ratio = outcome.ratios[comparison.clock]
                first_eager, first_compiled = outcome.first_unit_s
                figures.setdefault(outcome.name, []).append(
                    {
                        "eager_ms": statistics.median(outcome.base.on(comparison.clock)),
                        "compiled_ms": statistics.median(outcome.head.on(comparison.clock)),
                        "change": ratio.change,
                        "low": ratio.low,
                        "high": ratio.high,
                        "first_eager_s": first_eager or 0.0,
                        "first_compiled_s": first_compiled or 0.0,
                    }
                )
            print(f"run {run + 1} of {args.runs} done", flush=True)
    print(
        f"\n| unit | eager, ms per unit | {args.backend}, ms per unit | change (95 % interval of each run) | "
        "first unit: eager / compiled, s |"
    )
    print("|---|---|---|---|---|")
    for name, runs in figures.items():
        med = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        intervals = ", ".join(f"[{100 * r['low']:+.1f}, {100 * r['high']:+.1f}]" for r in runs)
        print(
            f"| {name} | {med['eager_ms']:.2f} | {med['compiled_ms']:.2f} | {100 * med['change']:+.1f} % ({intervals}) "
            f"| {med['first_eager_s']:.2f} / {med['first_compiled_s']:.2f} |"
        )
    print(f"\nmedians over {args.runs} runs; process CPU time; load average at each run's start: {loads}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"backend": args.backend, "figures": figures, "loads": loads}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
