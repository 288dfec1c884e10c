"""ParallelEnvState: the RL-side state of one env for one episode (the hardware side is tolaria's EnvRuntime)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from esper.kasmina.model import MorphogeneticModel
from esper.leyline import LifecycleOp, TelemetryEvent, TelemetryEventType
from esper.nissa.hub import TelemetryHub
from esper.simic.rewards import EscrowLedger
from esper.simic.training.counterfactual_eval import CounterfactualResult
from esper.tamiyo.features import LastAction
from esper.tamiyo.signals import SignalTracker, TrainingSignals
from esper.tolaria.engine import EnvRuntime
from esper.tolaria.epoch import EnvEpochResult


class EpochClock:
    """The epoch the loop is in (0 before a round's first epoch). The trainer ticks it once per epoch; every
    env's lifecycle events read it, so no env state is stamped with the epoch."""

    def __init__(self) -> None:
        self.epoch = 0


class LifecycleForwarder:
    """Turns a slot's lifecycle callback into telemetry events stamped with the env id and the clock's epoch."""

    def __init__(self, hub: TelemetryHub, env_id: int, clock: EpochClock) -> None:
        self.hub = hub
        self.env_id = env_id
        self.clock = clock

    def __call__(self, event_type: TelemetryEventType, slot_id: str, seed_id: str | None, data: dict[str, Any]) -> None:
        if self.hub.enabled_for(event_type):
            self.hub.emit(
                TelemetryEvent(
                    event_type=event_type,
                    data=dict(data),
                    env_id=self.env_id,
                    epoch=self.clock.epoch,
                    seed_id=seed_id,
                    slot_id=slot_id,
                )
            )


@dataclass
class ParallelEnvState:
    """Everything the loop tracks for one env during one episode."""

    env_id: int
    runtime: EnvRuntime
    signal_tracker: SignalTracker
    lifecycle: LifecycleForwarder
    escrow: EscrowLedger | None = None
    signals: TrainingSignals | None = None
    last_action: LastAction = field(default_factory=lambda: LastAction(op=LifecycleOp.WAIT, success=True))
    seeds_germinated: int = 0
    episode_rewards: list[float] = field(default_factory=list)
    op_counts: Counter[str] = field(default_factory=Counter)
    acc_history: list[float] = field(default_factory=list)
    counterfactual_age: dict[str, int] = field(default_factory=dict)
    rollbacks: int = 0
    last_finite_loss: float | None = None  # what the controller observes on a rolled-back (non-finite) epoch
    # The last epoch's results (None before the first): written once per epoch, by the trainer's absorb step.
    epoch_result: EnvEpochResult | None = None
    counterfactual: CounterfactualResult | None = None

    @property
    def model(self) -> MorphogeneticModel:
        return self.runtime.model

    @property
    def val_acc(self) -> float:
        """The last epoch's validation accuracy (percent) of the main configuration; 0 before the first epoch."""
        return 0.0 if self.counterfactual is None else self.counterfactual.val_acc

    @property
    def val_loss(self) -> float:
        return 0.0 if self.counterfactual is None else self.counterfactual.val_loss

    @property
    def all_off_acc(self) -> float | None:
        """Accuracy with every active seed switched off; None when no seed was active."""
        return None if self.counterfactual is None else self.counterfactual.all_off_acc

    @property
    def committed_acc(self) -> float:
        """Accuracy with only fossilized seeds on (what the host keeps if every live seed were pruned)."""
        return 0.0 if self.counterfactual is None else self.counterfactual.committed_acc

    @property
    def interaction_sums(self) -> dict[str, float]:
        return {} if self.counterfactual is None else self.counterfactual.interaction_sums

    @property
    def total_reward(self) -> float:
        return float(sum(self.episode_rewards))


@dataclass(frozen=True)
class EnvOutcome:
    """One env's step as every rank records it: what the rollout buffer, the progress line and the round summary
    read. In a sharded run each rank sends its envs' outcomes to the others (`EnvShard.gather`)."""

    env_id: int
    reward: float
    effective_op: int
    rolled_back: bool
    val_acc: float  # after this step (the round summary reads the last step's)
    total_reward: float
    rollbacks: int
    op_counts: dict[str, int]

    @classmethod
    def of(cls, env: ParallelEnvState, reward: float, effective_op: int, rolled_back: bool) -> EnvOutcome:
        return cls(
            env_id=env.env_id,
            reward=reward,
            effective_op=effective_op,
            rolled_back=rolled_back,
            val_acc=env.val_acc,
            total_reward=env.total_reward,
            rollbacks=env.rollbacks,
            op_counts=dict(env.op_counts),
        )
