"""What a checkpoint digests of what it captures: the numbers inside an object, found by descending into it.

A capture (`return`, `self`, `self.NAME`, `arg:NAME`, `arg:NAME.attr`) is reduced to a digestible state by
`tripwire.bitwise.fields.object_state`: tensors, NumPy arrays, plain values and containers of them as they are, and
any other object descended into until its numbers are found (a replay buffer's `_meta` batch, a space's bounds, a
dataclass of arrays). What it could not digest (a callable, a lock, an object deeper than the bound) is named in
`skipped`, said once in the result's notes.

A capture that digested no value is an error, not a pass (`no_value`): a name that binds nothing (`arg:weigths`, a
typo), a state of only None, or one of only plain ints and strings (indexes and sizes) while a field it left out holds
the data. Two runs of such a capture compare identical whatever the loop computed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from tripwire.bitwise.fields import MAX_DEPTH, MAX_LEAVES, Descent, object_state, plain_leaf
from tripwire.common.names import excluded, listed

__all__ = ["MAX_DEPTH", "MAX_LEAVES", "Descent", "left_out", "no_value", "not_excluded", "object_state"]

LEFT_OUT_SHOWN = 12  # of what a capture left out, named in one note


def left_out(skipped: list[str]) -> str:
    """What a capture left out, for a note: the first `LEFT_OUT_SHOWN`, then how many more (a graph of objects past
    the bounds leaves out thousands, each once per path)."""
    return listed(skipped, LEFT_OUT_SHOWN)


def not_excluded(spec: str, skipped: list[str], exclude: Sequence[str]) -> list[str]:
    """What a capture left out, less what the checkpoint's `exclude` names (a patterned `self.writer.*` leaves the
    writer's locks and threads out on purpose: no note for them). A skipped path (`writer._queue.mutex (lock)`,
    `cfg.schedulers[0] (type)`) is matched as `compare` names leaves: under its capture, items dotted."""
    if not exclude:
        return skipped
    kept = []
    for entry in skipped:
        path = entry.split(" (", 1)[0]
        name = spec if path == "it" else f"{spec}.{_ITEM.sub(_dotted, path)}"
        if not excluded(name, exclude):
            kept.append(entry)
    return kept


def _dotted(item: re.Match[str]) -> str:
    return "." + (item.group(1) or item.group(2) or item.group(3) or "")


_ITEM = re.compile(r"\[(?:'([^']*)'|\"([^\"]*)\"|([^\]]*))\]")  # `[0]`, `['key']` -> `.0`, `.key`


def _values(state: Any) -> tuple[int, int]:
    """`(numbers, leaves)` of a digestible state: tensors, arrays, floats and complex numbers among all its leaves."""
    if isinstance(state, Mapping):
        parts = [_values(item) for item in state.values()]
    elif isinstance(state, (list, tuple)):
        parts = [_values(item) for item in state]
    else:
        leaf = plain_leaf(state)
        if leaf is None or (isinstance(leaf, str) and leaf.startswith("<skipped ")):
            return 0, 0
        return int(isinstance(leaf, (torch.Tensor, float, complex))), 1
    return sum(part[0] for part in parts), sum(part[1] for part in parts)


def no_value(state: Any, skipped: list[str]) -> str:
    """Why a capture's state digests no value ("" when it does): only None, or only plain ints and strings while a
    field it left out may hold the data."""
    numbers, leaves = _values(state)
    if leaves == 0:
        return "it digested nothing (only None)" + (f", and left out {left_out(skipped)}" if skipped else "")
    if numbers == 0 and skipped:
        return f"it digested only plain ints and strings (indexes, sizes) and left out {left_out(skipped)}"
    return ""
