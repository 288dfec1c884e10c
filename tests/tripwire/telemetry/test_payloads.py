"""tripwire.telemetry.payloads: every event's field values digested, compared per context, failures named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tripwire.bitwise.trajectory import Trajectory
from tripwire.common.context import capture_context
from tripwire.common.errors import NoGoldenApplies
from tripwire.gates.goldens import GoldenStore
from tripwire.telemetry.payloads import (
    PayloadDivergence,
    compare_payloads,
    excluded,
    payload_digests,
    payload_trajectory,
)

CONTEXT = {"device": "cpu", "threads": 1}
WALL_CLOCK = ("event_id", "timestamp", "data.*_time_s", "data.timing")


def event(event_type: str, env_id: int = -1, *, stamp: int = 0, **data: Any) -> dict[str, Any]:
    return {
        "event_id": f"id-{stamp}",
        "timestamp": f"t{stamp}",
        "event_type": event_type,
        "env_id": env_id,
        "data": data,
    }


def run(stamp: int = 0, val_loss: float = 0.5, **extra: Any) -> list[dict[str, Any]]:
    """A small stream; `stamp` changes every id, timestamp and wall-clock field, nothing deterministic."""
    return [
        event("TRAINING_STARTED", stamp=stamp, seed=42),
        event("EPOCH_COMPLETED", 0, stamp=stamp, val_loss=0.7, seeds={"r0c1": {"alpha": 0.0}}),
        event("EPOCH_COMPLETED", 0, stamp=stamp, val_loss=val_loss, train_time_s=stamp * 0.1, **extra),
        event("ANALYTICS_SNAPSHOT", stamp=stamp, kind="throughput", timing={"step_ms": stamp * 3.0}),
    ]


def compared(golden: list[dict[str, Any]], now: list[dict[str, Any]], exclude: tuple[str, ...] = WALL_CLOCK) -> str:
    message = compare_payloads(
        payload_trajectory(golden, CONTEXT, exclude=exclude), payload_trajectory(now, CONTEXT, exclude=exclude)
    )
    return message or "identical"


def test_every_field_is_digested_under_its_dotted_path() -> None:
    digests = payload_digests(run()[1])
    assert {"event_type", "env_id", "data.val_loss", "data.seeds.r0c1.alpha"} <= set(digests)
    assert "event_id" not in digests and "timestamp" not in digests


def test_checkpoints_are_named_by_position_label_and_env() -> None:
    names = payload_trajectory(run(), CONTEXT).names()
    assert names == [
        "0001 TRAINING_STARTED",
        "0002 EPOCH_COMPLETED@env0",
        "0003 EPOCH_COMPLETED@env0",
        "0004 ANALYTICS_SNAPSHOT:throughput",
    ]


def test_an_excluded_pattern_covers_the_field_and_everything_below_it() -> None:
    assert excluded("data.train_time_s", WALL_CLOCK) and excluded("data.timing.step_ms", WALL_CLOCK)
    assert not excluded("data.val_loss", WALL_CLOCK) and not excluded("data.timings", WALL_CLOCK)


def test_a_dotted_key_beside_the_nested_path_it_spells_is_digested_too() -> None:
    """`{"loss.train": 1.0, "loss": {"train": 2.0}}`: both read `loss.train`; the later is `loss.train#2`, so a change
    to either is seen (the earlier was replaced and passed unseen)."""
    clash = {"loss.train": 1.0, "loss": {"train": 2.0}}
    golden = [event("X", **clash)]
    assert set(payload_digests(golden[0])) >= {"data.loss.train", "data.loss.train#2"}
    first = compared(golden, [event("X", **{**clash, "loss.train": 9.0})])
    assert "(X): field data.loss.train golden" in first
    later = compared(golden, [event("X", **{**clash, "loss": {"train": 9.0}})])
    assert "(X): field data.loss.train#2 golden" in later
    # an exclusion of the shared path leaves out both
    assert compared(golden, [event("X", **{"loss.train": 5.0, "loss": {"train": 6.0}})], ("data.loss",)) == "identical"


def test_excluded_fields_are_ignored_and_the_rest_is_bitwise_equal() -> None:
    assert compared(run(stamp=1), run(stamp=2)) == "identical"


def test_without_the_exclusions_a_wall_clock_field_fails() -> None:
    assert "field data.train_time_s golden" in compared(run(stamp=1), run(stamp=2), exclude=("event_id", "timestamp"))
    assert "field event_id golden" in compared(run(stamp=1), run(stamp=2), exclude=())


def test_a_changed_value_names_the_event_index_type_and_field() -> None:
    message = compared(run(val_loss=0.5), run(val_loss=0.5000001))
    first = message.splitlines()[0]
    assert first.startswith("telemetry payload diverged at event 3 of 4 (EPOCH_COMPLETED@env0): field data.val_loss ")
    assert "golden " in first and " now " in first and "absent" not in first
    assert "1 of 3 fields differ here: data.val_loss; 0 later events differ too" in message


def test_a_renamed_field_reads_absent_now() -> None:
    golden = run()
    now = [
        *golden[:2],
        {**golden[2], "data": {("val_los" if k == "val_loss" else k): v for k, v in golden[2]["data"].items()}},
    ]
    now.append(golden[3])
    message = compared(golden, now)
    assert "at event 3 of 4 (EPOCH_COMPLETED@env0): field data.val_loss golden " in message
    assert message.splitlines()[0].endswith(" now absent")
    assert "data.val_loss, data.val_los" in message


def test_an_added_or_reordered_event_names_both_labels() -> None:
    golden = run()
    now = [golden[0], event("SEED_GERMINATED", 0), *golden[1:]]
    message = compared(golden, now)
    assert message.startswith(
        "telemetry payload diverged at event 2 of 5: golden EPOCH_COMPLETED@env0, now SEED_GERMINATED@env0 "
        "(5 events, golden 4: events added or dropped)"
    )


def test_a_reordered_stream_says_the_number_of_events_is_unchanged() -> None:
    golden = run()
    message = compared(golden, [golden[0], golden[1], golden[3], golden[2]])
    assert message.startswith(
        "telemetry payload diverged at event 3 of 4: golden EPOCH_COMPLETED@env0, now ANALYTICS_SNAPSHOT:throughput "
    )
    assert "(as many events as the golden, 4: reordered or replaced)" in message


def test_updated_payload_golden_then_passes_and_a_change_fails(tmp_path: Path) -> None:
    context = capture_context("cpu")
    store = GoldenStore(tmp_path, update=True)
    assert store.check_payloads("s", run(stamp=1), context, exclude=WALL_CLOCK).status == "updated"
    written = list((tmp_path / "payloads" / "s").glob("cpu-*.json"))
    assert len(written) == 1 and Trajectory.load(written[0]).context == context
    assert GoldenStore(tmp_path).check_payloads("s", run(stamp=2), context, exclude=WALL_CLOCK).status == "passed"
    with pytest.raises(PayloadDivergence, match=r"at event 3 of 4 \(EPOCH_COMPLETED@env0\): field data.val_loss"):
        GoldenStore(tmp_path).check_payloads("s", run(val_loss=0.25), context, exclude=WALL_CLOCK)


def test_another_context_skips_with_the_differing_setting_and_the_same_status_as_trajectories(tmp_path: Path) -> None:
    context = capture_context("cpu")
    GoldenStore(tmp_path, update=True).check_payloads("s", run(), context, exclude=WALL_CLOCK)
    other = {**context, "threads": 99}
    outcome = GoldenStore(tmp_path).check_payloads("s", run(val_loss=0.25), other, exclude=WALL_CLOCK)
    assert outcome.status == "skipped"
    assert f"threads: {context['threads']!r} -> 99" in outcome.detail


def test_no_payload_golden_at_all_skips_with_the_update_command(tmp_path: Path) -> None:
    outcome = GoldenStore(tmp_path).check_payloads("s", run(), capture_context("cpu"))
    assert outcome.status == "skipped"
    assert "no payload golden" in outcome.detail and "nox -s baselines" in outcome.detail


def test_a_required_payload_golden_that_does_not_apply_fails_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(NoGoldenApplies, match=r"^telemetry payload golden for 's' cannot be checked") as failure:
        GoldenStore(tmp_path, require=True).check_payloads("s", run(), capture_context("cpu"))
    assert "\n" not in str(failure.value)
