"""The vectorized trainer's pieces: emitters, trend detection, slot resolution, and the PPO round path through
the policy client (normalizer once per round, buffer cleared, bootstrap), plus the governor rollback wiring."""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from esper.leyline import (
    ACTION_HEAD_NAMES,
    CNN_BLUEPRINTS,
    AlphaMode,
    BatchSummary,
    LifecycleOp,
    SeedStage,
    SlotConfig,
    TelemetryEvent,
    TelemetryEventType,
    TelemetryLevel,
)
from esper.nissa import InMemoryBackend, TelemetryHub
from esper.simic.agent.ppo import PPOMetrics
from esper.simic.rewards import RewardNormalizer
from esper.simic.training import action_execution as actions
from esper.simic.training import emitters
from esper.simic.training.config import TrainingConfig
from esper.simic.training.observations import ObservationBatch
from esper.simic.training.policy_client import PPOClient
from esper.simic.training.trainer import rolling_mean
from esper.simic.training.vectorized import run_training
from esper.simic.training.wiring import build_policy_client
from esper.tamiyo.features import state_dim
from esper.tamiyo.masks import SlotMaskState, compute_action_masks, stack_masks
from esper.tolaria.governor import DEATH_PENALTY

T = TelemetryEventType


@pytest.fixture
def captured() -> Iterator[tuple[TelemetryHub, InMemoryBackend]]:
    hub = TelemetryHub(TelemetryLevel.NORMAL)
    memory = InMemoryBackend()
    hub.add_backend(memory)
    yield hub, memory
    hub.close()


def delivered(hub: TelemetryHub, memory: InMemoryBackend) -> list[TelemetryEvent]:
    hub.flush()
    return memory.events


def metrics(**overrides: Any) -> PPOMetrics:
    fields: dict[str, Any] = {
        "policy_loss": 0.1,
        "value_loss": 0.2,
        "entropy": 0.9,
        "entropy_per_head": dict.fromkeys(ACTION_HEAD_NAMES, 0.9),
        "grad_norm": 1.0,
        "kl_divergence": 0.001,
        "clip_fraction": 0.0,
        "explained_variance": 0.5,
        "nan_grad_count": 0,
        "early_stopped": False,
        "skipped": False,
        "entropy_coef": 0.05,
        "update_time_ms": 3.0,
        "ratio_max": 1.1,
        "ratio_min": 0.9,
        "advantage_mean": 0.0,
        "advantage_std": 1.0,
        "return_mean": 0.0,
        "value_mean": 0.0,
        "lr": 3e-4,
        "epochs": 1,
    }
    return PPOMetrics(**{**fields, **overrides})


def summary(round_idx: int, rolling: float) -> BatchSummary:
    return BatchSummary(round_idx, 2 * (round_idx + 1), 1.0, rolling, rolling, (rolling,), (1.0,), 0, 1.0, 6.0)


ENVS = [SimpleNamespace(op_counts=Counter({"WAIT": 2, "GERMINATE": 1})), SimpleNamespace(op_counts=Counter(WAIT=3))]


# ---- emitters ----


def test_ops_normal_events_are_dropped_below_normal_level() -> None:
    hub = TelemetryHub(TelemetryLevel.MINIMAL)
    memory = InMemoryBackend()
    hub.add_backend(memory)
    emitters.emit(hub, T.EPOCH_COMPLETED, {"env_id": 0})
    emitters.emit(hub, T.PPO_UPDATE_COMPLETED, {"policy_loss": 0.0})
    hub.close()

    assert [e.event_type for e in memory.events] == [T.PPO_UPDATE_COMPLETED]


def test_healthy_update_emits_only_ppo_update_completed(captured: tuple[TelemetryHub, InMemoryBackend]) -> None:
    hub, memory = captured
    emitters.emit_ppo_round(hub, metrics(), round_idx=4)

    [event] = delivered(hub, memory)
    assert (event.event_type, event.epoch, event.data["policy_loss"]) == (T.PPO_UPDATE_COMPLETED, 4, 0.1)


def test_anomalies_come_before_the_update_event_in_a_fixed_order(
    captured: tuple[TelemetryHub, InMemoryBackend],
) -> None:
    hub, memory = captured
    sick = metrics(ratio_max=9.0, ratio_min=0.01, explained_variance=-1.0, skipped=True, grad_norm=500.0)
    emitters.emit_ppo_round(hub, sick, round_idx=0)

    assert [e.event_type for e in delivered(hub, memory)] == [
        T.RATIO_EXPLOSION_DETECTED,
        T.RATIO_COLLAPSE_DETECTED,
        T.VALUE_COLLAPSE_DETECTED,
        T.NUMERICAL_INSTABILITY_DETECTED,
        T.GRADIENT_PATHOLOGY_DETECTED,
        T.PPO_UPDATE_COMPLETED,
    ]


def test_nan_gradients_alone_count_as_numerical_instability() -> None:
    assert emitters.anomaly_types(metrics(nan_grad_count=2)) == [T.NUMERICAL_INSTABILITY_DETECTED]


def test_action_distribution_sums_op_counts_over_envs(captured: tuple[TelemetryHub, InMemoryBackend]) -> None:
    hub, memory = captured
    emitters.emit_round_summary(hub, summary(0, 50.0), None, (0.5, 2.0), ENVS)  # type: ignore[arg-type]

    distribution = delivered(hub, memory)[-1]
    assert distribution.data == {"kind": "action_distribution", "op_counts": {"GERMINATE": 1, "WAIT": 5}}


def test_throughput_snapshot_carries_its_timing(captured: tuple[TelemetryHub, InMemoryBackend]) -> None:
    hub, memory = captured
    emitters.emit_throughput(hub, 2, {"step_time_ms": 250.0, "fps": 4.0})

    [event] = delivered(hub, memory)
    assert (event.data, event.epoch) == ({"kind": "throughput", "step_time_ms": 250.0, "fps": 4.0}, 2)


# ---- trend detection ----


def trend_events(hub: TelemetryHub, memory: InMemoryBackend, previous: float | None, now: float) -> list[T]:
    emitters.emit_round_summary(hub, summary(1, now), previous, (0.5, 2.0), ENVS)  # type: ignore[arg-type]
    trends = {T.PLATEAU_DETECTED, T.DEGRADATION_DETECTED, T.IMPROVEMENT_DETECTED}
    return [e.event_type for e in delivered(hub, memory) if e.event_type in trends]


@pytest.mark.parametrize(
    ("previous", "now", "expected"),
    [
        (50.0, 50.3, [T.PLATEAU_DETECTED]),
        (50.0, 47.0, [T.DEGRADATION_DETECTED]),
        (50.0, 53.0, [T.IMPROVEMENT_DETECTED]),
        (50.0, 51.0, []),  # between the plateau and the improvement thresholds
        (None, 10.0, []),  # the first round has nothing to compare with
    ],
)
def test_trend_event_follows_the_rolling_accuracy_change(
    captured: tuple[TelemetryHub, InMemoryBackend], previous: float | None, now: float, expected: list[T]
) -> None:
    assert trend_events(*captured, previous, now) == expected


def test_rolling_mean_uses_the_last_five_rounds() -> None:
    assert rolling_mean([100.0, 1.0, 2.0, 3.0, 4.0, 5.0]) == 3.0
    assert rolling_mean([]) is None


# ---- slot resolution and decoding ----


def test_decode_action_maps_head_indices_to_a_typed_spec() -> None:
    heads = dict.fromkeys(ACTION_HEAD_NAMES, 0)
    heads.update(op=int(LifecycleOp.GERMINATE), slot=1, blueprint=4)

    spec = actions.decode_action([heads[n] for n in ACTION_HEAD_NAMES], SlotConfig(("r0c0", "r0c2")))

    assert (spec.op, spec.slot_id, spec.slot_in_range, spec.blueprint.blueprint_id) == (
        LifecycleOp.GERMINATE,
        "r0c2",
        True,
        "depthwise",
    )


def test_slot_indices_follow_row_major_slot_order_whatever_the_flag_order() -> None:
    config = SlotConfig(("r1c0", "r0c2", "r0c0"))

    assert [actions._resolve_target_slot(i, config) for i in range(3)] == [
        ("r0c0", True),
        ("r0c2", True),
        ("r1c0", True),
    ]


# ---- the PPO round path through the client ----

K, STEPS, SLOTS = 2, 3, 1


@pytest.fixture
def client() -> PPOClient:
    config = TrainingConfig.from_dict({"n_envs": K, "max_epochs": STEPS, "hidden_dim": 16, "lstm_hidden_dim": 16})
    built = build_policy_client(config, "ppo", SLOTS, torch.device("cpu"))
    assert isinstance(built, PPOClient)
    return built


def observation(value: float) -> ObservationBatch:
    one = compute_action_masks(
        [SlotMaskState(SeedStage.DORMANT, 0, AlphaMode.HOLD, True)],
        max_seeds=None,
        seeds_used=0,
        allowed_blueprints=CNN_BLUEPRINTS,
    )
    return ObservationBatch(
        features=torch.full((K, state_dim(SLOTS)), value),
        blueprint_idx=torch.zeros(K, SLOTS, dtype=torch.long),
        masks=stack_masks([one] * K, torch.device("cpu")),
        views=[],
    )


def play_round(client: PPOClient, offset: float = 0.0) -> PPOMetrics:
    client.begin_round(K)
    for step in range(STEPS):
        client.act(observation(offset + step))
        client.record(step, [0] * K, [1.0, -1.0], [False] * K)
    client.bootstrap(observation(offset + STEPS))
    return client.end_round()


def test_obs_normalizer_is_frozen_during_the_rollout_and_updated_once_per_round(client: PPOClient) -> None:
    client.begin_round(K)
    for step in range(STEPS):
        client.act(observation(float(step)))
        client.record(step, [0] * K, [0.5, 0.5], [False] * K)
        assert client.obs_normalizer.count == 0
    client.bootstrap(observation(float(STEPS)))
    client.end_round()

    assert client.obs_normalizer.count == K * STEPS
    assert torch.allclose(client.obs_normalizer.mean, torch.full((state_dim(SLOTS),), 1.0))


def test_rewards_are_normalized_per_step_and_the_buffer_holds_the_normalized_ones(client: PPOClient) -> None:
    reference = RewardNormalizer(clip=client.reward_normalizer.clip)
    client.begin_round(K)
    client.act(observation(0.0))
    client.record(0, [0] * K, [2.0, -2.0], [False] * K)

    expected = [reference.update_and_normalize(2.0), reference.update_and_normalize(-2.0)]
    assert client.reward_normalizer.count == K
    assert client.agent.buffer.rewards[:, 0].tolist() == pytest.approx(expected)


def test_end_round_runs_one_update_and_clears_the_buffer(client: PPOClient) -> None:
    result = play_round(client)

    assert client.agent.update_count == 1
    assert client.agent.buffer.step_count == 0
    assert result.epochs == 1


def test_kl_early_stop_on_the_round_path_still_clears_the_buffer_and_counts_the_update() -> None:
    config = TrainingConfig.from_dict(
        {
            "n_envs": K,
            "max_epochs": STEPS,
            "hidden_dim": 16,
            "lstm_hidden_dim": 16,
            "ppo_updates_per_batch": 3,
            "target_kl": 1e-9,
            "lr": 0.05,
        }
    )
    eager = build_policy_client(config, "ppo", SLOTS, torch.device("cpu"))
    assert isinstance(eager, PPOClient)

    result = play_round(eager)

    assert result.early_stopped and not result.skipped
    assert eager.agent.buffer.step_count == 0
    assert eager.agent.update_count == 1


def test_bootstrap_stores_the_deterministic_value_of_the_post_action_state(client: PPOClient) -> None:
    client.begin_round(K)
    for step in range(STEPS):
        client.act(observation(0.0))
        client.record(step, [0] * K, [0.0, 0.0], [False] * K)
    assert client.hidden is not None
    expected = client.agent.policy.predict_values(
        client.obs_normalizer.normalize(observation(9.0).features), observation(9.0).blueprint_idx, client.hidden
    )

    client.bootstrap(observation(9.0))

    assert torch.equal(client.agent.buffer.bootstrap_values, expected)


def test_client_state_survives_a_weights_only_checkpoint_and_resumes_identically(client: PPOClient) -> None:
    play_round(client)
    buffer = io.BytesIO()
    torch.save(client.state_dict(), buffer)
    buffer.seek(0)
    config = TrainingConfig.from_dict({"n_envs": K, "max_epochs": STEPS, "hidden_dim": 16, "lstm_hidden_dim": 16})
    fresh = build_policy_client(config, "ppo", SLOTS, torch.device("cpu"))
    assert isinstance(fresh, PPOClient)
    fresh.load_state_dict(torch.load(buffer, weights_only=True))

    assert play_round(client, 5.0).policy_loss == play_round(fresh, 5.0).policy_loss
    assert all(torch.equal(a, b) for a, b in zip(client.agent.policy.parameters(), fresh.agent.policy.parameters()))


# ---- governor rollback wiring ----


def test_a_rollback_pays_the_death_penalty_and_is_reported() -> None:
    config = TrainingConfig.from_dict(
        {
            "n_episodes": 1,
            "n_envs": 2,
            "max_epochs": 3,
            "train_samples": 32,
            "val_samples": 16,
            "batch_size": 16,
            "hidden_dim": 16,
            "lstm_hidden_dim": 16,
            "inject_nan_epoch": 2,
        }
    )
    hub = TelemetryHub()
    memory = InMemoryBackend()
    hub.add_backend(memory)
    result = run_training(config, hub=hub)
    hub.close()

    [rollback] = memory.of_type(T.GOVERNOR_ROLLBACK)
    env0_actions = [e for e in memory.events if e.data.get("kind") == "last_action" and e.env_id == 0]
    [env0_outcome] = [e for e in memory.of_type(T.EPISODE_OUTCOME) if e.env_id == 0]
    assert (rollback.env_id, rollback.epoch, rollback.severity) == (0, 2, "critical")
    assert result.rounds[0].rollbacks == 1
    assert [e.data["reward"] for e in env0_actions if e.epoch == 2] == [-DEATH_PENALTY]
    assert env0_outcome.data["total_reward"] == pytest.approx(sum(e.data["reward"] for e in env0_actions))
