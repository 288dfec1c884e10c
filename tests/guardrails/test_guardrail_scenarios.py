"""The gate's canonical scenarios against their goldens: telemetry counts, sync budgets, trajectory digests."""

from __future__ import annotations

import pytest
from guardrail_scenarios import HOT_REGIONS, SCENARIOS, ScenarioRun

from tripwire.budget import check_scaling
from tripwire.goldens import GoldenStore
from tripwire.pytest_plugin import GateLog, TelemetryCountsHelper

pytestmark = pytest.mark.guardrail

NAMES = list(SCENARIOS)


@pytest.mark.parametrize("scenario_run", NAMES, indirect=True, ids=NAMES)
def test_telemetry_counts_match_snapshot(
    scenario_run: ScenarioRun, telemetry_counts: TelemetryCountsHelper, gate_log: GateLog
) -> None:
    counts = telemetry_counts.check(scenario_run.events)
    gate_log.add(
        "telemetry counts", scenario_run.scenario.name, "passed", f"{counts.total} events, {len(counts.by_type)} types"
    )


@pytest.mark.parametrize("scenario_run", NAMES, indirect=True, ids=NAMES)
def test_sync_budget_holds(scenario_run: ScenarioRun, tripwire_goldens: GoldenStore, gate_log: GateLog) -> None:
    outcome = tripwire_goldens.check_sync_budget(
        scenario_run.scenario.name, scenario_run.counter, scenario_run.trajectory.context, HOT_REGIONS
    )
    gate_log.add("sync budget", scenario_run.scenario.name, outcome.status, outcome.detail)


@pytest.mark.parametrize("scenario_run", NAMES, indirect=True, ids=NAMES)
def test_trajectory_matches_golden(scenario_run: ScenarioRun, tripwire_goldens: GoldenStore, gate_log: GateLog) -> None:
    outcome = tripwire_goldens.check_trajectory(scenario_run.scenario.name, scenario_run.trajectory)
    gate_log.add("trajectory", scenario_run.scenario.name, outcome.status, outcome.detail)
    if outcome.status == "skipped":
        pytest.skip(outcome.detail)


WITH_EVENTS = [name for name in NAMES if SCENARIOS[name].must_occur]


@pytest.mark.parametrize("scenario_run", WITH_EVENTS, indirect=True, ids=WITH_EVENTS)
def test_scenario_shows_its_lifecycle_events(scenario_run: ScenarioRun, gate_log: GateLog) -> None:
    seen = {event_type: scenario_run.count(event_type) for event_type in scenario_run.scenario.must_occur}
    missing = [event_type for event_type, n in seen.items() if n == 0]
    assert not missing, f"scenario {scenario_run.scenario.name!r} no longer shows {', '.join(missing)} (seen: {seen})"
    gate_log.add("lifecycle", scenario_run.scenario.name, "passed", ", ".join(f"{k}={v}" for k, v in seen.items()))


def test_hot_path_syncs_do_not_grow_with_the_number_of_envs(
    run_a_baseline: ScenarioRun, run_a_two_envs: ScenarioRun, gate_log: GateLog
) -> None:
    runs = {"1 env": run_a_baseline.counter, "2 envs": run_a_two_envs.counter}
    hot = {scale: {r: n for r, n in c.counts_by_region().items() if r in HOT_REGIONS} for scale, c in runs.items()}
    report = check_scaling(hot)
    gate_log.add("sync scaling", "a_baseline x envs", "passed" if report.ok else "FAILED", report.format())
    assert report.ok, report.format()
