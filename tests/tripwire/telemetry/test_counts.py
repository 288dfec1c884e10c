"""tripwire.telemetry.counts: event streams reduce to counts per type, round and env, and one round's order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tripwire.common.errors import TelemetryParseError
from tripwire.telemetry.counts import diff_counts, event_label, load_events, reduce_events


def event(event_type: str, env_id: int = -1, **data: Any) -> dict[str, Any]:
    return {"event_type": event_type, "env_id": env_id, "data": data}


ROUND_END = "ANALYTICS_SNAPSHOT:throughput"  # the label closing each round of this made-up stream


def two_rounds() -> list[dict[str, Any]]:
    round_events = [
        event("EPOCH_COMPLETED", 0),
        event("EPOCH_COMPLETED", 1),
        event("SEED_GERMINATED", 1),
        event("PPO_UPDATE_COMPLETED"),
        event("ANALYTICS_SNAPSHOT", kind="throughput"),
    ]
    return [event("TRAINING_STARTED"), *round_events, *round_events]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(lines), encoding="utf-8")
    return path


def test_counts_per_type_round_and_env() -> None:
    counts = reduce_events(two_rounds(), round_end=ROUND_END)
    assert counts.total == 11
    assert counts.by_type["EPOCH_COMPLETED"] == 4
    assert counts.by_round["0"]["TRAINING_STARTED"] == 1 and "TRAINING_STARTED" not in counts.by_round["1"]
    assert counts.by_round["1"]["SEED_GERMINATED"] == 1
    assert counts.by_env["1"] == {"EPOCH_COMPLETED": 2, "SEED_GERMINATED": 2}
    assert counts.by_env["run"]["PPO_UPDATE_COMPLETED"] == 2


def test_payload_kind_refines_the_label() -> None:
    assert event_label(event("ANALYTICS_SNAPSHOT", kind="throughput")) == "ANALYTICS_SNAPSHOT:throughput"
    assert event_label(event("EPOCH_COMPLETED", 0)) == "EPOCH_COMPLETED"


def test_sequence_of_one_round_carries_the_env_of_per_env_events() -> None:
    counts = reduce_events(two_rounds(), round_end=ROUND_END, sequence_round=1)
    assert counts.sequence == [
        "EPOCH_COMPLETED@0",
        "EPOCH_COMPLETED@1",
        "SEED_GERMINATED@1",
        "PPO_UPDATE_COMPLETED",
        "ANALYTICS_SNAPSHOT:throughput",
    ]


def test_snapshot_has_only_string_keys_and_int_values() -> None:
    snapshot = reduce_events(two_rounds(), round_end=ROUND_END).to_snapshot()
    assert json.loads(json.dumps(snapshot)) == snapshot
    assert all(isinstance(k, str) for section in snapshot["by_env"].values() for k in section)
    assert all(type(v) is int for v in snapshot["by_type"].values())


def test_events_load_from_a_jsonl_file_or_its_directory(tmp_path: Path) -> None:
    run_dir = tmp_path / "run_1"
    run_dir.mkdir()
    write_lines(run_dir / "events.jsonl", [json.dumps(e) + "\n" for e in two_rounds()])
    assert reduce_events(run_dir / "events.jsonl").total == 11
    assert load_events(tmp_path) == two_rounds()


def test_malformed_line_is_named_by_path_and_line(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "events.jsonl", [json.dumps(event("A")) + "\n", '{"event_type": \n', "\n"])
    with pytest.raises(TelemetryParseError, match=r"events\.jsonl:2: malformed JSON"):
        load_events(path)


def test_partial_last_line_is_named_by_path_and_line(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "events.jsonl", [json.dumps(event("A")) + "\n", '{"event_type": "B"'])
    with pytest.raises(TelemetryParseError, match=r"events\.jsonl:2: partial last line"):
        load_events(path)


def test_line_without_event_type_is_refused(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "events.jsonl", ['{"type": "A"}\n'])
    with pytest.raises(TelemetryParseError, match=r"events\.jsonl:1: not an event"):
        load_events(path)


def test_diff_names_the_event_type_whose_count_changed() -> None:
    golden = reduce_events(two_rounds(), round_end=ROUND_END).to_snapshot()
    dropped = reduce_events(
        [e for e in two_rounds() if e["event_type"] != "SEED_GERMINATED"], round_end=ROUND_END
    ).to_snapshot()
    lines = diff_counts(golden, dropped)
    assert lines[0] == "SEED_GERMINATED: 2 -> 0 (-2)"
    assert "env 1: SEED_GERMINATED: 2 -> 0 (-2)" in lines


def test_diff_names_the_first_reordered_position() -> None:
    events = two_rounds()
    swapped = [events[0], events[2], events[1], *events[3:]]
    lines = diff_counts(reduce_events(events).to_snapshot(), reduce_events(swapped).to_snapshot())
    assert lines == ["order of round 0 changed at position 2: golden EPOCH_COMPLETED@0, now EPOCH_COMPLETED@1"]


def test_without_a_round_end_the_whole_stream_is_one_round() -> None:
    counts = reduce_events(two_rounds())
    assert list(counts.by_round) == ["0"] and counts.by_round["0"]["EPOCH_COMPLETED"] == 4
