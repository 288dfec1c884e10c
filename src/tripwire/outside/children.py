"""The processes a recorded loop starts, which a recording does not see into.

A recording counts syncs, takes checkpoints and collects events in the process it runs. A loop that trains in
worker processes (`torch.multiprocessing`, Hogwild), reads batches in `DataLoader` workers, forks, or launches its
real training as a subprocess does part of its work where none of that reaches. `ChildWatch` counts those starts
while a recording runs, with the first line of the tree that started each kind, so the result can say what it did
not see, a comparison can tell when one side started processes the other did not, and a scenario whose targets only
ran in a child is told why they never fired, instead of being left to guess.

While a watch is active, the functions that start a process are wrapped: `multiprocessing` starts of every context
(`BaseProcess.start`), `subprocess.Popen` (its `_execute_child`), and `os.system`, `os.posix_spawn[p]`, `os.exec[v]e`
and `os.spawnv*` (`subprocess` when the program runs Python or a launcher, `program` when it runs another such as
`git`); a fork (`os.fork`, `os.forkpty`, `pty.fork`) is seen by a handler `os.register_at_fork` runs before each one,
which returns at once unless a watch is active. A start inside another (a `Process`'s fork, `Popen`'s
`preexec_fn` fork) is counted once, as the outer one. The wrappers are put back when the last watch ends. (An audit
hook saw all of these too, but it cannot be removed, and it runs for every audited event of the process for the
rest of its life: each `id()` and each frame's `f_code` read. It cost CleanRL's recorded loop 0.5x its own time.)
torch.compile's own helper processes (compile workers, the C++ compiler) are not counted: they compute none of the
loop's values, and how many start depends on the compile cache.
"""

from __future__ import annotations

import functools
import multiprocessing.process
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, ModuleType, TracebackType
from typing import Any

from tripwire.common.unhook import put_back
from tripwire.sync.threads import in_compiler

_ACTIVE: list[ChildWatch] = []
_LOCAL = threading.local()  # `depth`: this thread is inside a start already counted (its own forks are that start)


def _counted(kind: str, program: str, frame: FrameType | None) -> None:
    for watch in list(_ACTIVE):
        watch.started(kind, frame, program)


def _forking(
    active: Any = _ACTIVE, local: Any = _LOCAL, counted: Any = _counted, getframe: Any = sys._getframe
) -> None:
    # before every fork of the process, for its life (`os.register_at_fork` cannot be undone): the defaults hold what
    # it reads, since at interpreter shutdown this module's globals are cleared to None while a finalizer may fork
    if active and not getattr(local, "depth", 0):
        counted("os.fork", "", getframe(1))  # frame 1: the caller of `os.fork`


os.register_at_fork(before=_forking)


def _wrapped(original: Callable[..., Any], describe: Callable[..., tuple[str, str]]) -> Callable[..., Any]:
    """`original`, counting each call as the start `describe(*args, **kwargs)` names, (kind, program)."""

    @functools.wraps(original)
    def start(*args: Any, **kwargs: Any) -> Any:
        depth = getattr(_LOCAL, "depth", 0)
        if _ACTIVE and not depth:
            kind, program = describe(*args, **kwargs)
            _counted(kind, program, sys._getframe(1))
        _LOCAL.depth = depth + 1
        try:
            return original(*args, **kwargs)  # pass-through
        finally:
            _LOCAL.depth = depth

    return start


def _run(program: str) -> tuple[str, str]:
    return ("subprocess" if _runs_python(program) else "program"), program


def _popen(process: Any, args: Any, executable: Any = None, *rest: Any, **kwargs: Any) -> tuple[str, str]:
    return _run(_program(args or executable))  # a shell line (`shell=True`) is a string: its program is found in it


def _posix_spawn(path: Any, argv: Any = None, *rest: Any, **kwargs: Any) -> tuple[str, str]:
    return _run(_program(argv or path))  # also `os.execv(path, argv)` and `os.execve(path, argv, env)`


def _spawn(mode: Any, file: Any, args: Any = None, *rest: Any, **kwargs: Any) -> tuple[str, str]:
    return _run(_program(args or file))


# (owner, attribute name, what a call starts): each wrapped while a watch is active, where the platform has it
_STARTS: list[tuple[Any, str, Callable[..., tuple[str, str]]]] = [
    (multiprocessing.process.BaseProcess, "start", lambda *args, **kwargs: ("multiprocessing", "")),
    (subprocess.Popen, "_execute_child", _popen),
    (os, "system", lambda command, *rest, **kwargs: _run(_program(command))),
    *((os, name, _posix_spawn) for name in ("posix_spawn", "posix_spawnp", "execv", "execve")),
    *((os, name, _spawn) for name in ("spawnv", "spawnve", "spawnvp", "spawnvpe")),
]
_PUT_IN: list[tuple[Any, str, Any, Any]] = []  # (owner, name, original, wrapper) while any watch is active


def _wrap_starts() -> None:
    for owner, name, describe in _STARTS:
        original = owner.__dict__.get(name)
        if original is not None:
            wrapper = _wrapped(original, describe)
            if isinstance(owner, ModuleType):  # pickled by name as `os.system` (a `Pool.map(os.system, ...)` task),
                wrapper.__module__ = owner.__name__  # not `posix.system`, which is not this object
            setattr(owner, name, wrapper)
            _PUT_IN.append((owner, name, original, wrapper))


def _unwrap_starts() -> None:
    """Put each function back, unless something has since replaced the wrapper: then what replaced it stays, holding
    the original where it held the wrapper (`tripwire.common.unhook`)."""
    while _PUT_IN:
        owner, name, original, wrapper = _PUT_IN.pop()
        put_back(owner, name, True, original, wrapper)


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

    def started(self, kind: str, frame: FrameType | None, program: str = "") -> None:
        if in_compiler(frame):
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
        if not _ACTIVE:
            _wrap_starts()
        _ACTIVE.append(self)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        _ACTIVE.remove(self)
        if not _ACTIVE:
            _unwrap_starts()

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
