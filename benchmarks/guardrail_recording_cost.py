"""The cost of recording on the gate's own scenarios: the trainer run plain against the same run as the gate records it.

A measurement, not a gate. In one process, after one untimed run of each side (imports, first compilations), each
round runs every scenario plain and recorded, in an order that alternates round by round, so drift in the machine's
speed reaches both sides alike; the ratio reported is the median over rounds of recorded / plain wall time.

- Plain: `run_training` with the scenario's configuration, telemetry to an in-memory backend, no instrument.
- Recorded: `run_scenario` from tests/guardrails, what `nox -s guardrails` runs: a `SyncCounter` and a
  `CompileCounter` around the run and the trajectory probe recording every checkpoint.

Both sides run on one intra-op thread, as the gate does. Scenarios: (a) baseline, (b) lifecycle, (c) rollback,
(d) resume (from a checkpoint saved by an untimed run of (a)) and (f) compiled. Run it on a quiet machine:

    python benchmarks/guardrail_recording_cost.py [--rounds 5] [--json build/guardrail_recording_cost.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "guardrails"), str(ROOT / "tests"), str(ROOT / "benchmarks")]

import torch  # noqa: E402
from guardrail_scenarios import SCENARIOS, run_scenario, scenario_config, single_threaded  # noqa: E402

from esper.nissa import InMemoryBackend, TelemetryHub  # noqa: E402
from esper.simic.training.vectorized import run_training  # noqa: E402
from recording_cost import ratio_row, show  # noqa: E402

NAMES = ("a_baseline", "b_lifecycle", "c_rollback", "d_resume", "f_compiled")


def _plain(name: str, work: Path, extra: tuple[str, ...]) -> float:
    config, controller = scenario_config(SCENARIOS[name], work, *extra)
    hub = TelemetryHub()
    hub.add_backend(InMemoryBackend())
    with single_threaded():
        torch._dynamo.reset()  # as the recorded side: each run compiles afresh
        start = time.perf_counter()
        run_training(config, controller=controller, hub=hub)
        seconds = time.perf_counter() - start
    hub.close()
    return seconds


def _recorded(name: str, work: Path, extra: tuple[str, ...]) -> float:
    start = time.perf_counter()
    run_scenario(SCENARIOS[name], work, *extra)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--only", help="measure only scenarios whose name contains this")
    args = parser.parse_args(argv)
    names = [name for name in NAMES if not args.only or args.only in name]
    rows = []
    with tempfile.TemporaryDirectory(prefix="guardrail-cost-") as folder:
        work = Path(folder)
        checkpoint = work / "after_round_1.pt"
        extras = {name: () for name in names}
        extras["d_resume"] = ("--resume", str(checkpoint))
        run_scenario(SCENARIOS["a_baseline"], work, "--save", str(checkpoint))  # (d) resumes it; warms up as well
        times: dict[str, dict[str, list[float]]] = {name: {"plain": [], "recorded": []} for name in names}
        for index in range(args.rounds + 1):
            for name in names:
                order = ("plain", "recorded") if index % 2 == 0 else ("recorded", "plain")
                for side in order:
                    measure = _plain if side == "plain" else _recorded
                    seconds = measure(name, work, extras[name])
                    if index:  # round 0 is the untimed first run of each side
                        times[name][side].append(seconds)
        for name in names:
            row = ratio_row({"scenario": name}, times[name]["plain"], times[name]["recorded"], digits=3)
            rows.append(row)
            show(f"{name:<12}", row)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rounds": args.rounds, "scenarios": rows}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
