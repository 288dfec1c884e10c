"""DirectoryBackend: D/<run-name>/events.jsonl of complete JSON lines, _NNN suffixes, clear path errors."""

from __future__ import annotations

import json
import mmap
import os
import signal
import time
from pathlib import Path

import pytest

from esper.leyline import TelemetryEvent, TelemetryEventType
from esper.nissa import DirectoryBackend, TelemetryHub, TelemetryPathError


def _write(root: Path, run_name: str, n: int) -> DirectoryBackend:
    backend = DirectoryBackend(root, run_name)
    with TelemetryHub(queue_size=16) as hub:
        hub.add_backend(backend)
        for i in range(n):
            hub.emit(TelemetryEvent(TelemetryEventType.EPOCH_COMPLETED, data={"i": i, "text": "x" * i}, epoch=i))
    return backend


def test_events_go_to_run_name_slash_events_jsonl(tmp_path: Path) -> None:
    backend = _write(tmp_path / "telemetry", "run", 3)
    assert backend.path == tmp_path / "telemetry" / "run" / "events.jsonl"
    assert backend.path.is_file()


def test_every_line_is_one_complete_json_event(tmp_path: Path) -> None:
    backend = _write(tmp_path, "run", 200)
    raw = backend.path.read_bytes()
    assert raw.endswith(b"\n")
    lines = raw.decode().splitlines()
    events = [json.loads(line) for line in lines]
    assert [event["data"]["i"] for event in events] == list(range(200))
    assert all(event["event_type"] == "EPOCH_COMPLETED" for event in events)


def test_each_line_carries_the_wire_format_keys(tmp_path: Path) -> None:
    backend = _write(tmp_path, "run", 1)
    event = json.loads(backend.path.read_text())
    expected = {"event_id", "event_type", "timestamp", "seed_id", "slot_id", "epoch", "group_id", "message", "severity"}
    assert expected | {"data"} <= set(event)


def test_an_existing_run_directory_gets_a_001_suffix(tmp_path: Path) -> None:
    first = _write(tmp_path, "run", 1)
    second = _write(tmp_path, "run", 1)
    third = _write(tmp_path, "run", 1)
    assert first.run_dir.name == "run"
    assert second.run_dir.name == "run_001"
    assert third.run_dir.name == "run_002"
    assert len(first.path.read_text().splitlines()) == 1  # the first run was not appended to


def test_an_unwritable_directory_is_a_one_line_error_naming_the_flag(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(TelemetryPathError) as info:
        DirectoryBackend(blocker / "telemetry", "run")
    message = str(info.value)
    assert "--telemetry-dir" in message
    assert "\n" not in message


def _event(i: int, width: int = 0) -> TelemetryEvent:
    return TelemetryEvent(TelemetryEventType.EPOCH_COMPLETED, data={"i": i, "text": "x" * width}, epoch=i)


@pytest.mark.parametrize("fragment", [b'{"event_type": "EPOCH_COMP', b"y" * 200_000], ids=["short", "over-a-block"])
def test_a_torn_tail_left_by_a_killed_writer_is_cut_before_the_next_line(tmp_path: Path, fragment: bytes) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    whole = b'{"event_type": "A"}\n{"event_type": "B"}\n'
    (folder / "events.rank1.jsonl").write_bytes(whole + fragment)
    backend = DirectoryBackend(tmp_path, "run", events_file="events.rank1.jsonl", new_folder=False)
    backend.write(_event(7))
    backend.close()
    assert backend.cut_on_open == len(fragment)
    lines = backend.path.read_bytes().splitlines(keepends=True)
    assert b"".join(lines[:2]) == whole
    assert [json.loads(line)["data"]["i"] for line in lines[2:]] == [7]  # not glued to the fragment


def test_a_file_that_is_one_torn_line_is_cut_to_empty(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "events.jsonl").write_bytes(b'{"event_ty')
    backend = DirectoryBackend(tmp_path, "run", new_folder=False)
    backend.close()
    assert (backend.cut_on_open, backend.path.read_bytes()) == (10, b"")


def test_a_sigkill_mid_write_cuts_a_line_only_at_a_page_boundary_and_reopening_mends_it(tmp_path: Path) -> None:
    # Linux copies a write() into the page cache page by page and stops at a page boundary when a fatal signal is
    # pending, so one os.write is not atomic against SIGKILL. A 64 MiB event takes the kernel milliseconds to copy:
    # the kill lands inside it, the file ends on a page boundary in the middle of that line, and the next open
    # cuts it back to the three whole events before it.
    page, torn = mmap.PAGESIZE, 0
    for trial in range(4):
        folder = tmp_path / f"t{trial}"
        folder.mkdir()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child is killed inside its last write
            backend = DirectoryBackend(tmp_path, folder.name, new_folder=False)
            for i in range(3):
                backend.write(_event(i, 100))
            backend.write(_event(3, 1 << 26))
            os._exit(0)
        path = folder / "events.jsonl"
        deadline = time.monotonic() + 60
        while line_bytes(path) <= 3 * 400 and time.monotonic() < deadline:  # the small lines are under 400 bytes
            pass
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raw = path.read_bytes()
        if not raw.endswith(b"\n"):
            torn += 1
            assert len(raw) % page == 0, f"trial {trial}: a line cut short at byte {len(raw)}, not a page boundary"
        reopened = DirectoryBackend(tmp_path, folder.name, new_folder=False)
        reopened.close()
        events = [json.loads(line) for line in reopened.path.read_bytes().splitlines()]
        assert [event["data"]["i"] for event in events] in ([0, 1, 2], [0, 1, 2, 3])
        assert reopened.cut_on_open == len(raw) - reopened.path.stat().st_size
    assert torn >= 2, f"only {torn} of 4 kills landed inside the 64 MiB write"


def line_bytes(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
