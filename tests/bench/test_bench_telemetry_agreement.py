"""The trainer's own throughput telemetry agrees with the benchmark harness's figure for the same round.

The trainer times each epoch of a round with CUDATimer inside `run_round` and emits one ANALYTICS_SNAPSHOT
(kind=throughput) per round. The harness builds the same run as the benchmarks do (benchmarks/workloads.py) and
clocks that round from outside, with its own perf_counter: from the policy's `begin_round` (just before the
first epoch) to the trainer's `on_epoch` hook after the last epoch, and computes env-epochs/s itself. Both see
the same interval of the same process, so noise from other jobs on the machine hits both alike; what the test
catches is a trainer that times the wrong thing (only the last epoch, as the original did; events on a stream
the work does not run on; env-epochs confused with epochs or samples).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from esper.leyline import TelemetryEventType
from esper.nissa import InMemoryBackend, TelemetryHub
from esper.simic.training.policy_client import PolicyClient
from esper.simic.training.trainer import VectorizedPPOTrainer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from workloads import Size, bench_config, build_parts

SIZE = Size(train_samples=192, val_samples=48, batch_size=32)
N_ENVS, EPOCHS = 2, 4


class RoundClock:
    """Wraps the policy client: stamps the time when the round begins and after every epoch (on_epoch)."""

    def __init__(self, policy: PolicyClient) -> None:
        self.policy = policy
        self.started = 0.0
        self.epoch_ends: list[float] = []

    def begin_round(self, n_envs: int) -> None:
        self.policy.begin_round(n_envs)
        self.started = time.perf_counter()

    def epoch_done(self, step: object) -> None:
        self.epoch_ends.append(time.perf_counter())

    def __getattr__(self, name: str) -> Any:
        return getattr(self.policy, name)

    def env_epochs_per_s(self, n_envs: int) -> float:
        return n_envs * len(self.epoch_ends) / (self.epoch_ends[-1] - self.started)


def test_trainer_throughput_telemetry_agrees_with_the_benchmark_within_ten_percent() -> None:
    backend = InMemoryBackend()
    hub = TelemetryHub()
    hub.add_backend(backend)
    parts = build_parts(bench_config(N_ENVS, SIZE, max_epochs=EPOCHS), hub)
    clock = RoundClock(parts.policy)
    parts.policy = clock  # type: ignore[assignment]  # a delegating wrapper: the trainer sees the same client
    parts.on_epoch = clock.epoch_done
    VectorizedPPOTrainer(parts).run_round(0)
    hub.close()
    snapshots = [
        event.data
        for event in backend.of_type(TelemetryEventType.ANALYTICS_SNAPSHOT)
        if event.data.get("kind") == "throughput"
    ]
    assert len(snapshots) == 1 and snapshots[0]["epochs"] == EPOCHS == len(clock.epoch_ends)
    reported, measured = float(snapshots[0]["env_epochs_per_s"]), clock.env_epochs_per_s(N_ENVS)
    print(f"trainer telemetry {reported:.2f} env-epochs/s, benchmark clock {measured:.2f} env-epochs/s")
    assert abs(reported / measured - 1.0) <= 0.10, (
        f"trainer reports {reported:.2f} env-epochs/s but the benchmark clock measures {measured:.2f} "
        f"({100 * (reported / measured - 1):+.1f} %) over the same {EPOCHS} epochs of {N_ENVS} envs"
    )
