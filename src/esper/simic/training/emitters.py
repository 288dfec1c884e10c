"""Emitters: one function per event the loop sends, each building a TelemetryEvent from typed inputs.

Per run: TRAINING_STARTED (and CHECKPOINT_LOADED on resume). Per env per epoch: EPOCH_COMPLETED,
ANALYTICS_SNAPSHOT(last_action), COUNTERFACTUAL_MATRIX_COMPUTED (when some seed has alpha > 0). Per env at
episode end: EPISODE_OUTCOME. Per round, in order: anomaly events, PPO_UPDATE_COMPLETED,
ANALYTICS_SNAPSHOT(batch_stats), a trend event, BATCH_EPOCH_COMPLETED, ANALYTICS_SNAPSHOT(action_distribution),
ANALYTICS_SNAPSHOT(throughput).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from esper.leyline import (
    ActionOutcome,
    AnalyticsKind,
    BatchSummary,
    TelemetryEvent,
    TelemetryEventType,
)
from esper.nissa.hub import TelemetryHub
from esper.simic.agent.ppo import PPOMetrics
from esper.simic.training.parallel_env_state import ParallelEnvState
from esper.simic.training.policy_client import ActionBatch

SUCCESS_THRESHOLD = 80.0
RATIO_EXPLOSION = 5.0
RATIO_COLLAPSE = 0.1
VALUE_COLLAPSE_EV = 0.1
GRADIENT_PATHOLOGY_NORM = 100.0
STABILITY_WINDOW = 20


class CountsOps(Protocol):
    """An env's op counts so far in the episode (a ParallelEnvState, or the EnvOutcome a rank gathered)."""

    @property
    def op_counts(self) -> Mapping[str, int]: ...


def emit(
    hub: TelemetryHub,
    event_type: TelemetryEventType,
    data: Mapping[str, Any],
    *,
    env_id: int = -1,
    epoch: int | None = None,
    severity: str = "info",
    message: str = "",
) -> None:
    """Send one event if the hub's level lets its type through."""
    if hub.enabled_for(event_type):
        hub.emit(
            TelemetryEvent(
                event_type=event_type,
                data=dict(data),
                env_id=env_id,
                epoch=epoch,
                severity=severity,
                message=message,
            )
        )


def emit_training_started(hub: TelemetryHub, settings: Mapping[str, Any]) -> None:
    emit(hub, TelemetryEventType.TRAINING_STARTED, settings, message="training started")


def emit_training_ended(
    hub: TelemetryHub,
    outcome: str,
    rounds_completed: int,
    *,
    discarded_round: int | None = None,
    stopped_after_epoch: int | None = None,
    cause: str | None = None,
    failed_rank: int | None = None,
) -> None:
    """The run's terminal event: outcome "completed", "interrupted" or "failed" (with its cause, and in a sharded
    run the rank that failed, when known)."""
    data: dict[str, Any] = {
        "outcome": outcome,
        "rounds_completed": rounds_completed,
        "discarded_round": discarded_round,
        "stopped_after_epoch": stopped_after_epoch,
        "cause": cause,
    }
    if failed_rank is not None:
        data["failed_rank"] = failed_rank
    severity = "error" if outcome == "failed" else "warning" if outcome == "interrupted" else "info"
    emit(hub, TelemetryEventType.TRAINING_ENDED, data, severity=severity, message=f"training {outcome}")


def emit_checkpoint_loaded(hub: TelemetryHub, path: str, rounds_completed: int, previous_events: str | None) -> None:
    """`previous_events`: the events.jsonl of the run that wrote the checkpoint (None if it wrote none)."""
    data = {"path": path, "rounds_completed": rounds_completed, "previous_events": previous_events}
    emit(hub, TelemetryEventType.CHECKPOINT_LOADED, data)


def _seed_summary(env: ParallelEnvState) -> dict[str, Any]:
    seeds: dict[str, Any] = {}
    for slot_id, slot in env.model.seed_slots.items():
        state = slot.state
        seeds[slot_id] = {
            "stage": slot.stage.name,
            "blueprint": None if state is None else state.blueprint.blueprint_id,
            "alpha": round(float(slot.alpha), 6),
            "accuracy_delta": None if state is None else state.contribution,
            "grad_norm": None if state is None else state.grad_norm,
            "interaction_sum": env.interaction_sums.get(slot_id, 0.0),
        }
    return seeds


def emit_epoch_completed(hub: TelemetryHub, env: ParallelEnvState, round_idx: int, epoch: int) -> None:
    stats = env.epoch_result
    assert stats is not None, "an env's epoch results are absorbed before its epoch is reported"
    emit(
        hub,
        TelemetryEventType.EPOCH_COMPLETED,
        {
            "env_id": env.env_id,
            "round": round_idx,
            "inner_epoch": epoch,
            "train_loss": stats.train_loss,
            "train_accuracy": stats.train_acc,
            "val_loss": env.val_loss,
            "val_accuracy": env.val_acc,
            "host_grad_norm": stats.host_grad_norm,
            "seeds": _seed_summary(env),
        },
        env_id=env.env_id,
        epoch=epoch,
    )


def emit_last_action(
    hub: TelemetryHub, env: ParallelEnvState, epoch: int, outcome: ActionOutcome, actions: ActionBatch
) -> None:
    i = env.env_id
    emit(
        hub,
        TelemetryEventType.ANALYTICS_SNAPSHOT,
        {
            "kind": AnalyticsKind.LAST_ACTION.value,
            "op": outcome.spec.op.name,
            "effective_op": outcome.effective_op.name,
            "slot_id": outcome.spec.slot_id,
            "heads": actions.heads[i],
            "valid": outcome.valid,
            "success": env.last_action.success,
            "reward": outcome.reward,
            "reward_components": outcome.reward_components,
            "value": actions.values[i],
            "op_confidence": actions.op_confidence[i],
            "op_entropy": actions.op_entropy[i],
        },
        env_id=i,
        epoch=epoch,
    )


def emit_counterfactual_matrix(hub: TelemetryHub, env: ParallelEnvState, epoch: int) -> None:
    result = env.counterfactual
    if result is None or not result.contributions:
        return
    emit(
        hub,
        TelemetryEventType.COUNTERFACTUAL_MATRIX_COMPUTED,
        {
            "config_accuracies": list(result.config_accs),
            "contributions": result.contributions,
            "all_off_accuracy": result.all_off_acc,
            "committed_accuracy": result.committed_acc,
            "interactions": result.interactions,
        },
        env_id=env.env_id,
        epoch=epoch,
    )


def emit_governor_rollback(
    hub: TelemetryHub, env: ParallelEnvState, epoch: int, reason: str, pruned: Sequence[str]
) -> None:
    emit(
        hub,
        TelemetryEventType.GOVERNOR_ROLLBACK,
        {"reason": reason, "pruned_seeds": list(pruned), "rollbacks": env.rollbacks},
        env_id=env.env_id,
        epoch=epoch,
        severity="critical",
        message=f"governor rollback: {reason}",
    )


def emit_tamiyo_initiated(hub: TelemetryHub, env: ParallelEnvState, epoch: int) -> None:
    emit(
        hub,
        TelemetryEventType.TAMIYO_INITIATED,
        {"val_accuracy": env.val_acc},
        env_id=env.env_id,
        epoch=epoch,
    )


def emit_episode_outcome(hub: TelemetryHub, env: ParallelEnvState, round_idx: int) -> None:
    recent = env.episode_rewards[-STABILITY_WINDOW:]
    mean = sum(recent) / max(len(recent), 1)
    variance = sum((r - mean) ** 2 for r in recent) / max(len(recent), 1)
    stages = [slot.stage.name for slot in env.model.seed_slots.values()]
    emit(
        hub,
        TelemetryEventType.EPISODE_OUTCOME,
        {
            "env_id": env.env_id,
            "episode": round_idx,
            "final_accuracy": env.val_acc,
            "total_reward": env.total_reward,
            "fossilized": stages.count("FOSSILIZED"),
            "op_counts": dict(sorted(env.op_counts.items())),
            "stability": 1.0 / (1.0 + variance),
            "rollbacks": env.rollbacks,
            "outcome_type": "success" if env.val_acc >= SUCCESS_THRESHOLD else "timeout",
        },
        env_id=env.env_id,
        epoch=round_idx,
    )


def anomaly_types(metrics: PPOMetrics) -> list[TelemetryEventType]:
    """Anomalies of one PPO update, in a fixed order."""
    found = []
    if metrics.ratio_max > RATIO_EXPLOSION:
        found.append(TelemetryEventType.RATIO_EXPLOSION_DETECTED)
    if metrics.ratio_min < RATIO_COLLAPSE:
        found.append(TelemetryEventType.RATIO_COLLAPSE_DETECTED)
    if metrics.explained_variance < VALUE_COLLAPSE_EV:
        found.append(TelemetryEventType.VALUE_COLLAPSE_DETECTED)
    if metrics.skipped or metrics.nan_grad_count > 0:
        found.append(TelemetryEventType.NUMERICAL_INSTABILITY_DETECTED)
    if metrics.grad_norm > GRADIENT_PATHOLOGY_NORM:
        found.append(TelemetryEventType.GRADIENT_PATHOLOGY_DETECTED)
    return found


def emit_ppo_round(hub: TelemetryHub, metrics: PPOMetrics, round_idx: int) -> None:
    for event_type in anomaly_types(metrics):
        emit(
            hub,
            event_type,
            {"explained_variance": metrics.explained_variance},
            epoch=round_idx,
            severity="warning",
        )
    emit(hub, TelemetryEventType.PPO_UPDATE_COMPLETED, dataclasses.asdict(metrics), epoch=round_idx)


def emit_round_summary(
    hub: TelemetryHub,
    summary: BatchSummary,
    previous_rolling: float | None,
    thresholds: tuple[float, float],
    envs: Sequence[CountsOps],
) -> None:
    """batch_stats, the trend event, BATCH_EPOCH_COMPLETED and the action distribution, in that order."""
    r = summary.round_idx
    data = dataclasses.asdict(summary)
    emit(hub, TelemetryEventType.ANALYTICS_SNAPSHOT, {"kind": AnalyticsKind.BATCH_STATS.value, **data}, epoch=r)
    plateau, improvement = thresholds
    if previous_rolling is not None:
        delta = summary.rolling_accuracy - previous_rolling
        if delta > improvement:
            trend = TelemetryEventType.IMPROVEMENT_DETECTED
        elif delta < -improvement:
            trend = TelemetryEventType.DEGRADATION_DETECTED
        elif abs(delta) < plateau:
            trend = TelemetryEventType.PLATEAU_DETECTED
        else:
            trend = None
        if trend is not None:
            emit(hub, trend, {"delta": delta, "rolling_accuracy": summary.rolling_accuracy}, epoch=r)
    emit(hub, TelemetryEventType.BATCH_EPOCH_COMPLETED, data, epoch=r)
    ops: Counter[str] = Counter()
    for env in envs:
        ops.update(env.op_counts)
    emit(
        hub,
        TelemetryEventType.ANALYTICS_SNAPSHOT,
        {"kind": AnalyticsKind.ACTION_DISTRIBUTION.value, "op_counts": dict(sorted(ops.items()))},
        epoch=r,
    )


def emit_throughput(hub: TelemetryHub, round_idx: int, timing: Mapping[str, Any]) -> None:
    emit(
        hub,
        TelemetryEventType.ANALYTICS_SNAPSHOT,
        {"kind": AnalyticsKind.THROUGHPUT.value, **timing},
        epoch=round_idx,
    )
