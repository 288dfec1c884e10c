"""The ESCROW reward: SHAPED with the attribution paid as the change of a per-slot, reversible credit.

A reward mode of the original (esper-lite `RewardMode.ESCROW`). Each slot holds an unrealised credit. Every epoch
the target slot's credit moves towards `max(0, attributed + ratio_penalty)`, where progress is measured on
the *stable* accuracy (min of the last 3 accuracies, the current one included), and the reward pays the
move (clipped to +-2). A transient accuracy spike is therefore paid and then clawed back. PRUNE zeroes the
target's credit; at the last epoch the credit of every slot not FOSSILIZED is forfeited. The sum of the
paid deltas and forfeits always equals the credit still held.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from esper.leyline import LifecycleOp, RewardBreakdown, RewardInputs, SeedStage
from esper.simic.rewards.config import RewardConfig
from esper.simic.rewards.shaped import shaping_terms
from esper.simic.rewards.terms import (
    bounded_attribution,
    clip,
    make_breakdown,
    ratio_penalty,
    stable_accuracy,
)


@dataclass(frozen=True)
class EscrowMove:
    """How one epoch moves the target slot's credit: a toxic penalty (c < 0, not escrowed) and the delta."""

    toxic_penalty: float
    delta: float

    @classmethod
    def none(cls) -> EscrowMove:
        return cls(toxic_penalty=0.0, delta=0.0)


def escrow_credit_target(inputs: RewardInputs, config: RewardConfig) -> float:
    """max(0, weight * attributed + ratio_penalty) for c >= 0, with progress on the stable accuracy."""
    c = inputs.contribution
    if c is None or c < 0:
        return 0.0
    progress = None
    if inputs.acc_at_germination is not None:
        progress = stable_accuracy(inputs, config.escrow_stable_window) - inputs.acc_at_germination
    attributed = bounded_attribution(c, progress, config)
    penalty = ratio_penalty(c, inputs.total_improvement, config, skip_when_regressing=False)
    return max(0.0, config.contribution_weight * attributed + penalty)


def escrow_move(inputs: RewardInputs, config: RewardConfig, credit_prev: float) -> EscrowMove:
    """The credit move of the target slot for one epoch (pure; `EscrowLedger.step` applies it).

    - invalid action (rewarded as WAIT): no move, so an ineligible PRUNE neither refunds nor claws back;
    - PRUNE: the credit is zeroed (delta = -credit, not clipped);
    - FOSSILIZED target, no measured c, or FOSSILIZE with imp < 0: no move;
    - c < 0: pay c as a toxic penalty and zero the credit (not clipped);
    - otherwise: move towards `escrow_credit_target`, the move clipped to +-escrow_delta_clip (0 = no clip).
    """
    if not inputs.action_valid:
        return EscrowMove.none()
    if inputs.op == LifecycleOp.PRUNE:
        return EscrowMove(toxic_penalty=0.0, delta=0.0 - credit_prev)
    c = inputs.contribution
    imp = inputs.total_improvement
    if c is None or inputs.target_stage == SeedStage.FOSSILIZED:
        return EscrowMove.none()
    if inputs.op == LifecycleOp.FOSSILIZE and imp is not None and imp < 0:
        return EscrowMove.none()
    if c < 0:
        return EscrowMove(toxic_penalty=config.contribution_weight * c, delta=0.0 - credit_prev)
    delta = escrow_credit_target(inputs, config) - credit_prev
    if config.escrow_delta_clip > 0:
        delta = clip(delta, -config.escrow_delta_clip, config.escrow_delta_clip)
    return EscrowMove(toxic_penalty=0.0, delta=delta)


class EscrowLedger:
    """One env's escrow credit per slot, for one episode (build a new ledger, or `reset`, per episode)."""

    def __init__(self, slot_ids: Sequence[str]) -> None:
        if not slot_ids:
            raise ValueError("an escrow ledger needs at least one slot id")
        if len(set(slot_ids)) != len(slot_ids):
            raise ValueError(f"duplicate slot ids in escrow ledger: {list(slot_ids)}")
        self._credit: dict[str, float] = {slot_id: 0.0 for slot_id in slot_ids}

    @property
    def slot_ids(self) -> tuple[str, ...]:
        return tuple(self._credit)

    def credit(self, slot_id: str) -> float:
        """The unrealised credit held for `slot_id`."""
        self._require_slot(slot_id)
        return self._credit[slot_id]

    def step(self, inputs: RewardInputs, config: RewardConfig) -> RewardBreakdown:
        """Score one epoch: move the target slot's credit, add the SHAPED terms, forfeit at the last epoch."""
        self._require_slot(inputs.slot_id)
        move = escrow_move(inputs, config, self._credit[inputs.slot_id])
        self._credit[inputs.slot_id] += move.delta
        components = {"escrow_toxic": move.toxic_penalty, "escrow_delta": move.delta}
        components.update(shaping_terms(inputs, config, move.toxic_penalty + move.delta))
        components["escrow_forfeit"] = self._forfeit_if_terminal(inputs)
        return make_breakdown(components)

    def reset(self) -> None:
        """Zero every credit (a new episode)."""
        for slot_id in self._credit:
            self._credit[slot_id] = 0.0

    def state_dict(self) -> dict[str, float]:
        """Credit per slot id (plain floats: safe for `torch.load(weights_only=True)`)."""
        return dict(self._credit)

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        """Restore the credits; the slot ids must be this ledger's."""
        if set(state) != set(self._credit):
            raise ValueError(f"escrow state slots {sorted(state)} != this ledger's {sorted(self._credit)}")
        for slot_id in self._credit:
            self._credit[slot_id] = float(state[slot_id])

    def _forfeit_if_terminal(self, inputs: RewardInputs) -> float:
        """At the last epoch, claw back (and zero) the credit of every slot that is not FOSSILIZED."""
        if not inputs.is_terminal:
            return 0.0
        fossilized = {slot.slot_id for slot in inputs.slots if slot.stage_after == SeedStage.FOSSILIZED}
        forfeited = 0.0
        for slot_id, credit in self._credit.items():
            if slot_id not in fossilized:
                forfeited += credit
                self._credit[slot_id] = 0.0
        return 0.0 - forfeited

    def _require_slot(self, slot_id: str) -> None:
        if slot_id not in self._credit:
            raise KeyError(f"slot {slot_id!r} is not in this escrow ledger (slots: {list(self._credit)})")
