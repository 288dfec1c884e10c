"""ParallelEnvState: the RL-side state of one env for one episode (the hardware side is tolaria's EnvRuntime)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from esper.kasmina.model import MorphogeneticModel
from esper.leyline import LifecycleOp, TelemetryEvent, TelemetryEventType
from esper.nissa.hub import TelemetryHub
from esper.simic.rewards import EscrowLedger
from esper.tamiyo.features import LastAction
from esper.tamiyo.signals import SignalTracker, TrainingSignals
from esper.tolaria.engine import EnvRuntime


class LifecycleForwarder:
    """Turns a slot's lifecycle callback into telemetry events stamped with the env id and current epoch."""

    def __init__(self, hub: TelemetryHub, env_id: int) -> None:
        self.hub = hub
        self.env_id = env_id
        self.epoch = 0
        self.fossilized: list[str] = []

    def __call__(self, event_type: TelemetryEventType, slot_id: str, seed_id: str | None, data: dict[str, Any]) -> None:
        if event_type is TelemetryEventType.SEED_FOSSILIZED:
            self.fossilized.append(slot_id)
        if self.hub.enabled_for(event_type):
            self.hub.emit(
                TelemetryEvent(
                    event_type=event_type,
                    data=dict(data),
                    env_id=self.env_id,
                    epoch=self.epoch,
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
    interaction_sums: dict[str, float] = field(default_factory=dict)
    rollbacks: int = 0
    val_acc: float = 0.0
    val_loss: float = 0.0
    last_finite_loss: float | None = None  # what the controller observes on a rolled-back (non-finite) epoch
    committed_acc: float = 0.0
    all_off_acc: float | None = None
    train_loss: float = 0.0
    train_acc: float = 0.0

    @property
    def model(self) -> MorphogeneticModel:
        return self.runtime.model

    @property
    def total_reward(self) -> float:
        return float(sum(self.episode_rewards))
