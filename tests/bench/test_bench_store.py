"""Baseline files: checksummed round trip, one-line errors for corrupted or hand-edited files, results loading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_helpers import pytest_benchmark_json, record, run

from tripwire.bench.store import BaselineError, ResultsError, baseline_path, load_results, read_baseline, write_baseline


def test_a_written_baseline_reads_back_equal(tmp_path: Path) -> None:
    original = run(record("a", proxies={"syncs_per_epoch": 3}), record("b", metric="time_ms"))
    path = write_baseline(tmp_path / "bench" / "cpu.json", original)
    assert read_baseline(path) == original


def test_a_hand_edited_baseline_is_refused_naming_the_file_and_the_fix(tmp_path: Path) -> None:
    path = write_baseline(tmp_path / "cpu.json", run(record("a")))
    body = json.loads(path.read_text())
    body["records"]["a"]["samples_ms"][0] = 1.0
    path.write_text(json.dumps(body))
    with pytest.raises(BaselineError) as error:
        read_baseline(path)
    message = str(error.value)
    assert "\n" not in message
    assert str(path) in message and "checksum" in message and "--save" in message


def test_a_corrupted_baseline_is_refused_naming_the_file_and_the_fix(tmp_path: Path) -> None:
    path = write_baseline(tmp_path / "cpu.json", run(record("a")))
    path.write_text(path.read_text()[:50])
    with pytest.raises(BaselineError) as error:
        read_baseline(path)
    message = str(error.value)
    assert "\n" not in message
    assert str(path) in message and "not valid JSON" in message and "git checkout" in message


def test_a_missing_baseline_says_how_to_record_one(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match=r"no benchmark baseline for this device.*--save"):
        read_baseline(tmp_path / "bench" / "cuda.json")


def test_baselines_are_keyed_by_device_type_under_a_bench_folder() -> None:
    assert baseline_path("baselines/", "cpu") == Path("baselines/bench/cpu.json")
    assert baseline_path("baselines/bench", "cuda:1") == Path("baselines/bench/cuda.json")
    assert baseline_path("elsewhere/mine.json", "cuda") == Path("elsewhere/mine.json")


def test_results_keep_only_benchmarks_measured_by_the_fixture(tmp_path: Path) -> None:
    path = pytest_benchmark_json(tmp_path / "r.json", record("a"), record("b"))
    data = json.loads(path.read_text())
    data["benchmarks"].append({"name": "plain", "extra_info": {}})
    path.write_text(json.dumps(data))
    loaded = load_results(path)
    assert sorted(loaded.records) == ["a", "b"]
    assert loaded.device == "cpu"
    assert loaded.context["cpu"] == "test cpu" and loaded.context["torch"] == "2.x"


def test_results_without_any_gated_benchmark_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"benchmarks": [{"name": "plain", "extra_info": {}}]}))
    with pytest.raises(ResultsError, match="no benchmark recorded tripwire data"):
        load_results(path)
