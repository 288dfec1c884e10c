"""The heuristic controller's rules, first match wins, each only where the action mask allows it."""

from __future__ import annotations

import pytest

from esper.leyline import (
    ACTION_HEAD_NAMES,
    AlphaMode,
    BlueprintAction,
    GerminationStyle,
    LifecycleOp,
    SeedStage,
    TempoAction,
)
from esper.tamiyo.features import SlotObservation
from esper.tamiyo.heuristic import EnvView, HeuristicConfig, decide, decide_batch
from esper.tamiyo.signals import TrainingSignals

CONFIG = HeuristicConfig()
NUM_OPS = len(LifecycleOp)


def _signals(epoch: int = 1, plateau: bool = False) -> TrainingSignals:
    return TrainingSignals(
        epoch=epoch, max_epochs=10, val_loss=1.0, val_acc=50.0, loss_history=(1.0,), acc_history=(50.0,),
        plateau=plateau, stable=False,
    )  # fmt: skip


def _slot(
    stage: SeedStage = SeedStage.DORMANT,
    *,
    contribution: float | None = None,
    alpha: float = 0.0,
    alpha_target: float = 1.0,
    alpha_mode: AlphaMode = AlphaMode.HOLD,
) -> SlotObservation:
    return SlotObservation(
        is_active=stage not in (SeedStage.DORMANT, SeedStage.GERMINATED), stage=stage, alpha=alpha,
        contribution=contribution, contribution_velocity=0.0, tempo=0.0, alpha_target=alpha_target,
        alpha_mode=alpha_mode, alpha_steps_total=0, alpha_steps_done=0, time_to_target=0, alpha_velocity=0.0,
        alpha_algorithm=None, interaction_sum=0.0, grad_norm=None, grad_health=1.0, vanishing=False,
        exploding=False, prev_grad_health=1.0, epochs_in_stage=0, counterfactual_age=0, seed_age=0,
        blueprint_index=0,
    )  # fmt: skip


def _view(
    *slots: SlotObservation, signals: TrainingSignals | None = None, denied: frozenset[tuple[int, int]] = frozenset()
) -> EnvView:
    """Every op allowed on every slot except the (op, slot) pairs in `denied`."""
    slot_by_op = tuple(tuple((op, index) not in denied for index in range(len(slots))) for op in range(NUM_OPS))
    op_mask = tuple(any(row) for row in slot_by_op)
    return EnvView(signals=signals or _signals(), slots=slots, op_mask=op_mask, slot_by_op=slot_by_op)


def _op_and_slot(heads: list[int]) -> tuple[LifecycleOp, int]:
    named = dict(zip(ACTION_HEAD_NAMES, heads))
    return LifecycleOp(named["op"]), named["slot"]


def test_holding_seed_with_positive_contribution_is_fossilized() -> None:
    view = _view(_slot(SeedStage.HOLDING, contribution=0.5, alpha=1.0))
    assert _op_and_slot(decide(view, CONFIG)) == (LifecycleOp.FOSSILIZE, 0)


@pytest.mark.parametrize("contribution", [0.0, -1.0, None])
def test_holding_seed_without_positive_contribution_is_pruned(contribution: float | None) -> None:
    view = _view(_slot(SeedStage.HOLDING, contribution=contribution, alpha=1.0))
    assert _op_and_slot(decide(view, CONFIG)) == (LifecycleOp.PRUNE, 0)


def test_blending_seed_below_prune_threshold_is_pruned() -> None:
    view = _view(_slot(SeedStage.BLENDING, contribution=-2.5, alpha=0.3, alpha_mode=AlphaMode.UP))
    assert _op_and_slot(decide(view, CONFIG)) == (LifecycleOp.PRUNE, 0)


def test_blending_seed_at_the_threshold_is_kept() -> None:
    view = _view(_slot(SeedStage.BLENDING, contribution=-2.0, alpha=0.3, alpha_mode=AlphaMode.UP))
    assert _op_and_slot(decide(view, CONFIG))[0] is not LifecycleOp.PRUNE


@pytest.mark.parametrize("stage", [SeedStage.GERMINATED, SeedStage.TRAINING])
def test_germinated_and_training_seeds_are_advanced(stage: SeedStage) -> None:
    view = _view(_slot(), _slot(stage))
    assert _op_and_slot(decide(view, CONFIG)) == (LifecycleOp.ADVANCE, 1)


def test_blending_seed_is_advanced_once_alpha_holds_at_target() -> None:
    view = _view(_slot(SeedStage.BLENDING, contribution=1.0, alpha=1.0, alpha_mode=AlphaMode.HOLD))
    assert _op_and_slot(decide(view, CONFIG)) == (LifecycleOp.ADVANCE, 0)


def test_blending_seed_still_ramping_is_left_alone() -> None:
    view = _view(_slot(SeedStage.BLENDING, contribution=1.0, alpha=0.5, alpha_mode=AlphaMode.UP), signals=_signals(0))
    assert _op_and_slot(decide(view, CONFIG))[0] is LifecycleOp.WAIT


def test_germinates_in_the_first_empty_slot_on_a_plateau() -> None:
    view = _view(_slot(SeedStage.TRAINING), _slot(), _slot(), signals=_signals(0, plateau=True),
                 denied=frozenset({(LifecycleOp.ADVANCE, 0), (LifecycleOp.GERMINATE, 0)}))  # fmt: skip
    heads = dict(zip(ACTION_HEAD_NAMES, decide(view, CONFIG)))
    assert (LifecycleOp(heads["op"]), heads["slot"]) == (LifecycleOp.GERMINATE, 1)
    assert heads["blueprint"] == BlueprintAction.CONV_LIGHT
    assert heads["style"] == GerminationStyle.LINEAR_ADD
    assert heads["tempo"] == TempoAction.FAST


def test_germinates_without_plateau_once_patience_runs_out() -> None:
    view = _view(_slot(), signals=_signals(epoch=CONFIG.germinate_without_plateau_after))
    assert _op_and_slot(decide(view, CONFIG)) == (LifecycleOp.GERMINATE, 0)


def test_waits_before_patience_runs_out_without_plateau() -> None:
    view = _view(_slot(), signals=_signals(epoch=CONFIG.germinate_without_plateau_after - 1))
    assert _op_and_slot(decide(view, CONFIG))[0] is LifecycleOp.WAIT


def test_a_masked_op_is_never_chosen() -> None:
    view = _view(_slot(SeedStage.HOLDING, contribution=1.0, alpha=1.0), denied=frozenset({(LifecycleOp.FOSSILIZE, 0)}))
    assert _op_and_slot(decide(view, CONFIG))[0] is not LifecycleOp.FOSSILIZE


def test_fossilize_takes_priority_over_advancing_another_slot() -> None:
    view = _view(_slot(SeedStage.TRAINING), _slot(SeedStage.HOLDING, contribution=1.0, alpha=1.0))
    assert _op_and_slot(decide(view, CONFIG)) == (LifecycleOp.FOSSILIZE, 1)


def test_decide_returns_one_index_per_action_head() -> None:
    assert len(decide(_view(_slot()), CONFIG)) == len(ACTION_HEAD_NAMES)


def test_decide_batch_decides_each_env_on_its_own() -> None:
    views = [_view(_slot(SeedStage.TRAINING)), _view(_slot(SeedStage.HOLDING, contribution=1.0, alpha=1.0))]
    ops = [_op_and_slot(heads)[0] for heads in decide_batch(views, CONFIG)]
    assert ops == [LifecycleOp.ADVANCE, LifecycleOp.FOSSILIZE]
