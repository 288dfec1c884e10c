"""Builders of synthetic benchmark records and runs for the gate's tests (no trainer, no timing)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tripwire.bench.store import BenchRecord, BenchRun

BASE_SAMPLES = (100.0, 102.0, 98.0, 101.0, 99.0, 103.0, 97.0, 100.5, 99.5, 101.5)
CALIBRATION = (10.0, 10.1, 9.9, 10.0, 10.05, 9.95, 10.0, 10.0, 10.1, 9.9)


def record(
    name: str = "test_epoch[2env]",
    *,
    scale: float = 1.0,
    calibration_scale: float = 1.0,
    metric: str = "env_epochs_per_s",
    threshold: float = 0.10,
    proxies: dict[str, int] | None = None,
    samples: tuple[float, ...] = BASE_SAMPLES,
    clock: str = "wall",
    cpu_scale: float | None = None,
) -> BenchRecord:
    """A record whose round times are `samples * scale` and calibration `CALIBRATION * calibration_scale`.

    CPU-clock times are the same samples scaled by `cpu_scale` (default: `scale`), calibration likewise.
    """
    cpu = scale if cpu_scale is None else cpu_scale
    return BenchRecord(
        name=name,
        samples_ms=tuple(s * scale for s in samples),
        calibration_ms=tuple(c * calibration_scale for c in CALIBRATION[: len(samples)]),
        units={"env_epochs": 2.0, "samples": 512.0},
        metric=metric,
        threshold=threshold,
        alpha=0.01,
        proxies=dict(proxies or {}),
        clock=clock,
        cpu_ms=tuple(s * cpu for s in samples),
        calibration_cpu_ms=tuple(c * calibration_scale for c in CALIBRATION[: len(samples)]),
    )


def run(*records: BenchRecord, device: str = "cpu") -> BenchRun:
    return BenchRun(device=device, context={"cpu": "test cpu", "torch": "2.x"}, records={r.name: r for r in records})


def pytest_benchmark_json(path: Path, *records: BenchRecord, device: str = "cpu") -> Path:
    """Write `records` the way pytest-benchmark's --benchmark-json writes benchmarks measured by bench_fixture."""
    benchmarks: list[dict[str, Any]] = []
    for rec in records:
        payload = {
            "device": device,
            "timer": rec.timer,
            "samples_ms": list(rec.samples_ms),
            "calibration_ms": list(rec.calibration_ms),
            "units": rec.units,
            "metric": rec.metric,
            "threshold": rec.threshold,
            "alpha": rec.alpha,
            "proxies": rec.proxies,
            "clock": rec.clock,
            "cpu_ms": list(rec.cpu_ms),
            "calibration_cpu_ms": list(rec.calibration_cpu_ms),
        }
        benchmarks.append(
            {"name": rec.name, "fullname": f"benchmarks/x.py::{rec.name}", "extra_info": {"tripwire": payload}}
        )
    data = {
        "machine_info": {
            "node": "n",
            "machine": "x86_64",
            "cpu": {"brand_raw": "test cpu"},
            "tripwire": {"torch": "2.x"},
        },
        "benchmarks": benchmarks,
    }
    path.write_text(json.dumps(data))
    return path
