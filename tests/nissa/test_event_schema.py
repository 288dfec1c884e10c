"""events.jsonl's JSON Schema: shipped with the package, complete, and true of real runs (and it catches drift)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from esper.leyline import TelemetryEventType
from esper.nissa.event_schema import EVENT_SCHEMA, SCHEMA_FILE, schema_text, validate_line
from esper.simic.training.config import TrainingConfig
from esper.simic.training.vectorized import run_training

TINY = {"n_envs": 2, "max_epochs": 4, "train_samples": 50, "val_samples": 25, "batch_size": 25}
SMALL_POLICY = {"hidden_dim": 16, "lstm_hidden_dim": 16}


def test_the_shipped_schema_file_is_the_declared_schema() -> None:
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema_text(), (
        "events.schema.json is stale: regenerate it with python -m esper.nissa.event_schema > "
        "src/esper/nissa/events.schema.json"
    )
    jsonschema.Draft202012Validator.check_schema(json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))


def test_every_event_type_has_a_payload_schema() -> None:
    assert {f"data_{t.name}" for t in TelemetryEventType} <= set(EVENT_SCHEMA["$defs"])


def _events(telemetry: Path) -> list[dict[str, Any]]:
    lines = []
    for path in sorted(telemetry.rglob("events.jsonl")):
        lines += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return lines


class StopAfterFirstEpoch:
    def __init__(self) -> None:
        self.polls = 0

    def __call__(self) -> bool:
        self.polls += 1
        return self.polls > 1


@pytest.fixture(scope="module")
def real_events(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Events of real runs that between them emit nearly every event type: a PPO run saved and resumed, a
    lifecycle-heavy heuristic run, a run whose host loss turns NaN (a rollback), and an interrupted run."""
    root = tmp_path_factory.mktemp("schema")
    telemetry, checkpoint = str(root / "tel"), str(root / "ck.pt")
    ppo = {**TINY, **SMALL_POLICY, "telemetry_dir": telemetry}
    run_training(TrainingConfig.from_dict({**ppo, "n_episodes": 2, "save_path": checkpoint, "run_name": "ppo"}))
    resumed = {**ppo, "n_episodes": 3, "resume_path": checkpoint, "save_path": checkpoint, "run_name": "resumed"}
    run_training(TrainingConfig.from_dict(resumed))
    lifecycle = {**TINY, "n_envs": 4, "max_epochs": 8, "slots": ["r0c0", "r0c1", "r0c2"], "telemetry_dir": telemetry}
    run_training(
        TrainingConfig.from_dict({**lifecycle, "n_episodes": 2, "run_name": "lifecycle"}), controller="heuristic"
    )
    nan = {**ppo, "n_episodes": 1, "inject_nan_epoch": 2, "run_name": "nan"}
    run_training(TrainingConfig.from_dict(nan))
    stopped = {**ppo, "n_episodes": 2, "run_name": "stopped"}
    run_training(TrainingConfig.from_dict(stopped), stop=StopAfterFirstEpoch())
    return _events(Path(telemetry))


def test_every_line_of_real_runs_matches_the_schema(real_events: list[dict[str, Any]]) -> None:
    for event in real_events:
        validate_line(event)
    seen = {event["event_type"] for event in real_events}
    emitted_here = {t.name for t in TelemetryEventType} - {
        "GRADIENT_ANOMALY",  # the four declared-but-never-emitted types
        "PERFORMANCE_DEGRADATION",
        "MEMORY_WARNING",
        "ISOLATION_VIOLATION",
    }
    assert len(seen) >= 15 and seen <= emitted_here, sorted(emitted_here - seen)
    assert {e["data"]["outcome"] for e in real_events if e["event_type"] == "TRAINING_ENDED"} == {
        "completed",
        "interrupted",
    }


def test_epoch_events_carry_the_round_and_a_resumed_run_links_to_the_first(real_events: list[dict[str, Any]]) -> None:
    epochs = [e for e in real_events if e["event_type"] == "EPOCH_COMPLETED"]
    assert {e["data"]["round"] for e in epochs} == {0, 1, 2}
    [loaded] = [e for e in real_events if e["event_type"] == "CHECKPOINT_LOADED"]
    assert loaded["data"]["previous_events"].endswith("/ppo/events.jsonl")
    assert Path(loaded["data"]["previous_events"]).is_file()


def test_a_renamed_or_retyped_field_fails_validation_naming_it(real_events: list[dict[str, Any]]) -> None:
    epoch = next(e for e in real_events if e["event_type"] == "EPOCH_COMPLETED")
    renamed = copy.deepcopy(epoch)
    renamed["data"]["validation_loss"] = renamed["data"].pop("val_loss")
    with pytest.raises(jsonschema.ValidationError, match="val_loss"):
        validate_line(renamed)
    retyped = copy.deepcopy(epoch)
    retyped["data"]["round"] = "0"
    with pytest.raises(jsonschema.ValidationError, match="'0' is not of type 'integer'"):
        validate_line(json.dumps(retyped))
    with pytest.raises(jsonschema.ValidationError, match="unknown event_type 'EPOCH_DONE'"):
        validate_line({**epoch, "event_type": "EPOCH_DONE"})
