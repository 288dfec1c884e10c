"""SeedSlot lifecycle: every allowed transition works and is reported; every other move is refused."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kasmina_helpers import EventLog, drive_to, germinate, make_slot

from esper.kasmina import LifecycleError, SeedSlot
from esper.leyline import VALID_TRANSITIONS, AlphaCurve, SeedStage, TelemetryEventType

STAGE_CHANGED = TelemetryEventType.SEED_STAGE_CHANGED


def _germinate(slot: SeedSlot) -> None:
    germinate(slot)


def _advance(slot: SeedSlot) -> None:
    assert slot.advance_stage().passed


def _prune(slot: SeedSlot) -> None:
    assert slot.prune(reason="test")


def _fossilize(slot: SeedSlot) -> None:
    slot.record_contribution(1.5)
    assert slot.advance_stage(SeedStage.FOSSILIZED).passed


def _schedule_prune(slot: SeedSlot) -> None:
    assert slot.schedule_prune(3, AlphaCurve.LINEAR)


def _tick(times: int) -> Callable[[SeedSlot], None]:
    def run(slot: SeedSlot) -> None:
        for _ in range(times):
            slot.step_epoch()

    return run


def _training_advance(slot: SeedSlot) -> None:
    slot.step_epoch()
    assert slot.advance_stage().passed


def _blending_advance(slot: SeedSlot) -> None:
    while slot.alpha_controller.time_to_target:
        slot.step_epoch()
    assert slot.advance_stage().passed


# (from, to) -> the public operation that performs it. UNKNOWN -> DORMANT is the contract's initial edge; an
# empty SeedSlot already reports DORMANT, so there is no operation for it (checked separately below).
OPERATIONS: dict[tuple[SeedStage, SeedStage], Callable[[SeedSlot], None]] = {
    (SeedStage.DORMANT, SeedStage.GERMINATED): _germinate,
    (SeedStage.GERMINATED, SeedStage.TRAINING): _advance,
    (SeedStage.GERMINATED, SeedStage.PRUNED): _prune,
    (SeedStage.TRAINING, SeedStage.BLENDING): _training_advance,
    (SeedStage.TRAINING, SeedStage.PRUNED): _prune,
    (SeedStage.BLENDING, SeedStage.HOLDING): _blending_advance,
    (SeedStage.BLENDING, SeedStage.PRUNED): _prune,
    (SeedStage.HOLDING, SeedStage.FOSSILIZED): _fossilize,
    (SeedStage.HOLDING, SeedStage.BLENDING): _schedule_prune,
    (SeedStage.HOLDING, SeedStage.PRUNED): _prune,
    (SeedStage.PRUNED, SeedStage.EMBARGOED): _tick(1),
    (SeedStage.EMBARGOED, SeedStage.RESETTING): _tick(5),
    (SeedStage.RESETTING, SeedStage.DORMANT): _tick(1),
}

ALLOWED = [(src, dst) for src, targets in VALID_TRANSITIONS.items() for dst in targets]
REFUSED = [(src, dst) for src in SeedStage for dst in SeedStage if dst not in VALID_TRANSITIONS[src]]
# Stages a slot can actually sit in (UNKNOWN is never held by a slot).
REACHABLE_REFUSED = [(src, dst) for src, dst in REFUSED if src is not SeedStage.UNKNOWN]


def _ids(pairs: list[tuple[SeedStage, SeedStage]]) -> list[str]:
    return [f"{src.name}->{dst.name}" for src, dst in pairs]


def test_every_allowed_transition_except_the_initial_edge_has_an_operation() -> None:
    assert set(OPERATIONS) == set(ALLOWED) - {(SeedStage.UNKNOWN, SeedStage.DORMANT)}


def test_an_empty_slot_reports_dormant() -> None:
    assert make_slot().stage is SeedStage.DORMANT


@pytest.mark.parametrize(("src", "dst"), list(OPERATIONS), ids=_ids(list(OPERATIONS)))
def test_allowed_transition_moves_the_slot(src: SeedStage, dst: SeedStage) -> None:
    slot = make_slot()
    drive_to(slot, src)
    OPERATIONS[(src, dst)](slot)
    assert slot.stage is dst


@pytest.mark.parametrize(
    ("src", "dst"),
    [pair for pair in OPERATIONS if pair[0] is not SeedStage.DORMANT],
    ids=_ids([pair for pair in OPERATIONS if pair[0] is not SeedStage.DORMANT]),
)
def test_allowed_transition_emits_one_stage_changed_event(src: SeedStage, dst: SeedStage) -> None:
    log = EventLog()
    slot = make_slot(log)
    drive_to(slot, src)
    log.clear()
    OPERATIONS[(src, dst)](slot)
    assert log.stage_moves() == [(src.name, dst.name)]


@pytest.mark.parametrize(("src", "dst"), REACHABLE_REFUSED, ids=_ids(REACHABLE_REFUSED))
def test_refused_transition_raises_and_leaves_the_slot_unchanged(src: SeedStage, dst: SeedStage) -> None:
    log = EventLog()
    slot = make_slot(log)
    drive_to(slot, src)
    log.clear()
    with pytest.raises(LifecycleError, match="illegal move"):
        slot._transition(dst)
    assert slot.stage is src
    assert log.events == []


@pytest.mark.parametrize("dst", list(SeedStage), ids=[s.name for s in SeedStage])
def test_an_empty_slot_refuses_every_direct_transition(dst: SeedStage) -> None:
    slot = make_slot()
    with pytest.raises(LifecycleError):
        slot._transition(dst)
    assert slot.state is None


@pytest.mark.parametrize("src", list(SeedStage)[1:], ids=[s.name for s in list(SeedStage)[1:]])
@pytest.mark.parametrize("dst", list(SeedStage), ids=[s.name for s in SeedStage])
def test_advance_stage_passes_only_for_the_gated_forward_move(src: SeedStage, dst: SeedStage) -> None:
    slot = make_slot()
    drive_to(slot, src)
    slot.record_contribution(1.0)  # let G5 pass where it is the move under test
    gated_forward = {
        SeedStage.GERMINATED: SeedStage.TRAINING,
        SeedStage.HOLDING: SeedStage.FOSSILIZED,
    }
    if src is SeedStage.TRAINING:
        slot.step_epoch()
        gated_forward[SeedStage.TRAINING] = SeedStage.BLENDING
    if src is SeedStage.BLENDING:
        _tick(3)(slot)
        gated_forward[SeedStage.BLENDING] = SeedStage.HOLDING
    result = slot.advance_stage(dst)
    expected = gated_forward.get(src) is dst
    assert result.passed is expected
    assert slot.stage is (dst if expected else src)


def test_germinate_into_an_occupied_slot_is_refused() -> None:
    slot = make_slot()
    germinate(slot)
    with pytest.raises(LifecycleError, match="needs an empty"):
        germinate(slot)


@pytest.mark.parametrize("src", [SeedStage.FOSSILIZED, SeedStage.PRUNED, SeedStage.EMBARGOED, SeedStage.RESETTING])
def test_prune_is_refused_outside_live_stages(src: SeedStage) -> None:
    slot = make_slot()
    drive_to(slot, src)
    assert slot.prune(reason="test") is False
    assert slot.stage is src


def test_prune_of_an_empty_slot_is_refused() -> None:
    assert make_slot().prune(reason="test") is False
