"""Throughput benchmarks of the reference trainer, gated by `nox -s bench -- --compare baselines/`.

Every benchmark times its rounds with tripwire's CUDATimer (CUDA events on the working stream on a GPU,
perf_counter on CPU), records env-epochs/s and samples/s next to the time, and carries its gate settings:
the gated metric, a threshold (the smallest relative change that counts) and, where the workload is
deterministic, exact proxies (host syncs and aten ops per run) measured on a freshly built copy.

Thresholds were set from A/A runs on a 2-core machine shared with three other jobs (docs/benchmarks.md): on CPU
the gate judges process CPU time normalized by an interleaved calibration, whose A/A residual reached ~10 %, so
each threshold sits above that, with the Mann-Whitney test guarding against one-run flukes.
"""

from __future__ import annotations

from typing import Any

import pytest

from esper.nissa import TelemetryHub
from tripwire.bench.fixture import BenchSpec, CalibrationWorkload, measure
from workloads import (
    GATE,
    ORIGINAL,
    EpochWorkload,
    PlainLoopWorkload,
    PolicyCallWorkload,
    PPOUpdateWorkload,
    TrainPassWorkload,
    ValidationWorkload,
    bench_config,
    measure_proxies,
)

ENVS = [pytest.param(n, id=f"{n}env") for n in (1, 2, 4)]
THRESHOLDS = {
    "epoch": 0.20,
    "train_pass": 0.10,
    "fused_validation": 0.15,
    "policy_call": 0.20,
    "ppo_update": 0.35,
    "plain_loop": 0.20,
    "original_workload": 0.25,
}


@pytest.mark.parametrize("n_envs", ENVS)
def test_epoch(
    benchmark: Any, n_envs: int, bench_device: str, calibration: CalibrationWorkload, hub: TelemetryHub
) -> None:
    """One full trainer epoch (train pass, fused validation, transfer, policy call, actions, rewards)."""
    config = bench_config(n_envs, GATE, device=bench_device)
    proxies = measure_proxies(EpochWorkload(config, hub), EpochWorkload(config, hub), "epoch")
    units = {"env_epochs": float(n_envs), "samples": float(n_envs * GATE.train_samples)}
    spec = BenchSpec(units, "env_epochs_per_s", THRESHOLDS["epoch"], rounds=10, proxies=proxies)
    measure(benchmark, EpochWorkload(config, hub), spec, calibration)


def test_train_pass(benchmark: Any, bench_device: str, calibration: CalibrationWorkload, hub: TelemetryHub) -> None:
    """The engine's train pass alone, 2 envs."""
    config = bench_config(2, GATE, device=bench_device)
    proxies = measure_proxies(TrainPassWorkload(config, hub), TrainPassWorkload(config, hub), "pass")
    units = {"env_epochs": 2.0, "samples": float(2 * GATE.train_samples)}
    spec = BenchSpec(units, "samples_per_s", THRESHOLDS["train_pass"], rounds=30, proxies=proxies)
    measure(benchmark, TrainPassWorkload(config, hub), spec, calibration)


def test_fused_validation(
    benchmark: Any, bench_device: str, calibration: CalibrationWorkload, hub: TelemetryHub
) -> None:
    """Fused counterfactual validation, 2 envs with a blending seed each (2 alpha configs per forward)."""
    config = bench_config(2, GATE, device=bench_device)
    proxies = measure_proxies(ValidationWorkload(config, hub), ValidationWorkload(config, hub), "pass")
    units = {"env_epochs": 2.0, "samples": float(2 * GATE.val_samples)}
    spec = BenchSpec(units, "samples_per_s", THRESHOLDS["fused_validation"], rounds=10, proxies=proxies)
    measure(benchmark, ValidationWorkload(config, hub), spec, calibration)


def test_policy_call(benchmark: Any, bench_device: str, calibration: CalibrationWorkload, hub: TelemetryHub) -> None:
    """One batched policy call for 4 envs (forward, sampling, one device-to-host transfer)."""
    config = bench_config(4, GATE, device=bench_device)
    proxies = measure_proxies(PolicyCallWorkload(config, hub), PolicyCallWorkload(config, hub), "call")
    spec = BenchSpec(
        {"env_epochs": 4.0, "samples": 4.0}, "time_ms", THRESHOLDS["policy_call"], rounds=20, proxies=proxies
    )
    measure(benchmark, PolicyCallWorkload(config, hub), spec, calibration)


def test_ppo_update(benchmark: Any, bench_device: str, calibration: CalibrationWorkload, hub: TelemetryHub) -> None:
    """One PPO update over a 4-env, 5-epoch rollout (normalizer update included, as the trainer runs it)."""
    config = bench_config(4, GATE, device=bench_device)
    proxies = measure_proxies(PPOUpdateWorkload(config, hub), PPOUpdateWorkload(config, hub), "update")
    transitions = float(4 * config.max_epochs)
    units = {"env_epochs": transitions, "samples": transitions}
    spec = BenchSpec(units, "time_ms", THRESHOLDS["ppo_update"], rounds=10, proxies=proxies)
    measure(benchmark, PPOUpdateWorkload(config, hub), spec, calibration)


@pytest.mark.parametrize("n_envs", ENVS)
def test_plain_loop(
    benchmark: Any, n_envs: int, bench_device: str, calibration: CalibrationWorkload, hub: TelemetryHub
) -> None:
    """The plain-PyTorch reference loop: the same hosts and batches as test_epoch, no controller, no seeds."""
    config = bench_config(n_envs, GATE, device=bench_device)
    units = {"env_epochs": float(n_envs), "samples": float(n_envs * GATE.train_samples)}
    spec = BenchSpec(units, "env_epochs_per_s", THRESHOLDS["plain_loop"], rounds=10)
    measure(benchmark, PlainLoopWorkload(config, hub), spec, calibration)


@pytest.mark.parametrize("n_envs", ENVS)
def test_original_workload(
    benchmark: Any, n_envs: int, bench_device: str, calibration: CalibrationWorkload, hub: TelemetryHub
) -> None:
    """The original's measured workload: cifar_baseline, 1000 train samples/env/epoch, batch 50/env, whole
    5-epoch episode (one round per epoch), as the trainer's throughput telemetry averages them."""
    config = bench_config(n_envs, ORIGINAL, device=bench_device)
    units = {"env_epochs": float(n_envs), "samples": float(n_envs * ORIGINAL.train_samples)}
    spec = BenchSpec(units, "env_epochs_per_s", THRESHOLDS["original_workload"], rounds=5, warmup=0)
    measure(benchmark, EpochWorkload(config, hub, episodes=True), spec, calibration)
