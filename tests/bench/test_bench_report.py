"""The stored-baseline report reads honestly: raw and normalized changes side by side, the machine difference
named, a warning when the baseline comes from another machine, and plots with the baseline's git history."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from bench_helpers import pytest_benchmark_json, record, run

from tripwire.bench import main
from tripwire.bench.gate import compare_runs
from tripwire.bench.history import baseline_history
from tripwire.bench.report import render_text
from tripwire.bench.store import write_baseline


def row_line(text: str, name: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(name))


def test_raw_and_normalized_changes_are_both_shown_when_they_disagree() -> None:
    # 13.7 -> 13.1 env-epochs/s measured while the calibration step ran 20 % slower: the code got faster.
    base = record(samples=tuple(2000.0 / 13.7 for _ in range(10)))
    now = record(samples=tuple(2000.0 / 13.1 for _ in range(10)), calibration_scale=1.2)
    line = row_line(render_text(compare_runs(run(base), run(now))), "test_epoch[2env]")
    assert "13.7 env-epochs/s" in line and "13.1 env-epochs/s" in line
    assert "-4.4%" in line and "+20.0%" in line and "+14.7%" in line  # raw, machine, change


def test_the_legend_says_what_each_column_means() -> None:
    text = render_text(compare_runs(run(record()), run(record())))
    assert "raw: their change" in text and "machine: how much slower" in text and "change: raw with the machine" in text


def test_a_baseline_from_another_machine_is_named_and_the_paired_ab_recommended() -> None:
    other = replace(run(record()), context={"cpu": "other cpu", "torch": "2.x"})
    text = render_text(compare_runs(other, run(record())))
    assert "cpu: baseline other cpu | now test cpu  (differs)" in text
    assert "only the threshold decides" in text and "python -m tripwire bench-ab" in text
    assert "only the threshold decides" not in render_text(compare_runs(run(record()), run(record())))


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=repo, check=True, capture_output=True
    )


def test_the_history_lists_every_committed_version_of_the_baseline(tmp_path: Path) -> None:
    path = tmp_path / "baselines" / "bench" / "cpu.json"
    git(tmp_path, "init", "-q")
    for scale in (1.0, 1.1):
        write_baseline(path, run(record(scale=scale)))
        git(tmp_path, "add", ".")
        git(tmp_path, "commit", "-q", "-m", f"baseline {scale}")
    history = baseline_history(path)
    assert len(history) == 2
    assert history[1][1].records["test_epoch[2env]"].samples_ms[0] == pytest.approx(110.0)


def test_a_baseline_outside_git_has_no_history(tmp_path: Path) -> None:
    path = write_baseline(tmp_path / "cpu.json", run(record()))
    assert baseline_history(path) == []


def test_compare_writes_png_and_svg_plots_linked_from_the_markdown(tmp_path: Path) -> None:
    baselines = tmp_path / "baselines"
    write_baseline(baselines / "bench" / "cpu.json", run(record()))
    current = pytest_benchmark_json(tmp_path / "current.json", record(scale=1.02))
    assert main(["--current", str(current), "--compare", f"{baselines}/", "--out", str(tmp_path / "out")]) == 0
    for name in ("bench.png", "bench.svg"):
        assert (tmp_path / "out" / name).stat().st_size > 1000
    assert "![bench.png](bench.png)" in (tmp_path / "out" / "bench-report.md").read_text()
