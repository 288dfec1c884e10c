"""Self-consistency: the same run twice in-process, across two processes, and across a save/resume."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from guardrail_scenarios import PAYLOAD_EXCLUDED, RANK_FIELDS, SCENARIOS, ScenarioRun, run_scenario

from tripwire.bitwise.trajectory import Trajectory, compare_trajectories
from tripwire.gates.pytest_plugin import GateLog
from tripwire.telemetry.payloads import compare_payloads, payload_trajectory

pytestmark = pytest.mark.guardrail


def test_repeat_run_in_process_is_bitwise_identical(
    run_a_baseline: ScenarioRun, run_continuous: ScenarioRun, gate_log: GateLog
) -> None:
    # The continuous two-round run starts with exactly (a)'s round: same config except the round count.
    report = compare_trajectories(run_a_baseline.trajectory, run_continuous.trajectory.select("r0/"))
    gate_log.add("same run twice", "a_baseline", "passed" if report.ok else "FAILED", report.format().splitlines()[0])
    report.raise_if_diverged()


def test_resumed_round_equals_uninterrupted_round(
    run_d_resume: ScenarioRun, run_continuous: ScenarioRun, gate_log: GateLog
) -> None:
    report = compare_trajectories(run_continuous.trajectory.select("r1/"), run_d_resume.trajectory)
    gate_log.add(
        "resume == continuous", "d_resume", "passed" if report.ok else "FAILED", report.format().splitlines()[0]
    )
    report.raise_if_diverged()


def test_second_process_reproduces_the_run_bitwise(
    run_a_baseline: ScenarioRun, second_process: tuple[subprocess.Popen[str], Path], gate_log: GateLog
) -> None:
    child, out = second_process
    _, stderr = child.communicate(timeout=300)
    assert child.returncode == 0, f"scenario runner failed:\n{stderr[-2000:]}"
    other = Trajectory.load(out)
    assert other.context == run_a_baseline.trajectory.context, "the child process saw another determinism context"
    report = compare_trajectories(run_a_baseline.trajectory, other, source="second process")
    gate_log.add("two processes", "a_baseline", "passed" if report.ok else "FAILED", report.format().splitlines()[0])
    report.raise_if_diverged()


def test_trajectory_probe_adds_no_host_sync(
    run_a_baseline: ScenarioRun, guardrail_dir: Path, gate_log: GateLog
) -> None:
    # Saved like (a), to another file: the checkpoint (d) resumes from stays untouched.
    unobserved = run_scenario(
        SCENARIOS["a_baseline"], guardrail_dir, "--save", str(guardrail_dir / "unobserved.pt"), probe=False
    )
    assert len(unobserved.trajectory) == 0
    with_probe, without = run_a_baseline.counter.counts_by_region(), unobserved.counter.counts_by_region()
    gate_log.add("probe adds no sync", "a_baseline", "passed" if with_probe == without else "FAILED", str(without))
    assert with_probe == without, f"with probe {with_probe}, without {without}"


def test_two_ranks_reproduce_the_single_process_run_bitwise(
    run_a_two_envs: ScenarioRun, run_e_distributed: ScenarioRun, gate_log: GateLog
) -> None:
    # (e) is a_two_envs sharded over two gloo ranks: the same trajectory, and the same events in the same order
    # once the rank stamp is left out (beside ids, timestamps and wall-clock fields).
    report = compare_trajectories(run_a_two_envs.trajectory, run_e_distributed.trajectory, source="single process")
    context = run_a_two_envs.trajectory.context
    excluded = (*PAYLOAD_EXCLUDED, *RANK_FIELDS)
    golden, now = (
        payload_trajectory(run.events, context, exclude=excluded) for run in (run_a_two_envs, run_e_distributed)
    )
    payloads = compare_payloads(golden, now, source="the single-process run")
    verdict = "passed" if report.ok and payloads is None else "FAILED"
    detail = f"{len(run_e_distributed.trajectory)} checkpoints, {len(run_e_distributed.events)} events equal"
    gate_log.add("2 ranks == 1 process", "e_distributed", verdict, detail if verdict == "passed" else "diverged")
    report.raise_if_diverged()
    assert payloads is None, payloads
    assert {event["rank"] for event in run_e_distributed.events} == {0, 1}
