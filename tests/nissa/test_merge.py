"""Merging a sharded run's per-rank event files: single-process order, one copy of run-level events, one end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from esper.nissa.merge import MergeError, main, merge_events, merge_run_dir, rank_file_name, read_rank_file

START, ABSORB, ACT, UPDATE, END = 0, 2, 4, 6, 7


def event(kind: str, rank: int, order: tuple[int, ...], env_id: int = -1, **data: Any) -> dict[str, Any]:
    return {"event_type": kind, "env_id": env_id, "rank": rank, "order": list(order), "data": data}


def labels(events: list[dict[str, Any]]) -> list[str]:
    return [f"{e['event_type']}@{e['env_id']}" for e in events]


def test_events_are_merged_in_the_order_one_process_emits_them() -> None:
    # rank 0 runs envs 0-1, rank 1 runs env 2; in one epoch: absorb events per env, then action events per env
    rank0 = [
        event("TRAINING_STARTED", 0, (-1, 0, START, -1, 0)),
        event("TAMIYO_INITIATED", 0, (0, 1, ABSORB, 0, 0), env_id=0),
        event("SEED_GERMINATED", 0, (0, 1, ACT, 0, 0), env_id=0),
        event("EPOCH_COMPLETED", 0, (0, 1, ACT, 0, 1), env_id=0),
        event("EPOCH_COMPLETED", 0, (0, 1, ACT, 1, 0), env_id=1),
        event("PPO_UPDATE_COMPLETED", 0, (0, 1, UPDATE, -1, 0)),
    ]
    rank1 = [
        event("TRAINING_STARTED", 1, (-1, 0, START, -1, 0)),
        event("TAMIYO_INITIATED", 1, (0, 1, ABSORB, 2, 0), env_id=2),
        event("EPOCH_COMPLETED", 1, (0, 1, ACT, 2, 0), env_id=2),
        event("PPO_UPDATE_COMPLETED", 1, (0, 1, UPDATE, -1, 0)),
    ]
    merged = merge_events({1: rank1, 0: rank0})
    assert labels(merged) == [
        "TRAINING_STARTED@-1",
        "TAMIYO_INITIATED@0",
        "TAMIYO_INITIATED@2",
        "SEED_GERMINATED@0",
        "EPOCH_COMPLETED@0",
        "EPOCH_COMPLETED@1",
        "EPOCH_COMPLETED@2",
        "PPO_UPDATE_COMPLETED@-1",
    ]
    assert [e["rank"] for e in merged] == [0, 0, 1, 0, 0, 0, 1, 0]  # run-level events: rank 0's copy
    assert not any("order" in e for e in merged)


def test_a_run_level_event_only_a_surviving_rank_wrote_is_kept() -> None:
    rank0 = [event("TRAINING_STARTED", 0, (-1, 0, START, -1, 0))]  # rank 0 died before the update
    rank1 = [
        event("TRAINING_STARTED", 1, (-1, 0, START, -1, 0)),
        event("PPO_UPDATE_COMPLETED", 1, (0, 3, UPDATE, -1, 0)),
    ]
    merged = merge_events({0: rank0, 1: rank1})
    assert [(e["event_type"], e["rank"]) for e in merged] == [("TRAINING_STARTED", 0), ("PPO_UPDATE_COMPLETED", 1)]


def ended(rank: int, outcome: str, failed_rank: int | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"outcome": outcome}
    if failed_rank is not None:
        data["failed_rank"] = failed_rank
    return event("TRAINING_ENDED", rank, (1 << 30, 0, END, -1, 0), **data)


@pytest.mark.parametrize(
    ("ends", "kept"),
    [
        ({0: ended(0, "completed"), 1: ended(1, "completed")}, (0, "completed", None)),
        ({0: ended(0, "failed", 1), 1: ended(1, "failed", 1)}, (1, "failed", 1)),  # the failed rank's own report
        ({1: ended(1, "failed", 0)}, (1, "failed", 0)),  # rank 0 died without one: the survivor names it
        ({0: ended(0, "interrupted"), 1: ended(1, "failed", 1)}, (1, "failed", 1)),
    ],
    ids=["completed", "failed rank's own", "survivor names the dead rank", "a failure beats a stop"],
)
def test_the_stream_ends_with_exactly_one_training_ended(
    ends: dict[int, dict[str, Any]], kept: tuple[int, str, int | None]
) -> None:
    by_rank = {
        rank: [event("EPOCH_COMPLETED", rank, (0, 1, ACT, rank, 0), env_id=rank), end] for rank, end in ends.items()
    }
    merged = merge_events(by_rank)
    last = merged[-1]
    assert sum(e["event_type"] == "TRAINING_ENDED" for e in merged) == 1
    assert (last["rank"], last["data"]["outcome"], last["data"].get("failed_rank")) == kept


def write_rank(folder: Path, rank: int, events: list[dict[str, Any]]) -> None:
    lines = "".join(json.dumps(e) + "\n" for e in events)
    (folder / rank_file_name(rank)).write_text(lines, encoding="utf-8")


def test_merging_a_run_folder_writes_events_jsonl(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_rank(tmp_path, 0, [event("TRAINING_STARTED", 0, (-1, 0, START, -1, 0)), ended(0, "failed", 1)])
    write_rank(tmp_path, 1, [event("TRAINING_STARTED", 1, (-1, 0, START, -1, 0)), ended(1, "failed", 1)])
    result = merge_run_dir(tmp_path)
    assert (result.events, result.ranks, result.outcome, result.failed_rank) == (2, (0, 1), "failed", 1)
    lines = (tmp_path / "events.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["event_type"] for line in lines] == ["TRAINING_STARTED", "TRAINING_ENDED"]
    assert main([str(tmp_path)]) == 0
    assert "merged 2 events of ranks [0, 1]" in capsys.readouterr().out


def test_a_damaged_or_foreign_file_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / rank_file_name(0)).write_text('{"event_type": "X"}\n{not json\n', encoding="utf-8")
    with pytest.raises(MergeError, match=r"events.rank0.jsonl:1 has no merge key"):
        read_rank_file(tmp_path / rank_file_name(0))
    assert main([str(tmp_path)]) == 2
    assert main([str(tmp_path / "nowhere")]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 2 and all(line.startswith("merge: error: ") for line in errors)
