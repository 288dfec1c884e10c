"""SeedSlot telemetry: each lifecycle operation emits its event with the right payload."""

from __future__ import annotations

from kasmina_helpers import EventLog, drive_to, germinate, make_slot

from esper.leyline import SeedStage, TelemetryEventType

T = TelemetryEventType


def test_germinate_emits_seed_germinated_with_blueprint_and_tempo() -> None:
    log = EventLog()
    slot = make_slot(log)
    germinate(slot)
    assert log.types() == [T.SEED_GERMINATED]
    _, slot_id, seed_id, data = log.events[0]
    assert (slot_id, seed_id) == ("r0c1", "seed-1")
    assert data["blueprint_id"] == "conv_light"
    assert data["blend_tempo_epochs"] == 3
    assert data["params"] == slot.seed_param_count > 0


def test_advance_emits_gate_evaluated_then_stage_changed() -> None:
    log = EventLog()
    slot = make_slot(log)
    germinate(slot)
    log.clear()
    slot.advance_stage()
    assert log.types() == [T.SEED_GATE_EVALUATED, T.SEED_STAGE_CHANGED]
    gate = log.of_type(T.SEED_GATE_EVALUATED)[0]
    assert gate == {
        "gate": "G1",
        "passed": True,
        "from_stage": "GERMINATED",
        "target_stage": "TRAINING",
        "reason": "ok",
    }


def test_failed_advance_emits_only_gate_evaluated_with_the_reason() -> None:
    log = EventLog()
    slot = make_slot(log)
    drive_to(slot, SeedStage.TRAINING)
    log.clear()
    result = slot.advance_stage()  # 0 epochs in TRAINING: permissive G2 needs 1
    assert not result.passed
    assert log.types() == [T.SEED_GATE_EVALUATED]
    assert log.of_type(T.SEED_GATE_EVALUATED)[0]["passed"] is False
    assert "epochs_in_training 0 < 1" in log.of_type(T.SEED_GATE_EVALUATED)[0]["reason"]


def test_fossilize_emits_gate_stage_changed_and_seed_fossilized() -> None:
    log = EventLog()
    slot = make_slot(log)
    drive_to(slot, SeedStage.HOLDING)
    slot.record_contribution(3.0)
    log.clear()
    slot.advance_stage(SeedStage.FOSSILIZED)
    assert log.types() == [T.SEED_GATE_EVALUATED, T.SEED_STAGE_CHANGED, T.SEED_FOSSILIZED]
    fossilized = log.of_type(T.SEED_FOSSILIZED)[0]
    assert fossilized["contribution"] == 3.0
    assert fossilized["alpha"] == 1.0
    assert fossilized["params_added"] == slot.seed_param_count


def test_prune_emits_stage_changed_then_seed_pruned() -> None:
    log = EventLog()
    slot = make_slot(log)
    drive_to(slot, SeedStage.TRAINING)
    log.clear()
    slot.prune(reason="policy")
    assert log.types() == [T.SEED_STAGE_CHANGED, T.SEED_PRUNED]
    pruned = log.of_type(T.SEED_PRUNED)[0]
    assert pruned["stage_before"] == "TRAINING"
    assert pruned["reason"] == "policy"
    assert pruned["auto_pruned"] is False
    assert pruned["params_removed"] > 0


def test_cooldown_chain_emits_a_stage_change_for_every_step_back_to_dormant() -> None:
    log = EventLog()
    slot = make_slot(log)
    drive_to(slot, SeedStage.PRUNED)
    log.clear()
    for _ in range(1 + 5 + 1):
        slot.step_epoch()
    assert log.stage_moves() == [("PRUNED", "EMBARGOED"), ("EMBARGOED", "RESETTING"), ("RESETTING", "DORMANT")]
    assert log.types() == [T.SEED_STAGE_CHANGED] * 3


def test_full_success_path_reports_each_stage_once() -> None:
    log = EventLog()
    slot = make_slot(log)
    drive_to(slot, SeedStage.FOSSILIZED)
    assert log.stage_moves() == [
        ("GERMINATED", "TRAINING"),
        ("TRAINING", "BLENDING"),
        ("BLENDING", "HOLDING"),
        ("HOLDING", "FOSSILIZED"),
    ]
    assert log.types().count(T.SEED_GATE_EVALUATED) == 4


def test_stage_changed_reports_epochs_spent_in_the_stage_left() -> None:
    log = EventLog()
    slot = make_slot(log)
    drive_to(slot, SeedStage.TRAINING)
    slot.step_epoch()
    slot.step_epoch()
    log.clear()
    slot.advance_stage()
    assert log.of_type(T.SEED_STAGE_CHANGED)[0]["epochs_in_stage"] == 2
