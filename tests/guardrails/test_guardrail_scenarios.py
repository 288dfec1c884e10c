"""The gate's canonical scenarios against their goldens: telemetry counts and schema, sync budgets, compile budgets,
trajectory and telemetry payload digests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from guardrail_scenarios import (
    COMPILED,
    DETERMINISM_SETTER,
    HOT_REGIONS,
    PAYLOAD_EXCLUDED,
    RUN_LOCATION_FIELDS,
    SCENARIOS,
    WALL_CLOCK_FIELDS,
    ScenarioRun,
    run_scenario,
    stray_settings,
)

from tripwire.bitwise.trajectory import compare_trajectories
from tripwire.gates.goldens import GoldenStore
from tripwire.gates.pytest_plugin import GateLog, TelemetryCountsHelper
from tripwire.sync.budget import check_scaling
from tripwire.telemetry.payloads import compare_payloads, payload_trajectory

pytestmark = pytest.mark.guardrail

NAMES = list(SCENARIOS)


@pytest.mark.parametrize("scenario_run", NAMES, indirect=True, ids=NAMES)
def test_telemetry_counts_match_snapshot(
    scenario_run: ScenarioRun, telemetry_counts: TelemetryCountsHelper, gate_log: GateLog
) -> None:
    counts = telemetry_counts.check(scenario_run.events)
    fields = sum(len(schema) for schema in counts.schema.values())
    detail = f"{counts.total} events, {len(counts.by_type)} types, {fields} payload fields typed"
    gate_log.add("telemetry counts", scenario_run.scenario.name, "passed", detail)


@pytest.mark.parametrize("scenario_run", NAMES, indirect=True, ids=NAMES)
def test_sync_budget_holds(scenario_run: ScenarioRun, tripwire_goldens: GoldenStore, gate_log: GateLog) -> None:
    outcome = tripwire_goldens.check_sync_budget(
        scenario_run.scenario.name, scenario_run.counter, scenario_run.trajectory.context, HOT_REGIONS
    )
    gate_log.add("sync budget", scenario_run.scenario.name, outcome.status, outcome.detail)


IN_PROCESS = [name for name in NAMES if SCENARIOS[name].ranks == 1]


@pytest.mark.parametrize("scenario_run", IN_PROCESS, indirect=True, ids=IN_PROCESS)
def test_the_run_changes_no_determinism_setting(scenario_run: ScenarioRun, gate_log: GateLog) -> None:
    """A CPU no-op that breaks a GPU run's reproducibility (`torch.backends.cudnn.benchmark = True` in the set-up)
    fails here at its line; only the trainer's own determinism module may set one (on CUDA)."""
    assert scenario_run.settings is not None
    stray = stray_settings(scenario_run)
    detail = "; ".join(change.format() for change in stray) or (
        f"{len(scenario_run.settings)} set by {DETERMINISM_SETTER.rstrip(':')}" if scenario_run.settings else "none"
    )
    gate_log.add("determinism settings", scenario_run.scenario.name, "failed" if stray else "passed", detail)
    assert not stray, f"the run changed a determinism setting outside {DETERMINISM_SETTER.rstrip(':')}: {detail}"


@pytest.mark.parametrize("scenario_run", COMPILED, indirect=True, ids=COMPILED)
def test_compile_budget_holds(scenario_run: ScenarioRun, tripwire_goldens: GoldenStore, gate_log: GateLog) -> None:
    """What torch.compile does (graph breaks, recompiles, frames, graphs, fallbacks), per region and line."""
    outcome = tripwire_goldens.check_compile_budget(
        scenario_run.scenario.name, scenario_run.compiles, scenario_run.trajectory.context
    )
    gate_log.add("compile budget", scenario_run.scenario.name, outcome.status, outcome.detail)


def test_the_compiled_policy_computes_what_the_eager_one_does(
    run_f_compiled: ScenarioRun, run_a_baseline: ScenarioRun, gate_log: GateLog
) -> None:
    """(f) is (a) with the policy compiled (aot_eager): every checkpoint bitwise equal, or the difference named
    with its kind and size."""
    report = compare_trajectories(run_a_baseline.trajectory, run_f_compiled.trajectory, source="(a), eager")
    detail = f"{report.total} checkpoints bitwise equal to (a)" if report.ok else report.format().splitlines()[0]
    gate_log.add("compiled = eager", "f_compiled vs a", "passed" if report.ok else "failed", detail)
    assert report.ok, report.format()
    assert run_f_compiled.compiles.total > 0 and run_a_baseline.compiles.total == 0  # (f) compiled, (a) did not


def test_the_compiled_train_step_computes_what_the_eager_one_does(
    run_k_compiled_step: ScenarioRun, run_b_lifecycle: ScenarioRun, gate_log: GateLog
) -> None:
    """(k) is (b) with every env's train step compiled (aot_eager, ATen's own kernels): every checkpoint bitwise
    (b)'s, through germination, blending, holding, fossilization and pruning, though its graphs were captured again
    as the seeds changed the models (its compile budget names each capture)."""
    report = compare_trajectories(run_b_lifecycle.trajectory, run_k_compiled_step.trajectory, source="(b), eager")
    detail = f"{report.total} checkpoints bitwise equal to (b)" if report.ok else report.format().splitlines()[0]
    gate_log.add("compiled step = eager", "k_compiled_step vs b", "passed" if report.ok else "failed", detail)
    assert report.ok, report.format()
    assert run_k_compiled_step.compiles.total > 0 and run_b_lifecycle.compiles.total == 0


@pytest.mark.parametrize("scenario_run", NAMES, indirect=True, ids=NAMES)
def test_trajectory_matches_golden(scenario_run: ScenarioRun, tripwire_goldens: GoldenStore, gate_log: GateLog) -> None:
    outcome = tripwire_goldens.check_trajectory(scenario_run.scenario.name, scenario_run.trajectory)
    gate_log.add("trajectory", scenario_run.scenario.name, outcome.status, outcome.detail)
    if outcome.status == "skipped":
        pytest.skip(outcome.detail)


@pytest.mark.parametrize("scenario_run", NAMES, indirect=True, ids=NAMES)
def test_telemetry_payloads_match_golden(
    scenario_run: ScenarioRun, tripwire_goldens: GoldenStore, gate_log: GateLog
) -> None:
    context = scenario_run.trajectory.context
    outcome = tripwire_goldens.check_payloads(
        scenario_run.scenario.name, scenario_run.events, context, exclude=PAYLOAD_EXCLUDED
    )
    gate_log.add("telemetry payload", scenario_run.scenario.name, outcome.status, outcome.detail)
    if outcome.status == "skipped":
        pytest.skip(outcome.detail)


@pytest.mark.parametrize("scenario_run", NAMES, indirect=True, ids=NAMES)
def test_wall_clock_fields_keep_their_unit(
    scenario_run: ScenarioRun, tripwire_goldens: GoldenStore, gate_log: GateLog
) -> None:
    """The durations and rates the payload golden leaves out, each against the run's own wall time: a unit changed
    (milliseconds into a `_s` field) moves a field by 1,000 where a machine moves field and run together."""
    scenario = scenario_run.scenario.name
    outcome = tripwire_goldens.check_clock(scenario, scenario_run.events, scenario_run.wall_s, WALL_CLOCK_FIELDS)
    gate_log.add("telemetry clock", scenario, outcome.status, outcome.detail)
    if outcome.status == "skipped":
        pytest.skip(outcome.detail)


def payload_difference(first: ScenarioRun, second: ScenarioRun, exclude: tuple[str, ...]) -> str | None:
    """How two runs' payload digests differ (the first differing event and field), or None when they do not."""
    context = first.trajectory.context
    golden, now = (payload_trajectory(run.events, context, exclude=exclude) for run in (first, second))
    return compare_payloads(golden, now, source="the same run twice")


def test_payload_digests_repeat_in_process_once_wall_clock_and_paths_are_excluded(
    run_d_resume: ScenarioRun, resume_checkpoint: Path, guardrail_dir: Path, gate_log: GateLog
) -> None:
    # (d) again, resuming a copy of the same checkpoint from another folder: every excluded field shows up in it.
    moved = guardrail_dir / "payload_repeat" / resume_checkpoint.name
    moved.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(resume_checkpoint, moved)
    again = run_scenario(SCENARIOS["d_resume"], moved.parent, "--resume", str(moved), probe=False)
    found = payload_difference(run_d_resume, again, PAYLOAD_EXCLUDED)
    gate_log.add("payloads twice", "d_resume", "passed" if found is None else "FAILED", found or "identical")
    assert found is None, found
    # Each excluded field is needed: left in, it alone makes the same run differ.
    for field in (*WALL_CLOCK_FIELDS, *RUN_LOCATION_FIELDS):
        kept = tuple(pattern for pattern in PAYLOAD_EXCLUDED if pattern != field)
        message = payload_difference(run_d_resume, again, kept) or ""
        assert f"field {field} " in message, f"{field} is the same in both runs: why exclude it?"


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


def test_envs_on_worker_threads_reproduce_the_lifecycle_golden(
    run_b_lifecycle: ScenarioRun, tripwire_goldens: GoldenStore, guardrail_dir: Path, gate_log: GateLog
) -> None:
    """(b) with its 4 envs trained and validated on 2 worker threads (`--env-workers 2`, the path that overlaps envs
    on a GPU's streams): bitwise the in-turn (b) of this session and (b)'s golden, seeds germinating, blending and
    fossilizing inside the workers."""
    threaded = run_scenario(SCENARIOS["b_lifecycle"], guardrail_dir / "b_workers", "--env-workers", "2")
    report = compare_trajectories(run_b_lifecycle.trajectory, threaded.trajectory, source="(b), envs in turn")
    assert report.ok, report.format()
    assert threaded.count("SEED_FOSSILIZED") == run_b_lifecycle.count("SEED_FOSSILIZED") > 0
    if tripwire_goldens.update:  # the golden is (b)'s own, written by its in-turn run
        detail = f"{report.total} checkpoints equal to (b) in turn"
    else:
        detail = tripwire_goldens.check_trajectory("b_lifecycle", threaded.trajectory).detail + " to (b)'s golden"
    gate_log.add("env workers = in turn", "b_lifecycle --env-workers 2", "passed", detail)
