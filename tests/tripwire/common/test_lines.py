"""tripwire.common.lines: a frame's line looked up by code and instruction is the line Python decodes, a traced
frame's line is read as it stands, and nothing of the code is held once forgotten."""

from __future__ import annotations

import gc
import sys
import weakref
from typing import Any

from tripwire.common import lines

# A function whose calls sit on many lines, some several to a line: each call reads the caller's line both ways
SOURCE = """
def run(seen):
    seen(1); seen(2)
    for _ in range(3):
        seen(3)
    x = [seen(4) for _ in range(2)]
    if x:
        seen(5)
    return seen(6), seen(7)
"""


def _compiled() -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(SOURCE, "<lines-test>", "exec"), namespace)
    return namespace["run"]


def test_the_line_looked_up_is_the_line_python_decodes() -> None:
    read: list[tuple[int | None, int | None]] = []

    def seen(_mark: int) -> None:
        frame = sys._getframe(1)
        read.append((lines.line_of(frame), frame.f_lineno))

    run = _compiled()
    run(seen)
    run(seen)  # the second time from the table
    assert len(read) == 2 * 10
    assert all(looked_up == decoded for looked_up, decoded in read), read
    assert {decoded for _, decoded in read} == {3, 5, 6, 8, 9}


def test_a_frame_a_tracer_follows_is_read_as_it_stands() -> None:
    """A debugger sets `f_trace` and may move the line itself: such a frame is never answered from the table."""
    at: list[tuple[Any, int, int | None]] = []

    def seen(_mark: int) -> None:
        frame = sys._getframe(1)
        if not at:
            at.append((frame.f_code, frame.f_lasti, lines.line_of(frame)))  # in the table now

    run = _compiled()
    run(seen)
    code, lasti, line = at[0]

    class Moved:  # the same code and instruction, its line moved by a tracer
        f_trace = object()
        f_lineno = 42
        f_code = code
        f_lasti = lasti

    assert line == 3
    assert lines.line_of(Moved()) == 42  # type: ignore[arg-type]


def test_forget_lets_go_of_every_code_object() -> None:
    def seen(_mark: int) -> None:
        lines.line_of(sys._getframe(1))

    run = _compiled()
    run(seen)
    code = weakref.ref(run.__code__)
    del run
    gc.collect()
    assert code() is not None  # held by the table, so its id is not reused while it answers for it
    lines.forget()
    gc.collect()
    assert code() is None
