"""Observations: every env's features, blueprint indices and action masks, built for one batched policy call."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from esper.kasmina.slot import SeedSlot
from esper.leyline import CNN_BLUEPRINTS, TEMPO_EPOCHS, AlphaMode, SeedStage
from esper.simic.training.parallel_env_state import ParallelEnvState
from esper.simic.training.sharding import tensor_from_wire, tensor_to_wire
from esper.tamiyo.features import SlotObservation, batch_features, build_features
from esper.tamiyo.heuristic import EnvView
from esper.tamiyo.masks import SlotMaskState, compute_action_masks, stack_masks
from esper.tamiyo.signals import TrainingSignals

VANISHING_GRAD_NORM = 1e-6
EXPLODING_GRAD_NORM = 10.0
ALLOWED_BLUEPRINTS = frozenset(CNN_BLUEPRINTS)


@dataclass
class ObservationBatch:
    """Every env's observation for one epoch: device tensors for the network, host views for rules."""

    features: Tensor  # [K, state_dim], raw (not normalized)
    blueprint_idx: Tensor  # [K, S]
    masks: dict[str, Tensor]  # [K, ...] per mask key
    views: list[EnvView]


def slot_observation(slot: SeedSlot, env: ParallelEnvState) -> SlotObservation:
    """The policy's view of one slot (the Obs V3 per-slot inputs)."""
    state = slot.state
    if state is None:
        return SlotObservation.empty()
    controller = slot.alpha_controller
    grad_norm = state.grad_norm
    return SlotObservation(
        is_active=slot.is_active,
        stage=slot.stage,
        alpha=float(slot.alpha),
        contribution=state.contribution,
        contribution_velocity=state.contribution_velocity,
        tempo=TEMPO_EPOCHS[state.tempo] / 8.0,
        alpha_target=state.alpha_target,
        alpha_mode=controller.mode,
        alpha_steps_total=controller.steps_total,
        alpha_steps_done=controller.steps_done,
        time_to_target=controller.time_to_target,
        alpha_velocity=controller.velocity,
        alpha_algorithm=state.algorithm,
        interaction_sum=env.interaction_sums.get(slot.slot_id, 0.0),
        grad_norm=grad_norm,
        grad_health=state.grad_health,
        vanishing=grad_norm is not None and grad_norm < VANISHING_GRAD_NORM,
        exploding=grad_norm is not None and grad_norm > EXPLODING_GRAD_NORM,
        prev_grad_health=state.grad_health,
        epochs_in_stage=state.epochs_in_stage,
        counterfactual_age=env.counterfactual_age.get(slot.slot_id, 0),
        seed_age=state.age_epochs,
        blueprint_index=int(state.blueprint),
    )


def mask_state(slot: SeedSlot) -> SlotMaskState:
    state = slot.state
    return SlotMaskState(
        stage=slot.stage,
        age=0 if state is None else state.age_epochs,
        alpha_mode=slot.alpha_controller.mode if state is not None else AlphaMode.HOLD,
        enabled=True,
    )


def stage_counts(slots: Sequence[SeedSlot]) -> tuple[int, int, int]:
    stages = [slot.stage for slot in slots]
    return (
        stages.count(SeedStage.TRAINING),
        stages.count(SeedStage.BLENDING),
        stages.count(SeedStage.HOLDING),
    )


@dataclass(frozen=True)
class EnvObservation:
    """One env's observation on the host, before batching: what a rank sends the others of a sharded run."""

    env_id: int
    features: list[float]
    blueprints: list[int]
    masks: dict[str, Tensor]
    signals: TrainingSignals
    slots: tuple[SlotObservation, ...]

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (by a sharded run's gather) with the host-side masks as raw bytes: pickling a tensor costs
        ~50 us, and a rank sends nine per env."""
        return {**vars(self), "masks": {key: tensor_to_wire(mask) for key, mask in self.masks.items()}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        masks = {key: tensor_from_wire(wire) for key, wire in state["masks"].items()}
        for name, value in {**state, "masks": masks}.items():
            object.__setattr__(self, name, value)


def observe_env(env: ParallelEnvState, *, max_seeds: int | None) -> EnvObservation:
    """Features, blueprint indices and action masks of one env."""
    assert env.signals is not None, "signals are updated before observations are built"
    slots = list(env.model.seed_slots.values())
    observations = tuple(slot_observation(slot, env) for slot in slots)
    masks = compute_action_masks(
        [mask_state(slot) for slot in slots],
        max_seeds=max_seeds,
        seeds_used=env.seeds_germinated,
        allowed_blueprints=ALLOWED_BLUEPRINTS,
    )
    return EnvObservation(
        env_id=env.env_id,
        features=build_features(env.signals, list(observations), env.last_action, stage_counts(slots)),
        blueprints=[obs.blueprint_index for obs in observations],
        masks=masks,
        signals=env.signals,
        slots=observations,
    )


def build_observations(
    envs: Sequence[ParallelEnvState],
    *,
    max_seeds: int | None,
    device: torch.device,
    exchange: Callable[[list[EnvObservation]], list[EnvObservation]] | None = None,
) -> ObservationBatch:
    """Features, blueprint indices and masks of every env, moved to the policy device in one go each.

    `exchange` turns these envs' observations into every env's (a sharded run's `EnvShard.gather`, in env-id
    order); without it the batch holds `envs` alone.
    """
    observed = [observe_env(env, max_seeds=max_seeds) for env in envs]
    if exchange is not None:
        observed = exchange(observed)
    host_masks = stack_masks([obs.masks for obs in observed], torch.device("cpu"))
    op_rows = host_masks["op"].tolist()
    slot_rows = host_masks["slot_by_op"].tolist()
    views = [
        EnvView(
            signals=obs.signals,
            slots=obs.slots,
            op_mask=tuple(op_rows[i]),
            slot_by_op=tuple(tuple(row) for row in slot_rows[i]),
        )
        for i, obs in enumerate(observed)
    ]
    features, blueprint_idx = batch_features(
        [obs.features for obs in observed], [obs.blueprints for obs in observed], device
    )
    device_masks = {key: value.to(device) for key, value in host_masks.items()}
    return ObservationBatch(features=features, blueprint_idx=blueprint_idx, masks=device_masks, views=views)
