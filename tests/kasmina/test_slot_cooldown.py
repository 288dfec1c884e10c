"""Pruning: embargo length, resetting length, and the scheduled prune that ramps alpha to 0 first."""

from __future__ import annotations

from kasmina_helpers import EventLog, drive_to, make_slot

from esper.leyline import AlphaCurve, AlphaMode, SeedStage, TelemetryEventType


def test_pruned_moves_to_embargoed_on_the_next_tick() -> None:
    slot = make_slot()
    drive_to(slot, SeedStage.PRUNED)
    slot.step_epoch()
    assert slot.stage is SeedStage.EMBARGOED


def test_embargo_lasts_five_ticks() -> None:
    slot = make_slot()
    drive_to(slot, SeedStage.EMBARGOED)
    stages = []
    for _ in range(5):
        slot.step_epoch()
        stages.append(slot.stage)
    assert stages == [SeedStage.EMBARGOED] * 4 + [SeedStage.RESETTING]


def test_resetting_lasts_one_tick_and_clears_the_slot() -> None:
    slot = make_slot()
    drive_to(slot, SeedStage.RESETTING)
    slot.step_epoch()
    assert slot.stage is SeedStage.DORMANT
    assert slot.state is None
    assert slot.seed is None


def test_a_dormant_slot_after_cooldown_can_germinate_again() -> None:
    slot = make_slot()
    drive_to(slot, SeedStage.RESETTING)
    slot.step_epoch()
    drive_to(slot, SeedStage.TRAINING)
    assert slot.stage is SeedStage.TRAINING


def test_prune_releases_the_seed_module_at_once() -> None:
    slot = make_slot()
    drive_to(slot, SeedStage.BLENDING)
    slot.prune(reason="test")
    assert slot.seed is None
    assert slot.seed_parameters() == []
    assert slot.alpha == 0.0


def test_scheduled_prune_ramps_alpha_down_to_zero() -> None:
    slot = make_slot()
    drive_to(slot, SeedStage.HOLDING)
    assert slot.schedule_prune(4, AlphaCurve.LINEAR)
    alphas = []
    for _ in range(3):
        slot.step_epoch()
        alphas.append(slot.alpha)
    assert alphas == [0.75, 0.5, 0.25]
    assert slot.stage is SeedStage.BLENDING


def test_scheduled_prune_prunes_when_alpha_reaches_zero() -> None:
    log = EventLog()
    slot = make_slot(log)
    drive_to(slot, SeedStage.HOLDING)
    slot.schedule_prune(3, AlphaCurve.COSINE)
    log.clear()
    for _ in range(3):
        slot.step_epoch()
    assert slot.stage is SeedStage.PRUNED
    pruned = log.of_type(TelemetryEventType.SEED_PRUNED)
    assert len(pruned) == 1
    assert pruned[0]["auto_pruned"] is True


def test_scheduled_prune_from_holding_returns_to_blending() -> None:
    log = EventLog()
    slot = make_slot(log)
    drive_to(slot, SeedStage.HOLDING)
    log.clear()
    slot.schedule_prune(3, AlphaCurve.LINEAR)
    assert log.stage_moves() == [("HOLDING", "BLENDING")]


def test_scheduled_prune_freezes_seed_parameters_while_alpha_ramps_down() -> None:
    slot = make_slot()
    drive_to(slot, SeedStage.HOLDING)
    slot.schedule_prune(3, AlphaCurve.LINEAR)
    assert slot.alpha_controller.mode is AlphaMode.DOWN
    assert not slot.seed_trainable
    assert all(not p.requires_grad for p in slot.seed_parameters())


def test_scheduled_prune_is_refused_while_alpha_still_ramps() -> None:
    slot = make_slot()
    drive_to(slot, SeedStage.BLENDING)
    slot.step_epoch()
    assert slot.alpha_controller.mode is AlphaMode.UP
    assert slot.schedule_prune(3, AlphaCurve.LINEAR) is False
    assert slot.stage is SeedStage.BLENDING


def test_scheduled_prune_with_zero_ticks_prunes_at_once() -> None:
    slot = make_slot()
    drive_to(slot, SeedStage.HOLDING)
    assert slot.schedule_prune(0, AlphaCurve.LINEAR)
    assert slot.stage is SeedStage.PRUNED


def test_scheduled_prune_of_a_seed_without_alpha_prunes_at_once() -> None:
    slot = make_slot()
    drive_to(slot, SeedStage.TRAINING)
    assert slot.schedule_prune(5, AlphaCurve.LINEAR)
    assert slot.stage is SeedStage.PRUNED
