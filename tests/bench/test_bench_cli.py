"""`python -m tripwire.bench`: exit codes, the table, markdown and JSON reports, refusals under CI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from bench_helpers import pytest_benchmark_json, record, run

from tripwire.bench import main
from tripwire.bench.store import write_baseline


@pytest.fixture
def baselines(tmp_path: Path) -> Path:
    write_baseline(tmp_path / "baselines" / "bench" / "cpu.json", run(record("test_epoch[2env]"), record("b")))
    return tmp_path / "baselines"


def gate(tmp_path: Path, baselines: Path, *records: object) -> int:
    current = pytest_benchmark_json(tmp_path / "current.json", *records)  # type: ignore[arg-type]
    return main(["--current", str(current), "--compare", f"{baselines}/", "--out", str(tmp_path / "out")])


def test_an_unchanged_run_exits_zero(tmp_path: Path, baselines: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert gate(tmp_path, baselines, record("test_epoch[2env]"), record("b")) == 0
    assert "bench gate: PASS" in capsys.readouterr().out


def test_a_regression_exits_one_and_the_table_names_it(
    tmp_path: Path, baselines: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gate(tmp_path, baselines, record("test_epoch[2env]", scale=1.25), record("b")) == 1
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("test_epoch[2env]"))
    assert "REGRESSION" in line and "-20.0%" in line
    assert "bench gate: FAIL" in out


def test_the_comparison_writes_markdown_and_json_reports(tmp_path: Path, baselines: Path) -> None:
    gate(tmp_path, baselines, record("test_epoch[2env]", scale=1.25), record("b"))
    markdown = (tmp_path / "out" / "bench-report.md").read_text()
    report = json.loads((tmp_path / "out" / "bench-report.json").read_text())
    assert "| `test_epoch[2env]` | env_epochs_per_s (wall) |" in markdown and "**REGRESSION" in markdown
    assert report["passed"] is False
    assert [row["benchmark"] for row in report["rows"] if row["fails"]] == ["test_epoch[2env]"]


def test_the_markdown_is_appended_to_the_github_step_summary(
    tmp_path: Path, baselines: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    gate(tmp_path, baselines, record("test_epoch[2env]"), record("b"))
    text = summary.read_text()
    assert text.startswith("earlier step\n") and "### Benchmark gate" in text


def test_a_hand_edited_baseline_exits_two_with_one_line(
    tmp_path: Path, baselines: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = baselines / "bench" / "cpu.json"
    path.write_text(path.read_text().replace('"threshold": 0.1', '"threshold": 0.9'))
    assert gate(tmp_path, baselines, record("test_epoch[2env]"), record("b")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "hand-edited" in err


def test_save_is_refused_under_ci(
    tmp_path: Path, monkeypatch: pytest.CaptureFixture[str], capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CI", "true")  # type: ignore[attr-defined]
    current = pytest_benchmark_json(tmp_path / "current.json", record("a"))
    assert main(["--current", str(current), "--save", str(tmp_path / "baselines")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--save refuses to run under CI" in err
    assert not (tmp_path / "baselines").exists()


def test_save_writes_the_device_keyed_baseline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    current = pytest_benchmark_json(tmp_path / "current.json", record("a"))
    assert main(["--current", str(current), "--save", str(tmp_path / "baselines")]) == 0
    assert (tmp_path / "baselines" / "bench" / "cpu.json").is_file()


def test_the_module_exits_two_on_a_corrupted_baseline_as_a_process(tmp_path: Path, baselines: Path) -> None:
    (baselines / "bench" / "cpu.json").write_text("{not json")
    current = pytest_benchmark_json(tmp_path / "current.json", record("test_epoch[2env]"), record("b"))
    command = [sys.executable, "-m", "tripwire.bench", "--current", str(current), "--compare", str(baselines)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr and "cpu.json" in done.stderr
