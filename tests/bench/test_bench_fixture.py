"""The measurement side: rounds recorded into extra_info, spec validation, the aten op counter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from tripwire.bench.fixture import BenchSpec, CalibrationWorkload, measure, run_rounds
from tripwire.bench.ops import OpCounter


class CountingWorkload:
    def __init__(self) -> None:
        self.prepared = 0
        self.ran = 0

    def prepare(self) -> None:
        self.prepared += 1

    def run(self) -> None:
        self.ran += 1
        torch.ones(64, 64) @ torch.ones(64, 64)


class FakeBenchmark:
    """The part of pytest-benchmark's fixture that `measure` uses."""

    def __init__(self) -> None:
        self.extra_info: dict[str, Any] = {}
        self.rounds = 0

    def pedantic(self, target: Callable[[], None], *, setup: Callable[[], None], rounds: int, **_: Any) -> None:
        for _ in range(rounds):
            setup()
            target()
        self.rounds = rounds


def test_measure_records_one_sample_and_one_calibration_per_round() -> None:
    benchmark, workload = FakeBenchmark(), CountingWorkload()
    spec = BenchSpec({"env_epochs": 2.0, "samples": 100.0}, "env_epochs_per_s", rounds=4, warmup=1)
    measure(benchmark, workload, spec, CalibrationWorkload(steps=1, batch=4))
    payload = benchmark.extra_info["tripwire"]
    assert (workload.prepared, workload.ran) == (5, 5)
    assert len(payload["samples_ms"]) == 4 and len(payload["calibration_ms"]) == 4
    assert len(payload["cpu_ms"]) == 4 and len(payload["calibration_cpu_ms"]) == 4
    assert payload["timer"] == "perf_counter" and payload["metric"] == "env_epochs_per_s"
    assert payload["clock"] == "cpu"
    assert benchmark.extra_info["env_epochs_per_s"] == pytest.approx(2000.0 / benchmark.extra_info["time_ms"])


def test_run_rounds_times_without_pytest_benchmark() -> None:
    log = run_rounds(CountingWorkload(), BenchSpec({"samples": 1.0}, rounds=3, warmup=0), CalibrationWorkload(steps=1))
    assert len(log.samples_ms) == 3 and all(ms > 0 for ms in log.samples_ms)


def test_a_throughput_metric_needs_its_unit() -> None:
    with pytest.raises(ValueError, match="needs a unit 'env_epochs'"):
        BenchSpec({"samples": 1.0}, "env_epochs_per_s")


def test_a_gated_benchmark_needs_three_rounds() -> None:
    with pytest.raises(ValueError, match="at least 3 rounds"):
        BenchSpec({"samples": 1.0}, rounds=2)


def test_the_op_counter_counts_each_dispatched_aten_op() -> None:
    a, b = torch.ones(3), torch.ones(3)
    with OpCounter() as ops:
        c = a + b
        c.mul_(2)
    assert ops.by_op == {"aten.add.Tensor": 1, "aten.mul_.Tensor": 1}
    assert ops.total == 2


@pytest.mark.gpu
def test_cuda_rounds_are_timed_with_cuda_events() -> None:
    log = run_rounds(CountingWorkload(), BenchSpec({"samples": 1.0}, rounds=3, warmup=0), CalibrationWorkload("cuda"))
    assert log.timer == "cuda_event" and log.device.startswith("cuda")
