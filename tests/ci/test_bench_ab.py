"""`python -m tripwire.bench.ab`: interleaved turn order, pooled rounds, and one-line usage errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from tripwire.bench.ab import main, pool, turn_order
from tripwire.bench.store import BenchRecord, BenchRun


def run_with(samples: tuple[float, ...], proxies: dict[str, int]) -> BenchRun:
    record = BenchRecord(
        name="test_train_pass",
        samples_ms=samples,
        calibration_ms=(1.0,) * len(samples),
        units={"samples": 100.0},
        metric="samples_per_s",
        threshold=0.12,
        alpha=0.05,
        proxies=proxies,
        clock="cpu",
        cpu_ms=samples,
        calibration_cpu_ms=(1.0,) * len(samples),
    )
    return BenchRun(device="cpu", context={"node": "x"}, records={record.name: record})


def test_turns_alternate_which_side_runs_first() -> None:
    assert [turn_order(t) for t in range(3)] == [("base", "head"), ("head", "base"), ("base", "head")]


def test_pooling_concatenates_every_turns_rounds_and_keeps_the_first_proxies() -> None:
    pooled = pool([run_with((1.0, 2.0, 3.0), {"syncs": 4}), run_with((4.0, 5.0, 6.0), {"syncs": 4})])
    record = pooled.records["test_train_pass"]
    assert record.samples_ms == (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)
    assert record.cpu_ms == record.samples_ms and len(record.calibration_cpu_ms) == 6
    assert record.proxies == {"syncs": 4}


def test_a_tree_without_a_suite_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "head" / "benchmarks").mkdir(parents=True)
    assert main(["--base", str(tmp_path / "base"), "--head", str(tmp_path / "head")]) == 2
    assert "--base" in capsys.readouterr().err


def test_zero_turns_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for side in ("base", "head"):
        (tmp_path / side / "benchmarks").mkdir(parents=True)
    assert main(["--base", str(tmp_path / "base"), "--head", str(tmp_path / "head"), "--turns", "0"]) == 2
    assert "at least 1 turn" in capsys.readouterr().err
