"""Observation features ("Obs V3"): one flat float vector per env, plus blueprint indices for the embedding.

`build_features` turns one env's typed records into `state_dim(num_slots) = 23 + 31 * num_slots` floats
in plain Python (no tensors, no device work); `batch_features` stacks every env's row into one tensor with a
single host-to-device transfer. Blueprint identity does not go into the vector: each slot's `blueprint_index`
feeds the policy's `nn.Embedding(14, 4)`, so the network input is `state_dim + 4 * num_slots` wide.

"Not yet measured" (no counterfactual yet, no gradient statistics yet) is encoded as -1.0 (HEAD's convention).
Normalizations: `lognorm(x) = log(1 + x) / log(16)` (loss 15 saturates to 1.0); `clip1(x) = clamp(x, -1, 1)`;
`frac(n) = min(n, max_epochs) / max_epochs`; `symlog(x) = sign(x) * log(1 + |x|)`.

Base features (23):

| index | feature | encoding |
|---|---|---|
| 0 | epoch | epoch / max_epochs |
| 1 | val_loss | lognorm |
| 2 | val_acc | val_acc / 100 |
| 3-7 | last 5 losses, oldest first | lognorm (0.0 padding) |
| 8-12 | last 5 accuracies, oldest first | / 100 (0.0 padding) |
| 13-15 | seeds in TRAINING, BLENDING, HOLDING | count / num_slots |
| 16 | last action succeeded | 0 / 1 |
| 17-22 | last op | one-hot over LifecycleOp (6) |

Per-slot features (31), slot k starting at `23 + 31 * k`:

| offset | feature | encoding |
|---|---|---|
| 0 | is_active | 0 / 1 |
| 1-10 | stage | one-hot (10) at `STAGE_ONEHOT_INDEX[stage]` |
| 11 | alpha | raw, [0, 1] |
| 12 | contribution (pp) | clip1(c / 10); -1.0 if not measured |
| 13 | contribution velocity (pp/epoch) | clip1(v / 10) |
| 14 | tempo (blend epochs) | tempo / 12 |
| 15 | alpha_target | raw |
| 16 | alpha_mode | mode / 2 (HOLD 0, UP 0.5, DOWN 1) |
| 17 | alpha_steps_total | frac |
| 18 | alpha_steps_done | frac |
| 19 | time_to_target | frac |
| 20 | alpha_velocity | clip1 |
| 21 | alpha_algorithm | (algorithm - 1) / 2 (ADD 0, MULTIPLY 0.5, GATE 1); -1.0 if none |
| 22 | interaction_sum | clip1(x / 10) |
| 23 | grad_norm | symlog, capped at 10; -1.0 if not measured |
| 24 | grad_health | raw, [0, 1] |
| 25 | vanishing gradients | 0 / 1 |
| 26 | exploding gradients | 0 / 1 |
| 27 | previous grad_health | raw |
| 28 | epochs_in_stage | frac |
| 29 | counterfactual freshness | 0.995 ** age; -1.0 if never measured (age < 0) |
| 30 | seed_age | frac |
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from esper.leyline import STAGE_ONEHOT_INDEX, AlphaAlgorithm, AlphaMode, LifecycleOp, SeedStage
from esper.tamiyo.signals import TrainingSignals

BASE_FEATURES = 23
SLOT_FEATURES = 31
BLUEPRINT_EMBED_DIM = 4
# 13 blueprint actions (index 0 = none/noop) plus one spare row, as upstream's nn.Embedding(14, 4).
NUM_BLUEPRINT_EMBEDDINGS = 14

NOT_MEASURED = -1.0
NUM_STAGES = len(STAGE_ONEHOT_INDEX)
NUM_OPS = len(LifecycleOp)
FRESHNESS_GAMMA = 0.995  # counterfactual freshness decays with the PPO discount
_LOSS_NORM = math.log(16.0)
_CONTRIBUTION_SCALE_PP = 10.0
_TEMPO_SCALE_EPOCHS = 12.0
_INTERACTION_SCALE = 10.0
_GRAD_NORM_CAP = 10.0
_ALPHA_MODE_MAX = float(max(AlphaMode))


def state_dim(num_slots: int) -> int:
    """Width of the flat observation vector for `num_slots` slots (blueprint embeddings not included)."""
    if num_slots < 1:
        raise ValueError(f"num_slots must be >= 1, got {num_slots}")
    return BASE_FEATURES + SLOT_FEATURES * num_slots


@dataclass(frozen=True)
class SlotObservation:
    """What the controller sees of one slot (None / negative ages mean "not yet measured")."""

    is_active: bool
    stage: SeedStage
    alpha: float
    contribution: float | None
    contribution_velocity: float
    tempo: float
    alpha_target: float
    alpha_mode: AlphaMode
    alpha_steps_total: int
    alpha_steps_done: int
    time_to_target: int
    alpha_velocity: float
    alpha_algorithm: AlphaAlgorithm | None
    interaction_sum: float
    grad_norm: float | None
    grad_health: float
    vanishing: bool
    exploding: bool
    prev_grad_health: float
    epochs_in_stage: int
    counterfactual_age: int
    seed_age: int
    blueprint_index: int

    def __post_init__(self) -> None:
        if not 0 <= self.blueprint_index < NUM_BLUEPRINT_EMBEDDINGS:
            raise ValueError(f"blueprint_index must be in [0, {NUM_BLUEPRINT_EMBEDDINGS}), got {self.blueprint_index}")

    @classmethod
    def empty(cls) -> SlotObservation:
        """An enabled slot with no seed (DORMANT, nothing measured, healthy gradients by default)."""
        return cls(
            is_active=False,
            stage=SeedStage.DORMANT,
            alpha=0.0,
            contribution=None,
            contribution_velocity=0.0,
            tempo=0.0,
            alpha_target=0.0,
            alpha_mode=AlphaMode.HOLD,
            alpha_steps_total=0,
            alpha_steps_done=0,
            time_to_target=0,
            alpha_velocity=0.0,
            alpha_algorithm=None,
            interaction_sum=0.0,
            grad_norm=None,
            grad_health=1.0,
            vanishing=False,
            exploding=False,
            prev_grad_health=1.0,
            epochs_in_stage=0,
            counterfactual_age=-1,
            seed_age=0,
            blueprint_index=0,
        )


@dataclass(frozen=True)
class LastAction:
    """The op an env executed last epoch and whether it was valid."""

    op: LifecycleOp
    success: bool

    @classmethod
    def initial(cls) -> LastAction:
        """What an episode starts with: a successful WAIT."""
        return cls(op=LifecycleOp.WAIT, success=True)


def build_features(
    signals: TrainingSignals,
    slots: Sequence[SlotObservation],
    last_action: LastAction,
    stage_counts: tuple[int, int, int],
) -> list[float]:
    """One env's Obs V3 vector (`state_dim(len(slots))` floats); see the module docstring for the layout.

    `stage_counts` counts the seeds in (TRAINING, BLENDING, HOLDING).
    """
    if not slots:
        raise ValueError("build_features needs at least one slot")
    max_epochs = signals.max_epochs
    features = _base_features(signals, len(slots), last_action, stage_counts)
    for slot in slots:
        features.extend(_slot_features(slot, max_epochs))
    return features


def _base_features(
    signals: TrainingSignals, num_slots: int, last_action: LastAction, stage_counts: tuple[int, int, int]
) -> list[float]:
    training, blending, holding = stage_counts
    op_one_hot = [0.0] * NUM_OPS
    op_one_hot[int(last_action.op)] = 1.0
    return [
        signals.epoch / signals.max_epochs,
        _lognorm(signals.val_loss),
        signals.val_acc / 100.0,
        *(_lognorm(loss) for loss in signals.loss_history),
        *(acc / 100.0 for acc in signals.acc_history),
        training / num_slots,
        blending / num_slots,
        holding / num_slots,
        1.0 if last_action.success else 0.0,
        *op_one_hot,
    ]


def _slot_features(slot: SlotObservation, max_epochs: int) -> list[float]:
    stage_one_hot = [0.0] * NUM_STAGES
    stage_one_hot[STAGE_ONEHOT_INDEX[slot.stage]] = 1.0
    contribution = NOT_MEASURED if slot.contribution is None else _clip1(slot.contribution / _CONTRIBUTION_SCALE_PP)
    algorithm = NOT_MEASURED if slot.alpha_algorithm is None else (int(slot.alpha_algorithm) - 1) / 2.0
    grad_norm = NOT_MEASURED if slot.grad_norm is None else min(_symlog(slot.grad_norm), _GRAD_NORM_CAP)
    freshness = NOT_MEASURED if slot.counterfactual_age < 0 else FRESHNESS_GAMMA**slot.counterfactual_age
    return [
        1.0 if slot.is_active else 0.0,
        *stage_one_hot,
        slot.alpha,
        contribution,
        _clip1(slot.contribution_velocity / _CONTRIBUTION_SCALE_PP),
        slot.tempo / _TEMPO_SCALE_EPOCHS,
        slot.alpha_target,
        int(slot.alpha_mode) / _ALPHA_MODE_MAX,
        _frac(slot.alpha_steps_total, max_epochs),
        _frac(slot.alpha_steps_done, max_epochs),
        _frac(slot.time_to_target, max_epochs),
        _clip1(slot.alpha_velocity),
        algorithm,
        _clip1(slot.interaction_sum / _INTERACTION_SCALE),
        grad_norm,
        slot.grad_health,
        1.0 if slot.vanishing else 0.0,
        1.0 if slot.exploding else 0.0,
        slot.prev_grad_health,
        _frac(slot.epochs_in_stage, max_epochs),
        freshness,
        _frac(slot.seed_age, max_epochs),
    ]


def batch_features(
    rows: Sequence[list[float]], blueprint_indices: Sequence[Sequence[int]], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack K envs' rows into `([K, state_dim] float32, [K, S] int64)` on `device`, one transfer each."""
    if len(rows) != len(blueprint_indices):
        raise ValueError(f"{len(rows)} feature rows but {len(blueprint_indices)} blueprint rows")
    obs = torch.tensor(rows, dtype=torch.float32)
    blueprints = torch.tensor(blueprint_indices, dtype=torch.int64)
    if obs.ndim != 2 or blueprints.ndim != 2:
        raise ValueError(f"expected 2-D batches, got obs {tuple(obs.shape)} and blueprints {blueprints.shape}")
    if obs.shape[1] != state_dim(blueprints.shape[1]):
        raise ValueError(
            f"rows are {obs.shape[1]} wide but {blueprints.shape[1]} slots need {state_dim(blueprints.shape[1])}"
        )
    return obs.to(device), blueprints.to(device)


def _lognorm(loss: float) -> float:
    return math.log1p(max(loss, 0.0)) / _LOSS_NORM


def _clip1(value: float) -> float:
    return max(-1.0, min(1.0, value))


def _frac(count: int, max_epochs: int) -> float:
    return min(float(count), float(max_epochs)) / float(max_epochs)


def _symlog(value: float) -> float:
    return math.copysign(math.log1p(abs(value)), value)
