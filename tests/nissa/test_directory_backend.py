"""DirectoryBackend: D/<run-name>/events.jsonl of complete JSON lines, _NNN suffixes, clear path errors."""

from __future__ import annotations

import json
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
