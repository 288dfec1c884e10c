"""Round telemetry order (brief 2.2) on an in-memory hub, from a real tiny run.

Per round, after the episode outcomes: anomaly events, PPO_UPDATE_COMPLETED, ANALYTICS_SNAPSHOT(batch_stats),
a trend event (from the second round on, when the rolling accuracy moved or stalled), BATCH_EPOCH_COMPLETED,
ANALYTICS_SNAPSHOT(action_distribution), ANALYTICS_SNAPSHOT(throughput).
"""

from __future__ import annotations

from typing import Any

import pytest

from esper.leyline import TelemetryEvent, TelemetryEventType
from esper.nissa import InMemoryBackend, TelemetryHub
from esper.simic.training.config import TrainingConfig
from esper.simic.training.emitters import anomaly_types
from esper.simic.training.trainer import TrainingResult
from esper.simic.training.vectorized import run_training

T = TelemetryEventType
ANOMALIES = {
    T.RATIO_EXPLOSION_DETECTED,
    T.RATIO_COLLAPSE_DETECTED,
    T.VALUE_COLLAPSE_DETECTED,
    T.NUMERICAL_INSTABILITY_DETECTED,
    T.GRADIENT_PATHOLOGY_DETECTED,
    T.GRADIENT_ANOMALY,
}
TRENDS = {T.PLATEAU_DETECTED, T.DEGRADATION_DETECTED, T.IMPROVEMENT_DETECTED}
ROUNDS, ENVS, EPOCHS = 3, 2, 3


def label(event: TelemetryEvent) -> str:
    kind = event.data.get("kind") if event.event_type is T.ANALYTICS_SNAPSHOT else None
    if event.event_type in ANOMALIES:
        return "anomaly"
    if event.event_type in TRENDS:
        return "trend"
    return f"{event.event_type.name}:{kind}" if kind else event.event_type.name


@pytest.fixture(scope="module")
def tiny_run() -> tuple[TrainingResult, list[TelemetryEvent]]:
    config = {
        "n_episodes": ROUNDS,
        "n_envs": ENVS,
        "max_epochs": EPOCHS,
        "train_samples": 32,
        "val_samples": 16,
        "batch_size": 16,
        "hidden_dim": 16,
        "lstm_hidden_dim": 16,
        "seed": 3,
    }
    hub = TelemetryHub()
    memory = InMemoryBackend()
    hub.add_backend(memory)
    result = run_training(TrainingConfig.from_dict(config), hub=hub)
    hub.close()
    return result, memory.events


def round_tail(events: list[TelemetryEvent], round_idx: int) -> list[str]:
    """Labels of the run-level (env_id -1) events of one round, after its last EPISODE_OUTCOME."""
    outcomes = [i for i, e in enumerate(events) if e.event_type is T.EPISODE_OUTCOME and e.epoch == round_idx]
    start = outcomes[-1] + 1
    tail: list[str] = []
    for event in events[start:]:
        if event.env_id != -1 or event.epoch != round_idx:
            break
        tail.append(label(event))
    return tail


def expected_tail(result: TrainingResult, round_idx: int, trend: bool) -> list[str]:
    anomalies = ["anomaly"] * len(anomaly_types(result.ppo_metrics[round_idx]))
    return [
        *anomalies,
        "PPO_UPDATE_COMPLETED",
        "ANALYTICS_SNAPSHOT:batch_stats",
        *(["trend"] if trend else []),
        "BATCH_EPOCH_COMPLETED",
        "ANALYTICS_SNAPSHOT:action_distribution",
        "ANALYTICS_SNAPSHOT:throughput",
    ]


@pytest.mark.parametrize("round_idx", range(ROUNDS))
def test_round_events_come_in_the_briefs_order(
    tiny_run: tuple[TrainingResult, list[TelemetryEvent]], round_idx: int
) -> None:
    result, events = tiny_run
    tail = round_tail(events, round_idx)

    assert tail == expected_tail(result, round_idx, trend="trend" in tail)


def test_the_first_round_has_no_trend_event(tiny_run: tuple[TrainingResult, list[TelemetryEvent]]) -> None:
    assert "trend" not in round_tail(tiny_run[1], 0)


def test_each_round_ends_with_its_throughput_snapshot(tiny_run: tuple[TrainingResult, list[TelemetryEvent]]) -> None:
    events = tiny_run[1]
    ends = [e for e in events if e.data.get("kind") == "throughput"]

    assert [e.epoch for e in ends] == list(range(ROUNDS))
    assert events[-2] is ends[-1]  # then only the run's terminal event


def test_the_run_ends_with_one_terminal_event(tiny_run: tuple[TrainingResult, list[TelemetryEvent]]) -> None:
    events = tiny_run[1]
    ended = [e for e in events if e.event_type is T.TRAINING_ENDED]

    assert ended == [events[-1]]
    assert ended[0].data["outcome"] == "completed" and ended[0].data["rounds_completed"] == ROUNDS


def test_throughput_fps_is_one_thousand_over_the_step_time(
    tiny_run: tuple[TrainingResult, list[TelemetryEvent]],
) -> None:
    for event in tiny_run[1]:
        if event.data.get("kind") == "throughput":
            data: dict[str, Any] = event.data
            assert data["fps"] == pytest.approx(1000.0 / data["step_time_ms"])
            assert data["epochs"] == EPOCHS


def test_per_env_epoch_events_precede_the_round_events(tiny_run: tuple[TrainingResult, list[TelemetryEvent]]) -> None:
    events = tiny_run[1]
    first_update = next(i for i, e in enumerate(events) if e.event_type is T.PPO_UPDATE_COMPLETED)
    round0_epochs = [i for i, e in enumerate(events) if e.event_type is T.EPOCH_COMPLETED and i < first_update]

    assert len(round0_epochs) == ENVS * EPOCHS
    assert [e.event_type for e in events[:1]] == [T.TRAINING_STARTED]
