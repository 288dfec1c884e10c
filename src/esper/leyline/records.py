"""Typed records for the boundaries between subsystems (no ad-hoc dicts across module lines)."""

from __future__ import annotations

from dataclasses import dataclass, field

from esper.leyline.actions import (
    AlphaCurveAction,
    AlphaSpeedAction,
    AlphaTargetAction,
    BlueprintAction,
    GerminationStyle,
    LifecycleOp,
    TempoAction,
)
from esper.leyline.stages import SeedStage


@dataclass(frozen=True)
class ActionSpec:
    """One env's sampled factored action, decoded from head indices."""

    op: LifecycleOp
    slot_index: int
    slot_id: str
    slot_in_range: bool
    blueprint: BlueprintAction
    style: GerminationStyle
    tempo: TempoAction
    alpha_target: AlphaTargetAction
    alpha_speed: AlphaSpeedAction
    alpha_curve: AlphaCurveAction


@dataclass(frozen=True)
class SlotRewardState:
    """What the reward needs to know about one slot, before and after the action."""

    slot_id: str
    stage_before: SeedStage
    stage_after: SeedStage
    epochs_in_stage_before: int
    epochs_in_stage_after: int
    alpha_before: float
    alpha_after: float
    seed_params: int
    contribution: float | None  # c: val_acc - acc with this slot ablated (pp); None if not measured


@dataclass(frozen=True)
class RewardInputs:
    """Everything one reward computation reads, for one env and one epoch (accuracies in percentage points)."""

    op: LifecycleOp  # the effective op (an invalid action is rewarded as WAIT)
    action_valid: bool
    slot_id: str
    target_stage: SeedStage  # stage of the target slot before the action
    target_age: int  # epochs since germination of the target seed (0 if none)
    target_epochs_in_stage: int
    contribution: float | None  # c of the target seed, None if not measured
    acc_at_germination: float | None
    interaction_sum: float
    val_acc: float
    total_improvement: float | None  # imp: val_acc - acc with every seed off; None without seeds
    host_params: int
    epoch: int  # 1-based epoch within the episode
    max_epochs: int
    slots: tuple[SlotRewardState, ...] = ()
    committed_acc: float = 0.0  # accuracy with only fossilized seeds enabled
    fossil_params: int = 0
    n_contributing_fossils: int = 0
    recent_accs: tuple[float, ...] = ()  # last accuracies, oldest first, the current epoch included

    @property
    def is_terminal(self) -> bool:
        return self.epoch >= self.max_epochs

    @property
    def progress(self) -> float | None:
        """p: val_acc - acc_at_germination, None without a germination accuracy."""
        if self.acc_at_germination is None:
            return None
        return self.val_acc - self.acc_at_germination


@dataclass(frozen=True)
class RewardBreakdown:
    """A reward and its named components (the components sum to `total`)."""

    total: float
    components: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ActionOutcome:
    """What executing one env's action did: validity, the op that was rewarded, and the reward."""

    env_id: int
    spec: ActionSpec
    valid: bool
    effective_op: LifecycleOp
    reward: float
    reward_components: dict[str, float]
    truncated: bool
    rolled_back: bool = False


@dataclass(frozen=True)
class BatchSummary:
    """One round's summary (the payload of BATCH_EPOCH_COMPLETED)."""

    round_idx: int
    episodes_completed: int
    mean_reward: float
    mean_final_accuracy: float
    rolling_accuracy: float
    env_final_accuracies: tuple[float, ...]
    env_total_rewards: tuple[float, ...]
    rollbacks: int
    train_time_s: float
    env_epochs_per_s: float
