"""What of a source tree one run read: the closure a history walk reuses a commit's result by.

A history walk runs one scenario on many commits; most commits of a project change files a given run never reads
(docs, other tools, tests of other parts). `Closure(root)`, entered around a run, records through an audit hook
(`sys.addaudithook`, installed once per process and idle outside a closure) every part of the tree under `root` the
run could have depended on:

- `files`: every file opened (`open`, `io.open_code`: a module's source or its bytecode, which stands for its
  source), loaded as a library (`ctypes.dlopen`) or imported as a module (the caller notes each module it unloads);
- `dirs`: every folder listed (`os.listdir`, `os.scandir`, hence `glob`, `os.walk` and the import system's search of
  each import root and package): a file added beside an imported module could shadow it, so a listing is part of
  what was read;
- `exists`: every path asked about through the scenario's `Tree.has`;
- `ancestors`: every `Tree.is_ancestor` question with its answer.

A run that starts another process (`subprocess`, `os.system`, `os.exec*`, `os.posix_spawn`, `os.fork`: a DataLoader
worker, torchrun's ranks) or reads its commit's sha (`Tree.commit`) depends on more than its files: the closure is
`open`, with the reason, and its result is never reused. What an audit hook cannot see is a bare existence check
(`os.stat`, `Path.exists`) of a tree path the run never opens or lists: the scenario's `Tree.has` is recorded, the
tree's own code's are not (a reused result would miss a branch taken on a file that appears without anything else
changing; a history walk's `--no-reuse` runs every commit).

Paths are kept relative to the root, with `/`, so a closure recorded in one worktree is compared with any commit's
git tree (`tripwire.history.reuse`). This module imports no torch and nothing of tripwire's.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

VERSION = 1

# events that read a path of the tree (the first argument), and the closure set each one goes to
_READS = {"open": "files", "ctypes.dlopen": "files", "os.listdir": "dirs", "os.scandir": "dirs"}
# events that start another process: whatever it reads is not seen here
_SPAWNS = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty"}

_active: Closure | None = None
_installed = False


class Closure:
    """The parts of the tree under `root` read while the closure is entered (see the module docstring)."""

    def __init__(self, root: str | Path) -> None:
        self.root = os.path.abspath(root)
        self._prefix = self.root.rstrip(os.sep) + os.sep
        self.files: set[str] = set()
        self.dirs: set[str] = set()
        self.exists: set[str] = set()
        self.ancestors: dict[str, bool] = {}
        self.open: list[str] = []  # why this run's result may not be reused (empty: it may)
        self._quiet = 0  # > 0 while tripwire itself runs git for a recorded question

    def __enter__(self) -> Closure:
        global _active, _installed
        if not _installed:
            sys.addaudithook(_hook)
            _installed = True
        _active = self
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        global _active
        _active = None

    # what the hook and the scenario's `Tree` report
    def relative(self, path: Any) -> str | None:
        """`path` relative to the root with `/`, or None when it is not under the root (or not a path at all)."""
        if isinstance(path, int):  # a file descriptor: what it names is not known here
            return None
        try:
            text = os.fsdecode(os.fspath(path)) if path is not None else os.getcwd()
        except (TypeError, ValueError):
            return None
        full = os.path.normpath(os.path.join(os.getcwd(), text))
        if full == self.root:
            return "."
        if not full.startswith(self._prefix):
            return None
        return full[len(self._prefix) :].replace(os.sep, "/")

    def read(self, what: str, path: Any) -> None:
        name = self.relative(path)
        if name is None:
            return
        if what == "files":
            name = _source_of(name)
        (self.files if what == "files" else self.dirs).add(name)

    def modules(self, files: Iterable[str]) -> None:
        """Note the source files of modules imported from the tree (the caller unloads them)."""
        for file in files:
            self.read("files", file)

    def spawned(self, event: str) -> None:
        if not self._quiet:
            self.open_because(f"it started another process ({event}), whose reads are not seen")

    def open_because(self, reason: str) -> None:
        if reason not in self.open:
            self.open.append(reason)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "files": sorted(self.files),
            "dirs": sorted(self.dirs),
            "exists": sorted(self.exists),
            "ancestors": dict(sorted(self.ancestors.items())),
            "open": list(self.open),
        }

    def save(self, path: Path) -> None:
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(self.to_json(), indent=1) + "\n", encoding="utf-8")
        partial.replace(path)


def _source_of(name: str) -> str:
    """A module's bytecode stands for its source (`pkg/__pycache__/mod.cpython-311.pyc` -> `pkg/mod.py`): the
    import system reads a cached pyc instead of the source whenever one is there."""
    folder, _, file = name.rpartition("/")
    if folder.rpartition("/")[2] != "__pycache__" and folder != "__pycache__":
        return name
    if not file.endswith(".pyc"):
        return name
    parent = folder.rpartition("/")[0]
    source = file.split(".", 1)[0] + ".py"
    return f"{parent}/{source}" if parent else source


def _hook(event: str, args: tuple[Any, ...]) -> None:
    closure = _active
    if closure is None:
        return
    what = _READS.get(event)
    if what is not None:
        closure.read(what, args[0] if args else None)
    elif event in _SPAWNS:
        closure.spawned(event)


def active() -> Closure | None:
    """The closure being recorded in this process, if any (the scenario's `Tree` reports to it)."""
    return _active


class quiet:
    """While tripwire itself runs a process for a question the closure records (`Tree.is_ancestor`)."""

    def __enter__(self) -> None:
        if _active is not None:
            _active._quiet += 1

    def __exit__(self, *exc: object) -> None:
        if _active is not None:
            _active._quiet -= 1
