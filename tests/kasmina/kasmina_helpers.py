"""Shared helpers of the kasmina tests: an event recorder and a driver that walks a SeedSlot to any stage."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from esper.kasmina import SeedSlot
from esper.leyline import (
    AlphaCurve,
    BlueprintAction,
    GerminationStyle,
    SeedStage,
    TelemetryEventType,
    TempoAction,
)

CHANNELS = 4


@dataclass
class EventLog:
    """Records every (event_type, slot_id, seed_id, data) a slot emits."""

    events: list[tuple[TelemetryEventType, str, str | None, dict[str, Any]]] = field(default_factory=list)

    def __call__(self, event_type: TelemetryEventType, slot_id: str, seed_id: str | None, data: dict[str, Any]) -> None:
        self.events.append((event_type, slot_id, seed_id, data))

    def types(self) -> list[TelemetryEventType]:
        return [event[0] for event in self.events]

    def of_type(self, event_type: TelemetryEventType) -> list[dict[str, Any]]:
        return [event[3] for event in self.events if event[0] is event_type]

    def stage_moves(self) -> list[tuple[str, str]]:
        return [(data["from"], data["to"]) for data in self.of_type(TelemetryEventType.SEED_STAGE_CHANGED)]

    def clear(self) -> None:
        self.events.clear()


def make_slot(log: EventLog | None = None, *, permissive: bool = True, channels: int = CHANNELS) -> SeedSlot:
    return SeedSlot("r0c1", channels, permissive_gates=permissive, on_event=log)


def germinate(
    slot: SeedSlot,
    *,
    style: GerminationStyle = GerminationStyle.LINEAR_ADD,
    tempo: TempoAction = TempoAction.FAST,
    blueprint: BlueprintAction = BlueprintAction.CONV_LIGHT,
    alpha_target: float = 1.0,
) -> None:
    slot.germinate(blueprint, "seed-1", style=style, tempo=tempo, alpha_target=alpha_target, init_seed=7)


def drive_to(slot: SeedSlot, stage: SeedStage, *, style: GerminationStyle = GerminationStyle.LINEAR_ADD) -> None:
    """Walk an empty slot through the public lifecycle operations until it sits in `stage`."""
    if stage is SeedStage.DORMANT:
        return
    germinate(slot, style=style)
    if stage is SeedStage.GERMINATED:
        return
    if stage in (SeedStage.PRUNED, SeedStage.EMBARGOED, SeedStage.RESETTING):
        assert slot.prune(reason="test")
        ticks = {SeedStage.PRUNED: 0, SeedStage.EMBARGOED: 1, SeedStage.RESETTING: 6}[stage]
        for _ in range(ticks):
            slot.step_epoch()
        assert slot.stage is stage
        return
    assert slot.advance_stage().passed  # -> TRAINING
    if stage is SeedStage.TRAINING:
        return
    slot.step_epoch()  # G2 (permissive) needs one epoch in TRAINING
    assert slot.advance_stage().passed  # -> BLENDING
    if stage is SeedStage.BLENDING:
        return
    while slot.alpha_controller.time_to_target:
        slot.step_epoch()
    assert slot.advance_stage().passed  # -> HOLDING
    if stage is SeedStage.HOLDING:
        return
    slot.record_contribution(2.0)
    assert slot.advance_stage(SeedStage.FOSSILIZED).passed
    assert stage is SeedStage.FOSSILIZED


def schedule_prune_from_holding(slot: SeedSlot) -> None:
    assert slot.schedule_prune(3, AlphaCurve.LINEAR)
