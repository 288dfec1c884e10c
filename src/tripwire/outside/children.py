"""The processes a recorded loop starts, which a recording does not see into.

A recording counts syncs, takes checkpoints and collects events in the process it runs. A loop that trains in
worker processes (`torch.multiprocessing`, Hogwild), reads batches in `DataLoader` workers, forks, or launches its
real training as a subprocess does part of its work where none of that reaches. `ChildWatch` counts those starts
while a recording runs (`multiprocessing` starts of every context, wrapped; `os.fork`, and `subprocess.Popen`,
`os.system`, `os.posix_spawn`, `os.spawn*` and `os.exec*`, read from the interpreter's audit events: `subprocess` when
the program runs Python or a launcher, `program` when it runs another such as `git`) with the first line of the tree
that started each kind, so the result can say what it did not see, a comparison can tell when one
side started processes the other did not, and a scenario whose targets only ran in a child is told why they never
fired, instead of being left to guess. torch.compile's own helper processes (compile workers, the C++ compiler) are
not counted: they compute none of the loop's values, and how many start depends on the compile cache.
"""

from __future__ import annotations

import multiprocessing.process
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any
from unittest import mock

from tripwire.sync.threads import in_compiler

_ACTIVE: list[ChildWatch] = []
# audit events that start a process (`sys.addaudithook`): what each runs is read from the event's arguments
_STARTS = {"subprocess.Popen", "os.system", "os.posix_spawn", "os.spawn", "os.exec", "os.fork", "os.forkpty"}


def _audit(event: str, args: tuple[Any, ...], starts: Any = _STARTS, active: Any = _ACTIVE) -> None:
    # the defaults hold the set and the list: at interpreter shutdown this module's globals are cleared to None
    # while the hook still runs for every audited event
    if event not in starts or not active:
        return
    if event != "subprocess.Popen" and sys._getframe(1).f_code.co_filename == subprocess.__file__:
        return  # Popen's own posix_spawn (Python 3.13): the start its "subprocess.Popen" event counted
    if event in ("os.fork", "os.forkpty"):
        kind, program = "os.fork", ""
    else:
        program = _program(args[0] if event == "os.system" else (args[1] or args[0]) if len(args) > 1 else args[0])
        kind = "subprocess" if _runs_python(program) else "program"
    for watch in active:
        watch.started(kind, sys._getframe(1), program)


sys.addaudithook(_audit)  # cannot be removed: it returns at once unless a watch is active


@dataclass
class _Kind:
    count: int = 0
    site: str = ""
    programs: dict[str, int] = field(default_factory=dict)


class ChildWatch:
    """Counts the child processes started between `__enter__` and `__exit__`, by kind, each kind with the first
    tree line that started one."""

    def __init__(self, root: Path) -> None:
        self._root = str(root.resolve())
        self.kinds: dict[str, _Kind] = {}
        self._patch: Any = None  # multiprocessing's start, wrapped while active
        self._in_start = 0  # inside a multiprocessing start, which forks or spawns: counted once, as that start

    def started(self, kind: str, frame: FrameType | None, program: str = "") -> None:
        if (self._in_start and kind != "multiprocessing") or in_compiler(frame):
            return
        entry = self.kinds.setdefault(kind, _Kind())
        entry.count += 1
        if program:
            entry.programs[program] = entry.programs.get(program, 0) + 1
        if not entry.site:
            entry.site = self._site(frame)

    def _site(self, frame: FrameType | None) -> str:
        return tree_site(frame, self._root)

    def __enter__(self) -> ChildWatch:
        watch = self

        original = multiprocessing.process.BaseProcess.start

        def start(process: Any) -> None:
            watch.started("multiprocessing", sys._getframe(1))
            watch._in_start += 1
            try:
                original(process)
            finally:
                watch._in_start -= 1

        self._patch = mock.patch.object(multiprocessing.process.BaseProcess, "start", start)
        self._patch.start()
        _ACTIVE.append(self)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        _ACTIVE.remove(self)
        self._patch.stop()

    def counts(self) -> dict[str, int]:
        """How many processes of each kind were started, in the order the kinds first appeared."""
        return {kind: entry.count for kind, entry in self.kinds.items()}

    def total(self) -> int:
        return sum(entry.count for entry in self.kinds.values())

    def describe(self) -> str:
        """`2 multiprocessing (first at train.py:26), 1 program (first at log.py:9): git` or ''."""
        parts = []
        for kind, entry in self.kinds.items():
            text = f"{entry.count} {kind}"
            if entry.site:
                text += f" (first at {entry.site})"
            if entry.programs:
                text += ": " + ", ".join(
                    f"{name} x{count}" if count > 1 else name for name, count in entry.programs.items()
                )
            parts.append(text)
        return ", ".join(parts)

    def note(self) -> str:
        """The result's note: what the recording could not see ('' when the loop started no process)."""
        if not self.kinds:
            return ""
        return (
            f"the loop started {self.total()} child process(es): {self.describe()}; a recording sees its own process "
            "only: syncs, checkpoints and events in a child are not in this result (vendor-bound CPU ops are, from "
            "children forked, spawned or fork-server started while it ran)"
        )


def tree_site(frame: FrameType | None, root: str) -> str:
    """The innermost frame of `frame`'s stack in the tree at `root`, as `path:line` relative to it ('' when none is)."""
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(root + os.sep):
            return f"{os.path.relpath(filename, root)}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


# programs that run Python, and so may run the loop's own code: the interpreter and the usual launchers
_LAUNCHERS = frozenset({"torchrun", "accelerate", "deepspeed", "mpirun", "mpiexec", "srun", "uv", "conda"})


def _runs_python(program: str) -> bool:
    """Whether a subprocess may run the loop's code (`python3.11`, `torchrun`), not only another program's (`git`)."""
    return program.startswith("python") or program == os.path.basename(sys.executable) or program in _LAUNCHERS


def _program(args: Any) -> str:
    """The program a start runs, by its file name (`python`, `git`), from its argument list or command line. A shell
    line (`os.system`, `shell=True`, `sh -c "..."`) names the first program in it that runs Python, if one does
    (`cd run && python train.py` is `python`), else its first word."""
    parts = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args or [])
    words = [os.path.basename(word) for part in parts for word in os.fsdecode(part).split()]
    return next((word for word in words if _runs_python(word)), words[0] if words else "?")


__all__ = ["ChildWatch", "tree_site"]
