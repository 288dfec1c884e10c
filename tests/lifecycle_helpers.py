"""Shared by tests outside tests/kasmina: walk a freshly germinated seed through the gates to FOSSILIZED."""

from __future__ import annotations

from esper.kasmina import SeedSlot
from esper.leyline import SeedStage


def fossilize_germinated(slot: SeedSlot) -> None:
    """GERMINATED -> TRAINING -> BLENDING -> HOLDING -> FOSSILIZED through the public operations.

    Expects a seed germinated with tempo FAST (a 3-tick blend) and permissive gates.
    """
    slot.advance_stage()  # -> TRAINING
    slot.step_epoch()  # G2 (permissive) needs one epoch in TRAINING
    slot.advance_stage()  # -> BLENDING
    for _ in range(3):
        slot.step_epoch()
    slot.advance_stage()  # -> HOLDING
    slot.record_contribution(1.0)
    assert slot.advance_stage(SeedStage.FOSSILIZED).passed
