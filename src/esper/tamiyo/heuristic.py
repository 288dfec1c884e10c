"""The heuristic controller: a fixed rule policy over the same factored action heads as the PPO policy.

Rules, first match wins (each only where the action mask allows it):
1. a HOLDING seed with a positive measured contribution is fossilized; with a non-positive one it is pruned;
2. a BLENDING seed whose contribution fell below `prune_below` is pruned;
3. a GERMINATED or TRAINING seed, or a BLENDING seed whose alpha reached its target, is advanced;
4. when the host has plateaued and a slot is empty, a seed (`blueprint`) is germinated in the first empty slot;
5. otherwise WAIT.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from esper.leyline import (
    ACTION_HEAD_NAMES,
    AlphaCurveAction,
    AlphaMode,
    AlphaSpeedAction,
    AlphaTargetAction,
    BlueprintAction,
    GerminationStyle,
    LifecycleOp,
    SeedStage,
    TempoAction,
)
from esper.tamiyo.features import SlotObservation
from esper.tamiyo.signals import TrainingSignals


@dataclass(frozen=True)
class EnvView:
    """What a rule-based controller sees of one env: signals, slot observations and the op/slot masks."""

    signals: TrainingSignals
    slots: tuple[SlotObservation, ...]
    op_mask: tuple[bool, ...]
    slot_by_op: tuple[tuple[bool, ...], ...]


@dataclass(frozen=True)
class HeuristicConfig:
    blueprint: BlueprintAction = BlueprintAction.CONV_LIGHT
    style: GerminationStyle = GerminationStyle.LINEAR_ADD
    tempo: TempoAction = TempoAction.FAST
    prune_below: float = -2.0
    germinate_without_plateau_after: int = 2  # germinate anyway once this many epochs passed


def _heads(op: LifecycleOp, slot: int, config: HeuristicConfig) -> list[int]:
    values = {
        "slot": slot,
        "blueprint": int(config.blueprint),
        "style": int(config.style),
        "tempo": int(config.tempo),
        "alpha_target": int(AlphaTargetAction.FULL),
        "alpha_speed": int(AlphaSpeedAction.INSTANT),
        "alpha_curve": int(AlphaCurveAction.LINEAR),
        "op": int(op),
    }
    return [values[name] for name in ACTION_HEAD_NAMES]


def _allowed(view: EnvView, op: LifecycleOp, slot: int) -> bool:
    return view.op_mask[op] and view.slot_by_op[op][slot]


def decide(view: EnvView, config: HeuristicConfig) -> list[int]:
    """Head indices (ACTION_HEAD_NAMES order) chosen by the rules for one env."""
    for index, slot in enumerate(view.slots):
        if slot.stage is SeedStage.HOLDING:
            positive = slot.contribution is not None and slot.contribution > 0.0
            op = LifecycleOp.FOSSILIZE if positive else LifecycleOp.PRUNE
            if _allowed(view, op, index):
                return _heads(op, index, config)
    for index, slot in enumerate(view.slots):
        low = slot.contribution is not None and slot.contribution < config.prune_below
        if slot.stage is SeedStage.BLENDING and low and _allowed(view, LifecycleOp.PRUNE, index):
            return _heads(LifecycleOp.PRUNE, index, config)
    for index, slot in enumerate(view.slots):
        ready = slot.stage in (SeedStage.GERMINATED, SeedStage.TRAINING) or (
            slot.stage is SeedStage.BLENDING and slot.alpha_mode is AlphaMode.HOLD and slot.alpha >= slot.alpha_target
        )
        if ready and _allowed(view, LifecycleOp.ADVANCE, index):
            return _heads(LifecycleOp.ADVANCE, index, config)
    patient = view.signals.epoch >= config.germinate_without_plateau_after
    if view.signals.plateau or patient:
        for index, _slot in enumerate(view.slots):
            if _allowed(view, LifecycleOp.GERMINATE, index):
                return _heads(LifecycleOp.GERMINATE, index, config)
    return _heads(LifecycleOp.WAIT, 0, config)


def decide_batch(views: Sequence[EnvView], config: HeuristicConfig) -> list[list[int]]:
    return [decide(view, config) for view in views]
