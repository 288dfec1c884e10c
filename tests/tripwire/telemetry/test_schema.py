"""tripwire.telemetry.schema: each event label's fields and JSON types, and changes to them named by label and field."""

from __future__ import annotations

import json
from typing import Any

from tripwire.telemetry.counts import diff_counts, reduce_events
from tripwire.telemetry.schema import diff_schema, field_types
from tripwire.telemetry.snapshot import TelemetrySnapshotExtension


def epoch(env: int = 0, **data: Any) -> dict[str, Any]:
    payload = {"val_loss": 0.5, "epoch": 1, "seeds": {"r0c1": {"stage": "TRAINING", "alpha": 0.0}}, **data}
    return {"event_type": "EPOCH_COMPLETED", "env_id": env, "data": payload}


def stream(**data: Any) -> list[dict[str, Any]]:
    return [{"event_type": "TRAINING_STARTED", "env_id": -1, "data": {"seed": 42}}, epoch(0), epoch(1, **data)]


def renamed(event: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    data = {(new if key == old else key): value for key, value in event["data"].items()}
    return {**event, "data": data}


def schema_lines(golden: list[dict[str, Any]], now: list[dict[str, Any]]) -> list[str]:
    return diff_counts(reduce_events(golden).to_snapshot(), reduce_events(now).to_snapshot())


def test_nested_objects_flatten_to_dotted_paths_with_their_json_types() -> None:
    types = field_types([epoch()])
    assert types["data.seeds.r0c1.stage"] == "str"
    assert types["data.seeds.r0c1.alpha"] == "float"
    assert types["data.epoch"] == "int" and types["env_id"] == "int"
    assert types["data"] == types["data.seeds"] == types["data.seeds.r0c1"] == "object"


def test_list_elements_are_typed_under_the_list_path() -> None:
    types = field_types([{"heads": [0, 4, 1], "pruned": [], "rows": [{"id": "a"}]}])
    assert types["heads"] == "list" and types["heads[]"] == "int"
    assert types["pruned"] == "list" and "pruned[]" not in types
    assert types["rows[].id"] == "str"


def test_a_field_that_varies_gets_the_union_of_its_types() -> None:
    types = field_types([epoch(grad_norm=None), epoch(grad_norm=1.5), epoch(grad_norm=True)])
    assert types["data.grad_norm"] == "bool|float|null"


def test_the_schema_is_per_label_and_part_of_the_snapshot() -> None:
    snapshot = reduce_events([*stream(), {"event_type": "ANALYTICS_SNAPSHOT", "data": {"kind": "throughput"}}])
    schema = snapshot.to_snapshot()["schema"]
    assert set(schema) == {"ANALYTICS_SNAPSHOT:throughput", "EPOCH_COMPLETED", "TRAINING_STARTED"}
    assert schema["TRAINING_STARTED"]["data.seed"] == "int"
    assert json.loads(json.dumps(schema)) == schema


def test_a_renamed_field_with_unchanged_counts_is_named_dropped_and_added() -> None:
    golden = stream()
    now = [golden[0], renamed(golden[1], "val_loss", "val_los"), renamed(golden[2], "val_loss", "val_los")]
    assert schema_lines(golden, now) == [
        "schema of EPOCH_COMPLETED: field data.val_loss dropped",
        "schema of EPOCH_COMPLETED: field data.val_los added",
    ]


def test_a_dropped_field_is_named() -> None:
    golden = stream()
    now = [golden[0], *({**e, "data": {k: v for k, v in e["data"].items() if k != "val_loss"}} for e in golden[1:])]
    assert schema_lines(golden, now) == ["schema of EPOCH_COMPLETED: field data.val_loss dropped"]


def test_a_field_added_to_one_event_is_named() -> None:
    assert schema_lines(stream(), stream(lr=3e-4)) == ["schema of EPOCH_COMPLETED: field data.lr added"]


def test_a_retyped_field_is_named_with_both_types() -> None:
    assert schema_lines(stream(), stream(epoch="1")) == ["schema of EPOCH_COMPLETED: field data.epoch int -> int|str"]
    everywhere = [stream()[0], epoch(0, epoch="1"), epoch(1, epoch="1")]
    assert schema_lines(stream(), everywhere) == ["schema of EPOCH_COMPLETED: field data.epoch int -> str"]


def test_a_renamed_object_is_named_once_with_the_fields_below_it() -> None:
    golden = stream()
    now = [golden[0], *(renamed(e, "seeds", "slots") for e in golden[1:])]
    assert schema_lines(golden, now) == [
        "schema of EPOCH_COMPLETED: field data.seeds dropped (with 3 fields below it)",
        "schema of EPOCH_COMPLETED: field data.slots added (with 3 fields below it)",
    ]


def test_a_golden_recorded_before_schemas_says_to_record_one() -> None:
    golden = reduce_events(stream()).to_snapshot()
    del golden["schema"]
    assert diff_counts(golden, reduce_events(stream()).to_snapshot()) == [
        "the golden has no payload schema (recorded before schemas were): record it with nox -s baselines"
    ]
    assert diff_schema({"A": {"x": "int"}}, {}) == ["schema of A: no event of this type now (golden: 1 field)"]


def test_the_snapshot_diff_starts_with_the_schema_summary() -> None:
    golden = json.dumps(reduce_events(stream()).to_snapshot(), indent=2)
    now = json.dumps(reduce_events(stream(epoch="1")).to_snapshot(), indent=2)
    lines = list(TelemetrySnapshotExtension().diff_lines(now, golden))
    assert lines[:2] == [
        "telemetry changed (golden -> now):",
        "  schema of EPOCH_COMPLETED: field data.epoch int -> int|str",
    ]
