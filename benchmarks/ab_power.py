"""How often does the paired A/B catch a slowdown, and how often does it cry wolf? Repeat it and count.

    python benchmarks/ab_power.py --runs 10 --label aa                                     # A/A, whole suite
    python benchmarks/ab_power.py --runs 10 --label tp10 --slowdown train_pass:0.10 -k train_pass

Each run is one `python -m tripwire bench-ab --base . --head .` of this tree against itself, the head worker
optionally slowed by `ESPER_BENCH_SLOWDOWN` (benchmarks/slowdowns.py), so the only difference between the sides
is the injected one. Every run's report is kept under `--out/<label>-<i>/`; the tally (verdicts per benchmark,
changes, intervals, the load average before and after each run) goes to `--out/<label>.json` and is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one_run(args: argparse.Namespace, index: int) -> dict[str, object]:
    out = Path(args.out) / f"{args.label}-{index}"
    command = [
        sys.executable,
        "-m",
        "tripwire",
        "bench-ab",
        "--base",
        str(ROOT),
        "--head",
        str(ROOT),
        "--out",
        str(out),
    ]
    for keyword in args.k:
        command += ["-k", keyword]
    if args.slowdown:
        command += ["--head-env", f"ESPER_BENCH_SLOWDOWN={args.slowdown}"]
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1) or not (out / "bench-ab.json").exists():
        raise SystemExit(f"run {index} failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    report = json.loads((out / "bench-ab.json").read_text(encoding="utf-8"))
    outcomes = {
        outcome["name"]: {
            "verdict": outcome["verdict"],
            "proxy_verdict": outcome["proxy_verdict"],
            "fails": outcome["fails"],
            "ratio": outcome["ratios"].get(report["clock"]),
            "note": outcome["note"],
        }
        for outcome in report["outcomes"]
    }
    return {
        "passed": report["passed"],
        "seconds": round(seconds, 1),
        "load": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "outcomes": outcomes,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--label", required=True)
    parser.add_argument("--slowdown", default="", help="ESPER_BENCH_SLOWDOWN for the head worker only")
    parser.add_argument("-k", action="append", default=[], help="benchmarks containing this (repeatable)")
    parser.add_argument("--out", default="build/ab-power")
    args = parser.parse_args()
    runs = []
    for index in range(args.runs):
        result = one_run(args, index)
        runs.append(result)
        cells = []
        for name, outcome in result["outcomes"].items():  # type: ignore[attr-defined]
            ratio = outcome["ratio"]
            change = (
                ""
                if ratio is None
                else f" {100 * ratio['change']:+.1f}% [{100 * ratio['low']:+.1f}, {100 * ratio['high']:+.1f}]"
            )
            mark = "FAIL" if outcome["fails"] else "pass"
            cells.append(f"{name}{change} {outcome['verdict']}/{outcome['proxy_verdict']} {mark}")
        print(
            f"{args.label} {index}: {'PASS' if result['passed'] else 'FAIL'} {result['seconds']}s load {result['load']}"
        )
        print("   " + "\n   ".join(cells), flush=True)
    failed = sum(1 for result in runs if not result["passed"])
    summary = {"label": args.label, "slowdown": args.slowdown, "k": args.k, "runs": runs, "failed": failed}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / f"{args.label}.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    print(f"{args.label}: {failed} of {len(runs)} runs failed the gate")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
