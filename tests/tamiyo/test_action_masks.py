"""Action masks (brief 1.7): only physically impossible actions are masked, per op and per slot."""

from __future__ import annotations

import pytest
import torch

from esper.leyline import CNN_BLUEPRINTS, MIN_PRUNE_AGE, AlphaMode, BlueprintAction, LifecycleOp, SeedStage
from esper.tamiyo.masks import SlotMaskState, compute_action_masks, stack_masks

Op = LifecycleOp


def masks_for(*slots: SlotMaskState, max_seeds: int | None = None, seeds_used: int = 0) -> dict[str, torch.Tensor]:
    return compute_action_masks(
        list(slots), max_seeds=max_seeds, seeds_used=seeds_used, allowed_blueprints=CNN_BLUEPRINTS
    )


def slot(
    stage: SeedStage, *, age: int = MIN_PRUNE_AGE, mode: AlphaMode = AlphaMode.HOLD, on: bool = True
) -> SlotMaskState:
    return SlotMaskState(stage=stage, age=age, alpha_mode=mode, enabled=on)


def valid_ops(masks: dict[str, torch.Tensor]) -> set[LifecycleOp]:
    return {op for op in LifecycleOp if bool(masks["op"][op])}


@pytest.mark.parametrize(
    ("stage", "ops"),
    [
        (SeedStage.DORMANT, {Op.WAIT, Op.GERMINATE}),
        (SeedStage.GERMINATED, {Op.WAIT, Op.ADVANCE, Op.PRUNE}),
        (SeedStage.TRAINING, {Op.WAIT, Op.ADVANCE, Op.PRUNE}),
        (SeedStage.BLENDING, {Op.WAIT, Op.ADVANCE, Op.PRUNE, Op.SET_ALPHA_TARGET}),
        (SeedStage.HOLDING, {Op.WAIT, Op.FOSSILIZE, Op.PRUNE, Op.SET_ALPHA_TARGET}),
        (SeedStage.FOSSILIZED, {Op.WAIT}),
    ],
)
def test_valid_ops_follow_the_seed_stage(stage: SeedStage, ops: set[LifecycleOp]) -> None:
    assert valid_ops(masks_for(slot(stage))) == ops


def test_a_young_seed_cannot_be_pruned() -> None:
    assert Op.PRUNE not in valid_ops(masks_for(slot(SeedStage.TRAINING, age=MIN_PRUNE_AGE - 1)))


def test_a_seed_whose_alpha_is_moving_cannot_be_pruned_or_retargeted() -> None:
    ops = valid_ops(masks_for(slot(SeedStage.BLENDING, mode=AlphaMode.UP)))

    assert Op.PRUNE not in ops and Op.SET_ALPHA_TARGET not in ops


def test_the_seed_cap_blocks_germination() -> None:
    assert Op.GERMINATE not in valid_ops(masks_for(slot(SeedStage.DORMANT), max_seeds=2, seeds_used=2))
    assert Op.GERMINATE in valid_ops(masks_for(slot(SeedStage.DORMANT), max_seeds=2, seeds_used=1))


def test_slot_by_op_names_the_slots_each_op_may_target() -> None:
    masks = masks_for(slot(SeedStage.DORMANT), slot(SeedStage.HOLDING), slot(SeedStage.DORMANT, on=False))
    rows = masks["slot_by_op"]

    assert rows[Op.GERMINATE].tolist() == [True, False, False]
    assert rows[Op.FOSSILIZE].tolist() == [False, True, False]
    assert rows[Op.WAIT].tolist() == [True, True, False]
    assert masks["slot"].tolist() == [True, True, False]


def test_noop_blueprint_is_always_masked() -> None:
    masks = masks_for(slot(SeedStage.DORMANT))

    assert not bool(masks["blueprint"][BlueprintAction.NOOP])
    assert int(masks["blueprint"].sum()) == len(CNN_BLUEPRINTS) - 1


def test_style_and_alpha_target_collapse_when_no_germinate_or_retarget_is_possible() -> None:
    masks = masks_for(slot(SeedStage.TRAINING))

    assert int(masks["style"].sum()) == 1 and int(masks["alpha_target"].sum()) == 1


def test_stacking_refuses_envs_with_different_slot_counts() -> None:
    with pytest.raises(ValueError, match="env 1 mask 'slot'"):
        stack_masks([masks_for(slot(SeedStage.DORMANT)), masks_for(slot(SeedStage.DORMANT), slot(SeedStage.DORMANT))],
                    torch.device("cpu"))  # fmt: skip
