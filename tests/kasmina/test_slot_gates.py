"""Quality gates G0..G5, permissive (training default) and strict."""

from __future__ import annotations

import pytest
from kasmina_helpers import drive_to, germinate, make_slot

from esper.kasmina import LifecycleError
from esper.leyline import BlueprintAction, GateLevel, GerminationStyle, SeedStage, TempoAction


def test_g0_refuses_a_germination_without_seed_id() -> None:
    slot = make_slot()
    with pytest.raises(LifecycleError, match="G0"):
        slot.germinate(
            BlueprintAction.CONV_LIGHT, "", style=GerminationStyle.LINEAR_ADD, tempo=TempoAction.FAST,
            alpha_target=1.0, init_seed=0,
        )  # fmt: skip
    assert slot.state is None


def test_g0_refuses_an_unknown_blueprint() -> None:
    slot = make_slot()
    with pytest.raises(ValueError):
        slot.germinate(
            99, "s", style=GerminationStyle.LINEAR_ADD, tempo=TempoAction.FAST, alpha_target=1.0, init_seed=0
        )  # type: ignore[arg-type]
    assert slot.state is None


def test_g1_passes_from_germinated() -> None:
    slot = make_slot()
    germinate(slot)
    result = slot.advance_stage()
    assert (result.gate, result.passed) == (GateLevel.G1, True)


def test_g2_permissive_refuses_before_one_epoch_in_training() -> None:
    slot = make_slot()
    drive_to(slot, SeedStage.TRAINING)
    result = slot.advance_stage()
    assert (result.gate, result.passed) == (GateLevel.G2, False)


def test_g2_permissive_passes_after_one_epoch_in_training() -> None:
    slot = make_slot()
    drive_to(slot, SeedStage.TRAINING)
    slot.step_epoch()
    assert slot.advance_stage().passed


def test_g2_strict_needs_three_epochs_health_and_improvement() -> None:
    slot = make_slot(permissive=False)
    slot.germinate(
        BlueprintAction.CONV_LIGHT, "s", style=GerminationStyle.LINEAR_ADD, tempo=TempoAction.FAST,
        alpha_target=1.0, init_seed=0, acc_at_germination=40.0,
    )  # fmt: skip
    slot.advance_stage()
    slot.step_epoch()
    first = slot.advance_stage()
    assert not first.passed
    assert "epochs_in_training 1 < 3" in first.reason
    assert "gradient health never measured" in first.reason
    assert "improvement None" in first.reason
    slot.step_epoch()
    slot.step_epoch()
    slot.record_grad_norm(0.5)
    slot.record_accuracy(41.0)
    assert slot.advance_stage().passed


def test_g2_strict_refuses_too_small_an_improvement() -> None:
    slot = make_slot(permissive=False)
    slot.germinate(
        BlueprintAction.CONV_LIGHT, "s", style=GerminationStyle.LINEAR_ADD, tempo=TempoAction.FAST,
        alpha_target=1.0, init_seed=0, acc_at_germination=40.0,
    )  # fmt: skip
    slot.advance_stage()
    for _ in range(3):
        slot.step_epoch()
    slot.record_grad_norm(0.5)
    slot.record_accuracy(40.2)
    result = slot.advance_stage()
    assert not result.passed
    assert "improvement" in result.reason


def test_g3_refuses_while_alpha_is_ramping() -> None:
    slot = make_slot()
    drive_to(slot, SeedStage.BLENDING)
    slot.step_epoch()
    result = slot.advance_stage()
    assert (result.gate, result.passed) == (GateLevel.G3, False)
    assert "alpha ramping UP" in result.reason


def test_g3_refuses_a_partial_alpha_target() -> None:
    slot = make_slot()
    slot.germinate(
        BlueprintAction.CONV_LIGHT, "s", style=GerminationStyle.LINEAR_ADD, tempo=TempoAction.FAST,
        alpha_target=0.5, init_seed=0,
    )  # fmt: skip
    slot.advance_stage()
    slot.step_epoch()
    slot.advance_stage()
    for _ in range(3):
        slot.step_epoch()
    assert slot.alpha == 0.5
    result = slot.advance_stage()
    assert not result.passed
    assert "alpha target 0.5 < 1.0" in result.reason


def test_g3_passes_once_alpha_holds_at_full_target() -> None:
    slot = make_slot()
    drive_to(slot, SeedStage.BLENDING)
    for _ in range(3):
        slot.step_epoch()
    result = slot.advance_stage()
    assert (result.gate, result.passed) == (GateLevel.G3, True)
    assert slot.alpha == 1.0


def test_g3_strict_also_needs_three_blending_epochs() -> None:
    slot = make_slot(permissive=False)
    slot.germinate(
        BlueprintAction.CONV_LIGHT, "s", style=GerminationStyle.LINEAR_ADD, tempo=TempoAction.FAST,
        alpha_target=1.0, init_seed=0, acc_at_germination=0.0,
    )  # fmt: skip
    slot.advance_stage()
    for _ in range(3):
        slot.step_epoch()
    slot.record_grad_norm(0.5)
    slot.record_accuracy(5.0)
    assert slot.advance_stage().passed
    slot.alpha_controller.force(1.0)  # full alpha at once: only the epoch count can refuse
    result = slot.advance_stage()
    assert not result.passed
    assert "epochs_in_blending 0 < 3" in result.reason


def test_g5_refuses_without_a_counterfactual_contribution() -> None:
    slot = make_slot()
    drive_to(slot, SeedStage.HOLDING)
    result = slot.advance_stage(SeedStage.FOSSILIZED)
    assert (result.gate, result.passed) == (GateLevel.G5, False)
    assert "no counterfactual" in result.reason


def test_g5_refuses_an_unhealthy_seed() -> None:
    slot = make_slot()
    drive_to(slot, SeedStage.HOLDING)
    slot.record_contribution(5.0)
    slot.record_grad_norm(float("nan"))
    result = slot.advance_stage(SeedStage.FOSSILIZED)
    assert not result.passed
    assert "unhealthy" in result.reason


def test_g5_permissive_accepts_any_measured_contribution() -> None:
    slot = make_slot()
    drive_to(slot, SeedStage.HOLDING)
    slot.record_contribution(-1.0)
    assert slot.advance_stage(SeedStage.FOSSILIZED).passed


def test_g5_strict_needs_a_contribution_of_one_point() -> None:
    slot = make_slot()
    drive_to(slot, SeedStage.HOLDING)
    slot.permissive_gates = False
    slot.record_contribution(0.9)
    assert not slot.advance_stage(SeedStage.FOSSILIZED).passed
    slot.record_contribution(1.0)
    assert slot.advance_stage(SeedStage.FOSSILIZED).passed


def test_gate_levels_guard_their_stages() -> None:
    slot = make_slot()
    gates = []
    drive_to(slot, SeedStage.GERMINATED)
    gates.append(slot.advance_stage().gate)
    slot.step_epoch()
    gates.append(slot.advance_stage().gate)
    for _ in range(3):
        slot.step_epoch()
    gates.append(slot.advance_stage().gate)
    slot.record_contribution(1.0)
    gates.append(slot.advance_stage(SeedStage.FOSSILIZED).gate)
    assert gates == [GateLevel.G1, GateLevel.G2, GateLevel.G3, GateLevel.G5]
