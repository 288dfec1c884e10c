"""Slot ids `r{row}c{col}` and the ordered slot layout of a model."""

from __future__ import annotations

import re
from dataclasses import dataclass

_SLOT_RE = re.compile(r"^r([01])c(\d+)$")

# Row 0 is PRE_POOL (after block i), row 1 is POST_POOL (after block i's pool).
ROW_PRE_POOL = 0
ROW_POST_POOL = 1


class SlotIdError(ValueError):
    """A slot id that is not of the form r{row}c{col}."""


def parse_slot_id(slot_id: str) -> tuple[int, int]:
    """Return (row, col) of a slot id, or raise SlotIdError naming the expected form."""
    match = _SLOT_RE.match(slot_id)
    if match is None:
        raise SlotIdError(
            f"bad slot id {slot_id!r}: expected r<row>c<col> with row 0 (pre-pool) or 1 (post-pool), e.g. r0c1"
        )
    return int(match.group(1)), int(match.group(2))


def format_slot_id(row: int, col: int) -> str:
    return f"r{row}c{col}"


def execution_order_key(slot_id: str) -> tuple[int, int]:
    """Sort key for the order slots run in the forward pass: r0c0, r1c0, r0c1, r1c1, ..."""
    row, col = parse_slot_id(slot_id)
    return col, row


@dataclass(frozen=True)
class SlotConfig:
    """The enabled slots of a model. Action indices follow `slot_ids` (row-major order)."""

    slot_ids: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.slot_ids:
            raise SlotIdError("at least one slot is required, e.g. --slots r0c1")
        for slot_id in self.slot_ids:
            parse_slot_id(slot_id)
        if len(set(self.slot_ids)) != len(self.slot_ids):
            raise SlotIdError(f"duplicate slot ids in {list(self.slot_ids)}")
        ordered = tuple(sorted(self.slot_ids, key=parse_slot_id))
        object.__setattr__(self, "slot_ids", ordered)

    @classmethod
    def default(cls) -> SlotConfig:
        return cls(("r0c0", "r0c1", "r0c2"))

    @property
    def num_slots(self) -> int:
        return len(self.slot_ids)

    def resolve(self, index: int) -> tuple[str, bool]:
        """Map an action index to a slot id; out-of-range falls back to the first slot and is flagged invalid."""
        if 0 <= index < len(self.slot_ids):
            return self.slot_ids[index], True
        return self.slot_ids[0], False

    @property
    def execution_order(self) -> tuple[str, ...]:
        return tuple(sorted(self.slot_ids, key=execution_order_key))
