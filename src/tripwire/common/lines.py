"""The line a frame runs, looked up by its code and instruction.

`frame.f_lineno` decodes its code's line table from the start up to the frame's instruction at every read. In a
script's module code (CleanRL's `ppo.py` runs its whole loop there) that is thousands of entries, microseconds a
read, and tripwire reads the user's line at every host copy it notes and every vendor-bound op it notes. The line
at an instruction never changes, so it is decoded once per (code, instruction) and looked up after. A frame a
tracer follows (`f_trace` set: a debugger, which may move the line itself) is read as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from types import CodeType, FrameType

# (the code's address, the instruction) -> (the code, the line): the entry holds the code, so its address is not
# reused while the entry stands; emptied when full, and when a recording's watchers stop (`forget`). The address as
# `object.__hash__` gives it, not through `id`, whose audit event a loop's own audit hook would see at every lookup
_LINES: dict[tuple[int, int], tuple[CodeType, int | None]] = {}
_MOST = 65536
_KEY: Callable[[object], int] = object.__hash__


def line_of(frame: FrameType) -> int | None:
    """`frame.f_lineno`, decoded once per code object and instruction."""
    if frame.f_trace is not None:
        return frame.f_lineno
    code = frame.f_code
    key = (_KEY(code), frame.f_lasti)
    entry = _LINES.get(key)
    if entry is None:
        if len(_LINES) >= _MOST:
            _LINES.clear()
        entry = _LINES[key] = (code, frame.f_lineno)
    return entry[1]


def forget() -> None:
    """Let go of every code object looked up (a recording's watchers have stopped: no code of the loop stays held)."""
    _LINES.clear()
