"""Fixtures of the benchmark suite: the device under test, the calibration workload, a telemetry hub, hazards.

- The device comes from `TRIPWIRE_BENCH_DEVICE` (set by `python -m tripwire.bench --device`; default cpu).
- `ESPER_BENCH_SLOWDOWN=train_pass:0.20` is a hazard for proving the gate (benchmarks/slowdowns.py): after every
  `VectorizedEngine.train_pass` call it busy-spins until the process has used 20 % more CPU time than the pass
  itself did. Only this suite reads it; the trainer itself has no such hook.
- The machine info saved with the results gains the torch version, thread count, device and GPU name.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from esper.nissa import TelemetryHub
from esper.tolaria.engine import VectorizedEngine
from slowdowns import SLOWDOWN_ENV, SlowdownError, patches
from tripwire.bench.fixture import CalibrationWorkload
from tripwire.bench.worker import cpu_model
from workloads import GATE, EpochWorkload, bench_config

DEVICE_ENV = "TRIPWIRE_BENCH_DEVICE"


def bench_device_name() -> str:
    return os.environ.get(DEVICE_ENV, "cpu")


def pytest_benchmark_generate_machine_info(config: pytest.Config) -> dict[str, Any]:
    """pytest-benchmark's machine info without its py-cpuinfo dependency (`cpu_model` reads /proc/cpuinfo)."""
    uname = platform.uname()
    return {
        "node": uname.node,
        "processor": uname.processor,
        "machine": uname.machine,
        "python_compiler": platform.python_compiler(),
        "python_implementation": platform.python_implementation(),
        "python_version": platform.python_version(),
        "release": uname.release,
        "system": uname.system,
        "cpu": {"brand_raw": cpu_model(), "count": os.cpu_count()},
    }


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    device = bench_device_name()
    gpu = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else ""
    machine_info["tripwire"] = {
        "torch": torch.__version__,
        "threads": str(torch.get_num_threads()),
        "device": device,
        "gpu": gpu,
        "slowdown": os.environ.get(SLOWDOWN_ENV, ""),
    }


@pytest.fixture(scope="session")
def bench_device() -> str:
    device = bench_device_name()
    if device.startswith("cuda") and not torch.cuda.is_available():
        pytest.skip(f"{DEVICE_ENV}={device} but torch.cuda.is_available() is False on this machine")
    return device


@pytest.fixture(scope="session")
def calibration(bench_device: str) -> CalibrationWorkload:
    return CalibrationWorkload(bench_device)


@pytest.fixture(scope="session")
def hub() -> Iterator[TelemetryHub]:
    telemetry = TelemetryHub()
    yield telemetry
    telemetry.close()


@pytest.fixture(scope="session", autouse=True)
def warm_process(bench_device: str, calibration: CalibrationWorkload, hub: TelemetryHub) -> None:
    """Run a few trainer epochs and calibration passes before the first benchmark.

    Without it the first benchmark of the session pays for lazy imports, first-touch allocations and the first
    conv kernels: in A/A runs test_epoch[1env], which runs first, moved by up to 36 % while the others stayed
    within ~10 %.
    """
    workload = EpochWorkload(bench_config(2, GATE, device=bench_device), hub)
    for _ in range(3):
        workload.prepare()
        workload.run()
        calibration.measure_ms()


@pytest.fixture(scope="session", autouse=True)
def injected_slowdown() -> Iterator[str]:
    text = os.environ.get(SLOWDOWN_ENV, "")
    try:
        found = patches(text)
    except SlowdownError as exc:
        raise pytest.UsageError(str(exc)) from exc
    with pytest.MonkeyPatch.context() as patch:
        for attribute, wrapper in found:
            patch.setattr(VectorizedEngine, attribute, wrapper)
        yield text
