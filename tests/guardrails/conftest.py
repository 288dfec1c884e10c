"""Session fixtures for the gate: each canonical scenario runs once per session and is shared by its checks."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from distributed_scenario import stop_ranks
from guardrail_scenarios import (
    SCENARIOS,
    TWO_ENVS,
    RankedScenario,
    ScenarioRun,
    finish_ranked,
    run_scenario,
    start_ranked,
)


@pytest.fixture(scope="session")
def guardrail_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("guardrails")


RUNNER = Path(__file__).with_name("guardrail_scenarios.py")


@pytest.fixture(scope="session", autouse=True)
def second_process(guardrail_dir: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """Scenario (a) in a child process, started first so it runs beside the in-process scenarios."""
    out = guardrail_dir / "a_baseline.subprocess.json"
    env = {**os.environ, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")}
    command = [sys.executable, str(RUNNER), "a_baseline", str(out)]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    yield child, out
    if child.poll() is None:
        child.kill()
    child.communicate()


@pytest.fixture(scope="session", autouse=True)
def ranked_launch(guardrail_dir: Path) -> Iterator[RankedScenario]:
    """Scenario (e) on two torchrun ranks, started first so it runs beside the in-process scenarios."""
    ranked = start_ranked(SCENARIOS["e_distributed"], guardrail_dir)
    yield ranked
    stop_ranks(ranked.launch)


@pytest.fixture(scope="session")
def run_e_distributed(ranked_launch: RankedScenario) -> ScenarioRun:
    """Scenario (e): the two-env scenario sharded over two gloo ranks, read back as one run."""
    return finish_ranked(ranked_launch)


@pytest.fixture(scope="session")
def resume_checkpoint(guardrail_dir: Path) -> Path:
    return guardrail_dir / "after_round_1.pt"


@pytest.fixture(scope="session")
def run_a_baseline(guardrail_dir: Path, resume_checkpoint: Path) -> ScenarioRun:
    """Scenario (a); it also saves the checkpoint scenario (d) resumes from (saving emits no telemetry)."""
    return run_scenario(SCENARIOS["a_baseline"], guardrail_dir, "--save", str(resume_checkpoint))


@pytest.fixture(scope="session")
def run_b_lifecycle(guardrail_dir: Path) -> ScenarioRun:
    return run_scenario(SCENARIOS["b_lifecycle"], guardrail_dir)


@pytest.fixture(scope="session")
def run_k_compiled_step(guardrail_dir: Path) -> ScenarioRun:
    return run_scenario(SCENARIOS["k_compiled_step"], guardrail_dir)


@pytest.fixture(scope="session")
def run_c_rollback(guardrail_dir: Path) -> ScenarioRun:
    return run_scenario(SCENARIOS["c_rollback"], guardrail_dir)


@pytest.fixture(scope="session")
def run_f_compiled(guardrail_dir: Path) -> ScenarioRun:
    """Scenario (f): (a) with the policy network compiled (aot_eager)."""
    return run_scenario(SCENARIOS["f_compiled"], guardrail_dir)


@pytest.fixture(scope="session")
def run_d_resume(guardrail_dir: Path, resume_checkpoint: Path, run_a_baseline: ScenarioRun) -> ScenarioRun:
    """Scenario (d): resume (a)'s checkpoint and run the second round."""
    return run_scenario(SCENARIOS["d_resume"], guardrail_dir, "--resume", str(resume_checkpoint))


@pytest.fixture(scope="session")
def run_continuous(guardrail_dir: Path) -> ScenarioRun:
    """(d)'s two rounds without a break: its round 0 repeats (a) in-process, its round 1 is what (d) resumed."""
    return run_scenario(SCENARIOS["d_resume"].with_args(name="d_continuous"), guardrail_dir)


@pytest.fixture(scope="session")
def run_a_two_envs(guardrail_dir: Path) -> ScenarioRun:
    """(a) with two envs: the sync-scaling check and the env-order hazard compare against it."""
    return run_scenario(TWO_ENVS, guardrail_dir)


@pytest.fixture(scope="session")
def plain_runs() -> dict[str, ScenarioRun]:
    """Runs of the scenarios that need nothing but their command line (no `run_<name>` fixture), made on first use."""
    return {}


@pytest.fixture
def scenario_run(
    request: pytest.FixtureRequest, plain_runs: dict[str, ScenarioRun], guardrail_dir: Path
) -> ScenarioRun:
    """The session's run of the scenario named by the test's `scenario` parameter: its `run_<name>` fixture where
    it has one, else its command line run once per session."""
    name = request.param
    try:
        run: ScenarioRun = request.getfixturevalue(f"run_{name}")
    except pytest.FixtureLookupError:
        if name not in plain_runs:
            plain_runs[name] = run_scenario(SCENARIOS[name], guardrail_dir)
        run = plain_runs[name]
    return run
