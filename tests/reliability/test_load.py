"""Load: 16 envs x 3 slots, debug telemetry, a slow backend behind a small queue: no event lost, queue bounded."""

from __future__ import annotations

import resource
import sys
import time
from collections import Counter
from dataclasses import dataclass

import pytest

from esper.leyline import TelemetryEvent, TelemetryEventType, TelemetryLevel
from esper.nissa import InMemoryBackend, TelemetryHub
from esper.simic.training.config import TrainingConfig
from esper.simic.training.vectorized import run_training

pytestmark = pytest.mark.slow

ENVS, EPOCHS, SLOTS = 16, 3, ["r0c0", "r0c1", "r0c2"]
QUEUE = 32
RSS_CEILING_MIB = 3072  # the whole test process (torch, pytest, 16 CNN hosts); a leak per event would blow past it
T = TelemetryEventType


class SlowBackend(InMemoryBackend):
    """Keeps every event but takes 0.2 ms per write, so the trainer outruns it and the queue fills."""

    def write(self, event: TelemetryEvent) -> None:
        time.sleep(0.0002)
        super().write(event)


@dataclass
class LoadRun:
    hub: TelemetryHub
    backend: SlowBackend
    rss_before_mib: float
    rss_after_mib: float


def _maxrss_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


@pytest.fixture(scope="module")
def load_run() -> LoadRun:
    config = TrainingConfig.from_dict(
        {
            "n_episodes": 1,
            "n_envs": ENVS,
            "max_epochs": EPOCHS,
            "slots": SLOTS,
            "dataset": "synthetic",
            "train_samples": 50,
            "val_samples": 25,
            "batch_size": 25,
            "hidden_dim": 32,
            "lstm_hidden_dim": 32,
            "telemetry_level": "debug",
        }
    )
    before = _maxrss_mib()
    hub = TelemetryHub(TelemetryLevel.DEBUG, queue_size=QUEUE)
    backend = SlowBackend()
    hub.add_backend(backend)
    run_training(config, hub=hub)
    hub.close()
    return LoadRun(hub, backend, before, _maxrss_mib())


def test_every_emitted_event_is_delivered(load_run: LoadRun) -> None:
    assert load_run.hub.emitted == load_run.hub.delivered == len(load_run.backend.events)


def test_per_type_counts_match_the_run_structure(load_run: LoadRun) -> None:
    counts = Counter(e.event_type for e in load_run.backend.events)
    kinds = Counter(e.data.get("kind") for e in load_run.backend.of_type(T.ANALYTICS_SNAPSHOT))
    assert counts[T.TRAINING_STARTED] == 1
    assert counts[T.EPOCH_COMPLETED] == ENVS * EPOCHS
    assert kinds["last_action"] == ENVS * EPOCHS
    assert counts[T.EPISODE_OUTCOME] == ENVS
    assert counts[T.PPO_UPDATE_COMPLETED] == counts[T.BATCH_EPOCH_COMPLETED] == 1
    assert (kinds["batch_stats"], kinds["action_distribution"], kinds["throughput"]) == (1, 1, 1)


def test_every_env_reports_every_epoch_once_in_order(load_run: LoadRun) -> None:
    for env_id in range(ENVS):
        epochs = [e.epoch for e in load_run.backend.of_type(T.EPOCH_COMPLETED) if e.env_id == env_id]
        assert epochs == list(range(1, EPOCHS + 1))


def test_back_pressure_keeps_the_queue_bounded_while_it_is_full(load_run: LoadRun) -> None:
    # the slow backend made the queue back up to (about) its size, and never beyond it
    assert QUEUE // 2 <= load_run.hub.max_queue_depth <= QUEUE


def test_peak_memory_stays_bounded(load_run: LoadRun) -> None:
    print(f"peak RSS {load_run.rss_before_mib:.0f} MiB before, {load_run.rss_after_mib:.0f} MiB after the load run")
    assert load_run.rss_after_mib < RSS_CEILING_MIB
