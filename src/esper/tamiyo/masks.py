"""Action masks: which values of each factored head are physically possible for one env (JAN rules).

`compute_action_masks` returns exactly the 9 `MASK_KEYS`, as CPU bool tensors:

| key | shape | valid entries |
|---|---|---|
| op | [6] | see the op rules below |
| slot_by_op | [6, S] | per op, the slots that op may target |
| slot | [S] | union of `slot_by_op` rows over the valid ops |
| blueprint | [13] | `allowed_blueprints` minus NOOP (NOOP is always masked) |
| style | [4] | all if GERMINATE or SET_ALPHA_TARGET is valid, else only SIGMOID_ADD |
| alpha_target | [3] | all if GERMINATE or SET_ALPHA_TARGET is valid, else only FULL |
| tempo, alpha_speed, alpha_curve | [3], [4], [5] | all |

Op rules, per enabled slot (a disabled slot is never a target):

- WAIT: always valid; its `slot_by_op` row is every enabled slot (the slot head is irrelevant to WAIT, but the
  row must offer something to sample from; with no enabled slot at all it is every slot).
- GERMINATE: the slot is empty (UNKNOWN/DORMANT) and `seeds_used < max_seeds` (None = no cap).
- ADVANCE: the seed is GERMINATED, TRAINING or BLENDING.
- FOSSILIZE: the seed is HOLDING.
- PRUNE: the seed is GERMINATED/TRAINING/BLENDING/HOLDING, `age >= MIN_PRUNE_AGE` and its alpha is in HOLD.
- SET_ALPHA_TARGET: the seed is BLENDING or HOLDING and its alpha is in HOLD.

Only physically impossible actions are masked. HEAD's rule D3 (no germination while another seed is young or
failing) is deliberately absent. `stack_masks` batches K envs' masks into `[K, ...]` with one transfer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from esper.leyline import (
    ADVANCEABLE_STAGES,
    EMPTY_STAGES,
    MASK_KEYS,
    MIN_PRUNE_AGE,
    AlphaMode,
    AlphaTargetAction,
    BlueprintAction,
    GerminationStyle,
    LifecycleOp,
    SeedStage,
    head_sizes,
)
from esper.leyline.stages import PRUNABLE_STAGES

NUM_OPS = len(LifecycleOp)
RETARGETABLE_STAGES = frozenset({SeedStage.BLENDING, SeedStage.HOLDING})


@dataclass(frozen=True)
class SlotMaskState:
    """The facts about one slot that decide which ops may target it."""

    stage: SeedStage
    age: int  # epochs since germination
    alpha_mode: AlphaMode
    enabled: bool


def mask_shapes(num_slots: int) -> dict[str, tuple[int, ...]]:
    """Shape of every mask for one env, in `MASK_KEYS` order."""
    shapes: dict[str, tuple[int, ...]] = {name: (size,) for name, size in head_sizes(num_slots).items()}
    shapes["slot_by_op"] = (NUM_OPS, num_slots)
    return {key: shapes[key] for key in MASK_KEYS}


def slot_allows(op: LifecycleOp, slot: SlotMaskState) -> bool:
    """Whether `op` may target `slot` (GERMINATE's seed cap is applied by the caller).

    The one statement of the per-slot op rules: the masks use it, and so does action execution's validity check.
    """
    if not slot.enabled:
        return False
    in_hold = slot.alpha_mode == AlphaMode.HOLD
    if op == LifecycleOp.GERMINATE:
        return slot.stage in EMPTY_STAGES
    if op == LifecycleOp.ADVANCE:
        return slot.stage in ADVANCEABLE_STAGES
    if op == LifecycleOp.FOSSILIZE:
        return slot.stage == SeedStage.HOLDING
    if op == LifecycleOp.PRUNE:
        return slot.stage in PRUNABLE_STAGES and slot.age >= MIN_PRUNE_AGE and in_hold
    if op == LifecycleOp.SET_ALPHA_TARGET:
        return slot.stage in RETARGETABLE_STAGES and in_hold
    raise ValueError(f"no slot rule for op {op!r}")


def compute_action_masks(
    slots: Sequence[SlotMaskState],
    *,
    max_seeds: int | None,
    seeds_used: int,
    allowed_blueprints: frozenset[BlueprintAction],
) -> dict[str, torch.Tensor]:
    """One env's masks (CPU bool tensors keyed by `MASK_KEYS`); see the module docstring for the rules."""
    num_slots = len(slots)
    sizes = head_sizes(num_slots)
    germinate_allowed = max_seeds is None or seeds_used < max_seeds
    enabled = [slot.enabled for slot in slots]

    # Built from Python bools, so no tensor is ever read back on the host.
    rows: list[list[bool]] = []
    for op in LifecycleOp:
        if op == LifecycleOp.WAIT:
            rows.append(list(enabled) if any(enabled) else [True] * num_slots)
        elif op == LifecycleOp.GERMINATE and not germinate_allowed:
            rows.append([False] * num_slots)
        else:
            rows.append([slot_allows(op, slot) for slot in slots])
    op_valid = [op == LifecycleOp.WAIT or any(row) for op, row in zip(LifecycleOp, rows)]
    slot_valid = [any(row[s] for row, valid in zip(rows, op_valid) if valid) for s in range(num_slots)]

    blueprints = allowed_blueprints - {BlueprintAction.NOOP}
    if not blueprints:
        raise ValueError("allowed_blueprints must contain at least one blueprint besides NOOP")
    blueprint_valid = [BlueprintAction(i) in blueprints for i in range(sizes["blueprint"])]

    # Style and alpha target only matter when a germinate or a retarget can happen.
    shapes_alpha = op_valid[LifecycleOp.GERMINATE] or op_valid[LifecycleOp.SET_ALPHA_TARGET]
    style_mask = _only_or_all(sizes["style"], GerminationStyle.SIGMOID_ADD, shapes_alpha)
    target_mask = _only_or_all(sizes["alpha_target"], AlphaTargetAction.FULL, shapes_alpha)

    masks = {
        "slot": torch.tensor(slot_valid, dtype=torch.bool),
        "blueprint": torch.tensor(blueprint_valid, dtype=torch.bool),
        "style": style_mask,
        "tempo": torch.ones(sizes["tempo"], dtype=torch.bool),
        "alpha_target": target_mask,
        "alpha_speed": torch.ones(sizes["alpha_speed"], dtype=torch.bool),
        "alpha_curve": torch.ones(sizes["alpha_curve"], dtype=torch.bool),
        "op": torch.tensor(op_valid, dtype=torch.bool),
        "slot_by_op": torch.tensor(rows, dtype=torch.bool),
    }
    return {key: masks[key] for key in MASK_KEYS}


def _only_or_all(size: int, only: int, allow_all: bool) -> torch.Tensor:
    return torch.tensor([allow_all or i == only for i in range(size)], dtype=torch.bool)


def stack_masks(per_env: Sequence[dict[str, torch.Tensor]], device: torch.device) -> dict[str, torch.Tensor]:
    """Batch K envs' masks into `[K, ...]` tensors on `device` with a single host-to-device transfer."""
    if not per_env:
        raise ValueError("stack_masks needs at least one env")
    shapes = {key: tuple(per_env[0][key].shape) for key in MASK_KEYS}
    for env, masks in enumerate(per_env):
        for key in MASK_KEYS:
            if tuple(masks[key].shape) != shapes[key]:
                raise ValueError(f"env {env} mask {key!r} is {tuple(masks[key].shape)}, env 0's is {shapes[key]}")
    # Flatten every env's masks into one row, move the [K, total] block once, then split it back into views.
    flat = torch.stack([torch.cat([masks[key].reshape(-1) for key in MASK_KEYS]) for masks in per_env])
    flat = flat.to(device)
    widths = [int(torch.Size(shapes[key]).numel()) for key in MASK_KEYS]
    parts = torch.split(flat, widths, dim=1)
    k = len(per_env)
    return {key: part.reshape(k, *shapes[key]) for key, part in zip(MASK_KEYS, parts)}
