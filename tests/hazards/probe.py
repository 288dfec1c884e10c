"""Run one canonical scenario of a (possibly patched) tree and record or check its three guardrails.

Run as a script, in a subprocess whose PYTHONPATH points at the tree's `src/` (so the patched trainer and its
own copy of tripwire are what runs):

    python probe.py TREE SCENARIO GOLDENS record    # write telemetry, sync budget, trajectory and payload goldens
    python probe.py TREE SCENARIO GOLDENS check OUT.json

`check` writes `{"fired": {guardrail: first line of its failure}}` for the guardrails that failed, using the
gate's own code: `GoldenStore.check_sync_budget`, `GoldenStore.check_compile_budget` (what torch.compile did),
`GoldenStore.check_trajectory`, `GoldenStore.check_payloads`, `GoldenStore.check_clock` (the wall-clock fields'
units), `tripwire.telemetry.counts.diff_counts` (event counts, order and payload schema) and
`guardrail_scenarios.stray_settings` (determinism settings the run changed).
Goldens are recorded from the clean copy on the same machine, so the catalogue holds in any determinism context.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

TELEMETRY = "telemetry counts"
SYNC_BUDGET = "sync budget"
TRAJECTORY = "trajectory"
TELEMETRY_PAYLOAD = "telemetry payload"
COMPILE_BUDGET = "compile budget"
DETERMINISM = "determinism settings"
CLOCK = "telemetry clock"


def load_scenario(tree: Path, name: str) -> Any:
    """The scenario called `name` from the tree's own tests/guardrails/guardrail_scenarios.py."""
    sys.path.insert(0, str(tree / "tests" / "guardrails"))
    import guardrail_scenarios as scenarios

    known = {**scenarios.SCENARIOS, scenarios.TWO_ENVS.name: scenarios.TWO_ENVS}
    if name not in known:
        raise SystemExit(f"error: unknown scenario {name!r}; choose one of {', '.join(sorted(known))}")
    return scenarios, known[name]


def main(argv: list[str]) -> int:
    tree, name, goldens, mode, *rest = argv
    tree_path, goldens_path = Path(tree), Path(goldens)
    scenarios, scenario = load_scenario(tree_path, name)
    from tripwire.common.errors import CompileBudgetExceeded, SyncBudgetExceeded, TrajectoryDivergence
    from tripwire.gates.goldens import GoldenStore
    from tripwire.telemetry.clock import ClockUnitChanged
    from tripwire.telemetry.counts import diff_counts, reduce_events
    from tripwire.telemetry.payloads import PayloadDivergence

    workdir = goldens_path / "work" if mode == "record" else Path(rest[0]).parent
    workdir.mkdir(parents=True, exist_ok=True)
    run = scenarios.run_scenario(scenario, workdir)
    counts = reduce_events(run.events, round_end=scenarios.ROUND_END).to_snapshot()
    store = GoldenStore(goldens_path, update=mode == "record")
    counts_file = goldens_path / "telemetry" / f"{name}.json"
    if mode == "record":
        counts_file.parent.mkdir(parents=True, exist_ok=True)
        counts_file.write_text(json.dumps(counts, indent=1, sort_keys=True), encoding="utf-8")
        store.check_sync_budget(name, run.counter, run.trajectory.context, scenarios.HOT_REGIONS)
        store.check_compile_budget(name, run.compiles, run.trajectory.context)
        store.check_trajectory(name, run.trajectory)
        store.check_payloads(name, run.events, run.trajectory.context, exclude=scenarios.PAYLOAD_EXCLUDED)
        store.check_clock(name, run.events, run.wall_s, scenarios.WALL_CLOCK_FIELDS)
        return 0
    fired: dict[str, str] = {}
    changes = diff_counts(json.loads(counts_file.read_text(encoding="utf-8")), counts)
    if changes:
        fired[TELEMETRY] = "; ".join(changes[:2])
    try:
        store.check_sync_budget(name, run.counter, run.trajectory.context, scenarios.HOT_REGIONS)
    except SyncBudgetExceeded as error:
        lines = [line.strip() for line in str(error).splitlines()]
        head = lines[1] if len(lines) > 1 else lines[0]
        site = next((line for line in lines if line.startswith(("NEW ", "GREW "))), "")
        caller = next((line for line in lines if line.startswith(("new caller:", "caller grew:", "caller:"))), "")
        fired[SYNC_BUDGET] = " / ".join(part for part in (head, site, caller.split(" (from ")[0]) if part)
    try:
        store.check_compile_budget(name, run.compiles, run.trajectory.context)
    except CompileBudgetExceeded as error:
        lines = [line.strip() for line in str(error).splitlines()]
        head = lines[1] if len(lines) > 1 else lines[0]
        site = next((line for line in lines if line.startswith(("NEW ", "GREW "))), "")
        fired[COMPILE_BUDGET] = " / ".join(part for part in (head, site) if part)
    try:
        store.check_trajectory(name, run.trajectory)
    except TrajectoryDivergence as error:
        lines = [line.strip() for line in str(error).splitlines()]
        structure = next((line[:160] for line in lines if line.startswith("structure:")), "")
        fired[TRAJECTORY] = " / ".join(part for part in (lines[0].split(" (")[0], structure) if part)
    try:
        store.check_payloads(name, run.events, run.trajectory.context, exclude=scenarios.PAYLOAD_EXCLUDED)
    except PayloadDivergence as error:
        fired[TELEMETRY_PAYLOAD] = str(error).splitlines()[0]
    try:
        store.check_clock(name, run.events, run.wall_s, scenarios.WALL_CLOCK_FIELDS)
    except ClockUnitChanged as error:
        fired[CLOCK] = str(error).splitlines()[0][:300]
    stray = scenarios.stray_settings(run)
    if stray:
        fired[DETERMINISM] = "; ".join(change.format() for change in stray)
    Path(rest[0]).write_text(json.dumps({"fired": fired}), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
