"""Telemetry backends: a JSONL directory writer (one complete line per event) and an in-memory list."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Protocol

from esper.leyline import TelemetryEvent, TelemetryEventType

EVENTS_FILE = "events.jsonl"


class TelemetryPathError(ValueError):
    """The telemetry directory cannot be created or written; the message names `--telemetry-dir`."""


class TelemetryWriteError(RuntimeError):
    """Writing an event failed (disk full, file-size limit, I/O error); the file still ends with a whole line."""


class TelemetryBackend(Protocol):
    def write(self, event: TelemetryEvent) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class InMemoryBackend:
    """Keeps every event in a list, in delivery order (for tests)."""

    def __init__(self) -> None:
        self.events: list[TelemetryEvent] = []

    def write(self, event: TelemetryEvent) -> None:
        self.events.append(event)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def of_type(self, event_type: TelemetryEventType) -> list[TelemetryEvent]:
        return [event for event in self.events if event.event_type is event_type]


def _make_unique_run_dir(root: Path, run_name: str) -> Path:
    """Create `root/run_name`, or `run_name_001`, `_002`, ... when taken (also by a run starting at once)."""
    candidate = root / run_name
    suffix = 1
    while True:
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            candidate = root / f"{run_name}_{suffix:03d}"
            suffix += 1


def _cut_to_last_line(fd: int, block: int = 1 << 16) -> int:
    """Truncate an open file after its last newline (nothing when it is empty or ends with one); bytes cut."""
    size = end = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return 0
    while end > 0:
        start = max(0, end - block)
        newline = os.pread(fd, end - start, start).rfind(b"\n")
        if newline >= 0:
            end = start + newline + 1
            break
        end = start
    os.ftruncate(fd, end)
    return size - end


class DirectoryBackend:
    """Writes `root/<run-name>/events.jsonl`, one JSON object per line.

    Each event is encoded in full and written with a single `os.write` on an O_APPEND descriptor: there is no
    user-space buffer to lose, and a run killed at any moment leaves every event it finished writing. One `write`
    is not atomic against SIGKILL, though: Linux copies a write into the page cache page by page and stops at a
    page boundary when a fatal signal is pending, so a kill can leave the last line cut short at a 4 KiB
    boundary (seen in about one kill in twenty of a tight append loop; `docs/reliability.md`). Such a tail is
    the one fragment a kill can leave: opening the file again cuts it back to the last whole line, and readers
    name it. A write that fails part-way (disk full, the file-size limit) is cut back to the last whole line
    and raises `TelemetryWriteError`, so every line in the file parses.
    `flush()` and `close()` fsync the file. The events file is locked (flock) while the backend is open.

    A rank of a sharded run writes its own `events_file` (`events.rank<r>.jsonl`) into the run folder rank 0 made
    (`new_folder=False`); `esper.nissa.merge` then writes the merged `events.jsonl`.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        run_name: str,
        *,
        events_file: str = EVENTS_FILE,
        new_folder: bool = True,
    ) -> None:
        root_path = Path(root)
        try:
            root_path.mkdir(parents=True, exist_ok=True)
            self.run_dir = _make_unique_run_dir(root_path, run_name) if new_folder else root_path / run_name
            self.path = self.run_dir / events_file
            self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # this run's folder: no other writer
            self.cut_on_open = _cut_to_last_line(self._fd)  # a killed writer's torn tail, never glued to our line
            self._size = os.fstat(self._fd).st_size  # the end of the last whole line
        except OSError as error:
            raise TelemetryPathError(
                f"cannot write telemetry under {str(root)!r} ({error.strerror}): pass --telemetry-dir a writable folder"
            ) from None

    def write(self, event: TelemetryEvent) -> None:
        if self._fd is None:
            raise RuntimeError(f"{self.path} is closed")
        line = (json.dumps(event.to_json_dict(), sort_keys=False, allow_nan=False) + "\n").encode()
        try:
            written = os.write(self._fd, line)
            while written < len(line):  # regular files take the whole line at once; a short write is finished here
                written += os.write(self._fd, line[written:])
        except OSError as error:
            self._cut_back()
            raise TelemetryWriteError(
                f"cannot write telemetry to {self.path} ({error.strerror}): the file ends with the last whole event; "
                "free disk space (or raise the file-size limit) and --resume from the last checkpoint"
            ) from None
        self._size += len(line)

    def _cut_back(self) -> None:
        """Drop a partly written line, so the file ends with a whole event (best effort: the disk may be gone)."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, self._size)

    def flush(self) -> None:
        """Nothing is buffered in user space; fsync so that flushed events survive an OS crash as well (the
        trainer flushes before each checkpoint, which is fsynced too)."""
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
