"""The pytest plugin end to end, in a throwaway project: snapshots under baselines/, missing/unused fail, CI lock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Plugins the throwaway project does not use (hypothesis alone takes ~1.5 s to import).
FAST = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:benchmark")

TEST_FILE = """
EVENTS = [{"event_type": "TRAINING_STARTED", "env_id": -1}, {"event_type": "EPOCH_COMPLETED", "env_id": 0}]


def test_counts(telemetry_counts):
    telemetry_counts.check(EVENTS)
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (tmp_path / "test_counts.py").write_text(TEST_FILE, encoding="utf-8")
    return tmp_path


def pytest_in(project: Path, *args: str, ci: bool = False) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "CI"}
    if ci:
        env["CI"] = "true"
    command = [sys.executable, "-m", "pytest", "-q", *FAST, *args]
    return subprocess.run(command, cwd=project, capture_output=True, text=True, env=env, timeout=120)


def test_missing_snapshot_fails_then_update_writes_it_under_baselines(project: Path) -> None:
    missing = pytest_in(project)
    assert missing.returncode == 1 and "1 snapshot failed" in missing.stdout
    written = pytest_in(project, "--snapshot-update")
    assert written.returncode == 0, written.stdout
    golden = project / "baselines" / "telemetry" / "test_counts" / "test_counts.json"
    assert json.loads(golden.read_text())["by_type"] == {"EPOCH_COMPLETED": 1, "TRAINING_STARTED": 1}
    assert not (project / "__snapshots__").exists()
    assert pytest_in(project).returncode == 0


def test_unused_snapshot_fails(project: Path) -> None:
    assert pytest_in(project, "--snapshot-update").returncode == 0
    stale = project / "baselines" / "telemetry" / "test_counts" / "test_removed.json"
    stale.write_text("{}\n", encoding="utf-8")
    done = pytest_in(project)
    assert done.returncode == 1 and "1 snapshot unused" in done.stdout


@pytest.mark.parametrize("flag", ["--snapshot-update", "--tripwire-update"])
def test_updating_goldens_is_refused_under_ci(project: Path, flag: str) -> None:
    done = pytest_in(project, flag, ci=True)
    assert done.returncode == 4
    assert f"{flag} refused: CI is set" in done.stderr


TRAJECTORY_TEST = """
import torch


def test_trajectory(trajectory, tripwire_goldens):
    trajectory.record("r0/weights", torch.ones(3))
    outcome = tripwire_goldens.check_trajectory("s", trajectory.trajectory)
    assert outcome.status == "passed", outcome.detail
"""


@pytest.fixture
def trajectory_project(tmp_path: Path) -> Path:
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (tmp_path / "test_traj.py").write_text(TRAJECTORY_TEST, encoding="utf-8")
    return tmp_path


def test_under_ci_a_trajectory_golden_that_does_not_apply_fails_with_what_to_do(trajectory_project: Path) -> None:
    done = pytest_in(trajectory_project, ci=True)
    assert done.returncode == 1
    assert "NoGoldenApplies" in done.stdout and "--tripwire-against BASE" in done.stdout
    assert "nox" not in done.stdout  # a project without this repository's nox sessions is not told to run them


def test_under_ci_a_base_comparison_turns_the_missing_golden_into_a_skip(trajectory_project: Path) -> None:
    done = pytest_in(trajectory_project, "--tripwire-against=abc123", ci=True)
    assert done.returncode == 1 and "NoGoldenApplies" not in done.stdout  # the test itself asserts "passed"
    assert "no trajectory golden" in done.stdout


def test_goldens_recorded_into_another_directory_are_compared_from_there(trajectory_project: Path) -> None:
    scratch = trajectory_project / "scratch-goldens"
    recorded = pytest_in(trajectory_project, "-o", f"tripwire_baselines={scratch}", "--tripwire-update")
    assert recorded.returncode == 1  # the update outcome is "updated", which the test's assertion rejects
    assert list((scratch / "trajectories" / "s").glob("cpu-*.json"))
    compared = pytest_in(trajectory_project, "-o", f"tripwire_baselines={scratch}", "--tripwire-against=base", ci=True)
    assert compared.returncode == 0, compared.stdout


GATE_TABLE_TEST = """
import pytest


def test_logged_check(gate_log):
    gate_log.add("logged check", "s1", "passed", "word " * 60)


@pytest.mark.parametrize("scenario", ["s2"])
def test_check_that_fails_before_logging(gate_log, scenario):
    raise AssertionError("trajectory diverged at checkpoint 3 of 29")
"""


def test_the_gate_table_shows_a_failing_check_and_wraps_long_details(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (tmp_path / "test_gate.py").write_text(GATE_TABLE_TEST, encoding="utf-8")
    done = pytest_in(tmp_path)
    after = done.stdout.split("tripwire guardrails")[1].splitlines()[1:]
    table = after[: next(i for i, line in enumerate(after) if line.startswith("="))]

    [start] = [i for i, line in enumerate(table) if "FAILED" in line]
    assert table[start].split()[:7] == ["check", "that", "fails", "before", "logging", "s2", "FAILED"]
    row_text = " ".join(line.strip() for line in table[start:])
    assert "trajectory diverged at checkpoint 3 of 29" in row_text
    words = [line for line in table if "word" in line]
    assert len(words) > 1  # wrapped onto continuation lines
    assert sum(line.count("word") for line in words) == 60  # nothing cut
    assert all(line.rstrip().endswith("word") for line in words)  # never mid-word


def test_format_gate_table_wraps_at_words_within_the_width() -> None:
    from tripwire.gates.pytest_plugin import format_gate_table

    lines = format_gate_table([("c", "s", "passed", "alpha beta gamma delta " * 10)], width=80)
    assert all(len(line) <= 80 for line in lines)
    assert " ".join(" ".join(lines[1:]).split()[3:]) == ("alpha beta gamma delta " * 10).strip()


def test_failure_messages_name_the_projects_own_update_command(trajectory_project: Path) -> None:
    default = pytest_in(trajectory_project, "--tripwire-against=abc", ci=True)
    assert "no trajectory golden" in default.stdout and "pytest --tripwire-update --snapshot-update" in default.stdout
    custom = pytest_in(trajectory_project, "--tripwire-against=abc", "-o", "tripwire_update_command=make goldens")
    assert "record one with make goldens, then review and commit the goldens" in custom.stdout
