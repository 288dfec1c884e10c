"""TracedLines: the source lines dynamo traced into compiled graphs, which coverage.py cannot see.

    with coverage_run, TracedLines() as traced:
        train()                                   # some of it under torch.compile
    add_to_coverage(traced.lines, within="src")   # the changed-line gate now sees the compiled lines as run

Code in a compiled region does not run line by line: dynamo reads its bytecode when it captures a graph, and the graph
runs from then on. coverage.py therefore marks those lines unrun, and the changed-line gate
(`tripwire.gates.exercised`) called them UNSEEN although a scenario ran them, compiled. While active, `TracedLines`
records each line dynamo steps to in every frame it traces, inlined calls included: it wraps
`torch._guards.TracingContext.set_current_loc`, which dynamo calls at each new line to name where it is. A line
dynamo traced ran in a graph; after a graph break the rest runs eagerly, where coverage.py sees it anyway.

What it touches: only that dynamo-internal static method, never a function or type a loop can see, and only while
active; it is put back on exit, also after an error, and nested uses unwind in order. On a torch without the method
nothing is recorded and `missing` says why. Loads no torch until entered.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["TracedLines", "add_to_coverage"]


class TracedLines:
    """`with TracedLines() as traced:` then `traced.lines`, file -> the line numbers dynamo traced."""

    def __init__(self) -> None:
        self.lines: dict[str, set[int]] = {}
        self.missing = ""
        self._patched: tuple[Any, Any] | None = None

    def __enter__(self) -> TracedLines:
        try:
            from torch._guards import TracingContext
        except ImportError as error:  # a torch without dynamo's tracing context
            self.missing = f"torch._guards.TracingContext cannot be imported ({error}): compiled lines not recorded"
            return self
        original = TracingContext.__dict__.get("set_current_loc")
        if not isinstance(original, staticmethod):
            self.missing = "this torch's TracingContext has no static set_current_loc: compiled lines not recorded"
            return self
        inner = original.__func__
        lines = self.lines

        def set_current_loc(filename: str, lineno: int, frame_name: str) -> Any:
            lines.setdefault(filename, set()).add(lineno)
            return inner(filename, lineno, frame_name)

        TracingContext.set_current_loc = staticmethod(set_current_loc)  # type: ignore[method-assign,assignment]
        self._patched = (TracingContext, original)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._patched is not None:
            owner, original = self._patched
            owner.set_current_loc = original
            self._patched = None


def add_to_coverage(lines: Mapping[str, set[int]], within: str | os.PathLike[str]) -> int:
    """Add the traced lines of files under `within` to the coverage.py measurement running in this process, as lines
    it ran; returns how many were added (0 when coverage.py is not measuring)."""
    try:
        import coverage
    except ImportError:
        return 0
    current = coverage.Coverage.current()
    if current is None:
        return 0
    root = os.path.join(os.path.realpath(within), "")
    kept = {
        os.path.realpath(file): sorted(numbers)
        for file, numbers in lines.items()
        if numbers and os.path.realpath(file).startswith(root) and Path(file).is_file()
    }
    if not kept:
        return 0
    data = current.get_data()
    if data.has_arcs():  # branch measurement: an arc entering the line marks it run
        data.add_arcs({file: [(-number, number) for number in numbers] for file, numbers in kept.items()})
    else:
        data.add_lines({file: numbers for file, numbers in kept.items()})
    return sum(len(numbers) for numbers in kept.values())
