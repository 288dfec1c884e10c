"""The CI workflow file is a valid GitHub workflow (offline schema check) and runs the gate's sessions."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "guardrails.yml"
CHECK = Path(sys.executable).with_name("check-jsonschema")

pytestmark = pytest.mark.skipif(
    not CHECK.exists(), reason="check-jsonschema is not installed: pip install -e .[test] installs it"
)


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    """check-jsonschema against its vendored (offline) GitHub workflow schema."""
    command = [str(CHECK), "--builtin-schema", "vendor.github-workflows", str(path)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def load() -> dict[str, Any]:
    data: dict[str, Any] = YAML(typ="safe").load(WORKFLOW.read_text(encoding="utf-8"))
    return data


def run_lines(job: dict[str, Any]) -> str:
    return "\n".join(str(step.get("run", "")) for step in job["steps"])


def test_the_workflow_passes_the_github_workflow_schema() -> None:
    done = validate(WORKFLOW)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_workflow_with_a_job_missing_runs_on_fails_the_schema(tmp_path: Path) -> None:
    broken = tmp_path / "guardrails.yml"
    broken.write_text(WORKFLOW.read_text(encoding="utf-8").replace("runs-on:", "run-on:"), encoding="utf-8")
    done = validate(broken)
    assert done.returncode != 0
    assert "'runs-on' is a required property" in done.stdout


def test_a_workflow_with_an_unknown_trigger_fails_the_schema(tmp_path: Path) -> None:
    broken = tmp_path / "guardrails.yml"
    shutil.copy(WORKFLOW, broken)
    text = broken.read_text(encoding="utf-8").replace("  pull_request:\n", "  pull_requests:\n", 1)
    broken.write_text(text, encoding="utf-8")
    assert validate(broken).returncode != 0


def test_the_workflow_runs_on_pull_requests_and_pushes_to_main() -> None:
    triggers = load()["on"]
    assert "pull_request" in triggers
    assert triggers["push"]["branches"] == ["main"]


def test_the_gate_job_installs_nox_then_runs_guardrails_tests_and_hazards() -> None:
    commands = run_lines(load()["jobs"]["guardrails"])
    order = [commands.index(c) for c in ("pip install nox", "nox -s guardrails", "nox -s tests", "nox -s hazards")]
    assert order == sorted(order), commands
    assert "GITHUB_STEP_SUMMARY" in commands and "-m tripwire baselines-diff" in commands


def test_pull_requests_gate_against_their_base_branch_and_pushes_against_the_goldens() -> None:
    steps = load()["jobs"]["guardrails"]["steps"]
    gate = [step for step in steps if "nox -s guardrails" in str(step.get("run", ""))]
    by_event = {step["if"]: step["run"] for step in gate}
    assert '--against "origin/${{ github.base_ref }}"' in by_event["github.event_name == 'pull_request'"]
    assert "--against" not in by_event["github.event_name != 'pull_request'"]


def test_the_nox_jobs_cache_the_project_environment_keyed_on_pyproject() -> None:
    for name, job in load()["jobs"].items():
        if name == "uv-verbatim":  # uv keeps its own cache (setup-uv); no nox environment there
            continue
        caches = [step for step in job["steps"] if str(step.get("uses", "")).startswith("actions/cache@")]
        assert len(caches) == 1, name
        settings = caches[0]["with"]
        assert ".venv" in settings["path"] and "~/.cache/pip" in settings["path"], name
        assert "src/tripwire/pyproject.toml')" in settings["key"], name  # tripwire's own distribution too
        assert "pyproject.toml')" in settings["key"] and "hashFiles(" in settings["key"], name


def test_the_bench_job_checks_out_base_and_head_and_runs_the_paired_ab() -> None:
    job = load()["jobs"]["bench-ab"]
    checkouts = [step["with"] for step in job["steps"] if str(step.get("uses", "")).startswith("actions/checkout@")]
    assert sorted(c["path"] for c in checkouts) == ["base", "head"]
    assert "python -m tripwire bench-ab --base ../base --head ." in run_lines(job)
    assert "bench-ab.png" in run_lines(job)  # the job summary links the plots


def test_the_instructions_job_counts_base_then_head_under_valgrind_on_pull_requests_only() -> None:
    job = load()["jobs"]["instructions"]
    assert job["if"] == "github.event_name == 'pull_request'"  # a count costs ~15 CPU minutes: not on every push
    commands = run_lines(job)
    assert "apt-get install -y -q valgrind" in commands
    base = commands.index("--path ../base/src")
    head = commands.index("--compare build/instructions-base.json")
    assert base < head  # the base is counted first, in the same job, so the contexts agree
    assert "--tolerance 0.02" in commands and "python -m tripwire.bench.instructions" in commands


def test_tripwires_tests_run_on_every_later_python_it_claims() -> None:
    job = load()["jobs"]["tripwire-pythons"]
    assert job["strategy"]["matrix"]["python"] == ["3.12", "3.13"]
    assert job["strategy"]["fail-fast"] is False  # a fault on one version does not hide the other's result
    steps = [step for step in job["steps"] if str(step.get("uses", "")).startswith("actions/setup-python@")]
    assert steps[0]["with"]["python-version"] == "${{ matrix.python }}"
    commands = run_lines(job)
    assert commands.index("pip install -q -e ./src/tripwire") < commands.index("pytest -q tests/tripwire")
    requires = tomllib.loads((ROOT / "src" / "tripwire" / "pyproject.toml").read_text(encoding="utf-8"))
    assert requires["project"]["requires-python"] == ">=3.11"  # the versions tested: 3.11 above, these here


def test_no_step_updates_goldens_or_baselines() -> None:
    workflow = load()
    commands = "\n".join(run_lines(job) for job in workflow["jobs"].values())
    for forbidden in ("--snapshot-update", "--tripwire-update", "nox -s baselines", "--save"):
        assert forbidden not in commands, forbidden
    for env in (workflow.get("env", {}), *(job.get("env", {}) for job in workflow["jobs"].values())):
        assert "CI" not in env  # GitHub's CI=true must stay set: it is what refuses golden updates


def test_every_run_step_is_valid_bash(tmp_path: Path) -> None:
    for name, job in load()["jobs"].items():
        for index, step in enumerate(job["steps"]):
            if "run" not in step:
                continue
            script = tmp_path / f"{name}-{index}.sh"
            script.write_text(str(step["run"]).replace("${{", '"$').replace("}}", '"'), encoding="utf-8")
            done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
            assert done.returncode == 0, f"{name} step {index}: {done.stderr}"


LEARNING = ROOT / ".github" / "workflows" / "learning.yml"


def test_the_learning_workflow_passes_the_schema_and_runs_the_learning_session_weekly() -> None:
    done = validate(LEARNING)
    assert done.returncode == 0, done.stdout + done.stderr
    data: dict[str, Any] = YAML(typ="safe").load(LEARNING.read_text(encoding="utf-8"))
    assert set(data["on"]) == {"schedule", "workflow_dispatch"}
    (job,) = data["jobs"].values()
    assert "nox -s learning" in run_lines(job)


def test_the_workflow_runs_the_plans_commands_verbatim_under_uv() -> None:
    steps = load()["jobs"]["uv-verbatim"]["steps"]
    commands = " ".join(str(step.get("run", "")) for step in steps)
    assert "UV_CACHE_DIR=.uv-cache uv run pytest -q tests/test_import_isolation.py" in commands
    assert "uv run python -m esper.scripts.train ppo --preset cifar_baseline" in commands
