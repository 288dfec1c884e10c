"""The JSON Schema of `events.jsonl`: one object per line, its `data` fixed per event type.

`EVENT_SCHEMA` is the contract, written out field by field; `python -m esper.nissa.event_schema` prints it as
JSON (the copy shipped in the package, `events.schema.json`, must equal it; a test checks). The tests validate
real runs against it, so a payload that gains, loses or retypes a field fails until this file says so.

Conventions of the wire form (`TelemetryEvent.to_json_dict`): enums are written by name; a non-finite float is
written as the string "nan", "inf" or "-inf"; `epoch` is the epoch within an episode for per-env events and
the round index for per-round events. A run sharded over torch.distributed ranks adds `rank` (the rank that
emitted the event) to every line, and its per-rank files `order` (the merge key); TRAINING_ENDED of a run in
which a rank failed adds `failed_rank`, and one whose merge dropped damaged per-rank lines adds `dropped_lines`
and `dropped_from`.

Usage from any language: validate each line against the schema (draft 2020-12). From Python:
`esper.nissa.event_schema.validate_line(line)` raises `jsonschema.ValidationError` naming the field.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

from esper.leyline import TelemetryEventType

SCHEMA_FILE = Path(__file__).with_name("events.schema.json")
SCHEMA_ID = "https://esper-tripwire.invalid/schemas/events.schema.json"

INT: dict[str, Any] = {"type": "integer"}
STR: dict[str, Any] = {"type": "string"}
BOOL: dict[str, Any] = {"type": "boolean"}
NULL: dict[str, Any] = {"type": "null"}
# A float on the wire: a number, or "nan" / "inf" / "-inf" for a non-finite value.
NUM: dict[str, Any] = {"anyOf": [{"type": "number"}, {"enum": ["nan", "inf", "-inf"]}]}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, NULL]}


def array(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


def mapping(values: dict[str, Any]) -> dict[str, Any]:
    """An object whose keys vary (slot ids, op names) and whose values all follow `values`."""
    return {"type": "object", "additionalProperties": values}


def record(**fields: dict[str, Any]) -> dict[str, Any]:
    """An object with exactly these fields, all present."""
    return {"type": "object", "properties": fields, "required": sorted(fields), "additionalProperties": False}


def with_optional(schema: dict[str, Any], **fields: dict[str, Any]) -> dict[str, Any]:
    """`schema` (a record) that may also carry these fields."""
    return {**schema, "properties": {**schema["properties"], **fields}}


SEED_SUMMARY = record(
    stage=STR,
    blueprint=nullable(STR),
    alpha=NUM,
    accuracy_delta=nullable(NUM),
    grad_norm=nullable(NUM),
    interaction_sum=NUM,
)
ROUND_SUMMARY_FIELDS: dict[str, dict[str, Any]] = {
    "round_idx": INT,
    "episodes_completed": INT,
    "mean_reward": NUM,
    "mean_final_accuracy": NUM,
    "rolling_accuracy": NUM,
    "env_final_accuracies": array(NUM),
    "env_total_rewards": array(NUM),
    "rollbacks": INT,
    "train_time_s": NUM,
    "env_epochs_per_s": NUM,
}
TREND = record(delta=NUM, rolling_accuracy=NUM)
PPO_ANOMALY = record(explained_variance=NUM)  # every PPO anomaly event carries the update's explained variance
NEVER_EMITTED: dict[str, Any] = {"type": "object"}  # declared for compatibility with the original; not emitted

ANALYTICS_KINDS: dict[str, dict[str, Any]] = {
    "last_action": record(
        kind={"const": "last_action"},
        op=STR,
        effective_op=STR,
        slot_id=STR,
        heads=array(INT),
        valid=BOOL,
        success=BOOL,
        reward=NUM,
        reward_components=mapping(NUM),
        value=NUM,
        op_confidence=NUM,
        op_entropy=NUM,
    ),
    "batch_stats": record(kind={"const": "batch_stats"}, **ROUND_SUMMARY_FIELDS),
    "action_distribution": record(kind={"const": "action_distribution"}, op_counts=mapping(INT)),
    "throughput": record(
        kind={"const": "throughput"},
        timer={"enum": ["cuda_event", "perf_counter"]},
        epochs=INT,
        step_time_ms=NUM,
        fps=NUM,
        env_epochs_per_s=NUM,
        samples_per_s=NUM,
    ),
}

DATA: dict[TelemetryEventType, dict[str, Any]] = {
    TelemetryEventType.TRAINING_STARTED: record(
        controller=STR,
        task=STR,
        n_envs=INT,
        max_epochs=INT,
        n_episodes=INT,
        rounds=INT,
        host_params=INT,
        slot_ids=array(STR),
        seed=INT,
        lr=NUM,
        clip_ratio=NUM,
        entropy_coef=NUM,
        param_budget=INT,
        reward_mode=STR,
        amp=STR,
        compile=STR,
        compile_mode=STR,
        device=STR,
        train_samples_per_env=INT,
        batch_size_per_env=INT,
        determinism=record(
            requested=BOOL,
            algorithms=BOOL,
            cudnn_deterministic=BOOL,
            cudnn_benchmark=BOOL,
            cublas_workspace_config=STR,
        ),
    ),
    TelemetryEventType.CHECKPOINT_LOADED: record(path=STR, rounds_completed=INT, previous_events=nullable(STR)),
    TelemetryEventType.EPOCH_COMPLETED: record(
        env_id=INT,
        round=INT,
        inner_epoch=INT,
        train_loss=NUM,
        train_accuracy=NUM,
        val_loss=NUM,
        val_accuracy=NUM,
        host_grad_norm=NUM,
        seeds=mapping(SEED_SUMMARY),
    ),
    TelemetryEventType.TAMIYO_INITIATED: record(val_accuracy=NUM),
    TelemetryEventType.COUNTERFACTUAL_MATRIX_COMPUTED: record(
        config_accuracies=array(NUM),
        contributions=mapping(NUM),
        all_off_accuracy=nullable(NUM),
        committed_accuracy=NUM,
        interactions=mapping(NUM),
    ),
    TelemetryEventType.GOVERNOR_ROLLBACK: record(reason=STR, pruned_seeds=array(STR), rollbacks=INT),
    TelemetryEventType.SEED_GERMINATED: record(
        blueprint_id=STR,
        params=INT,
        style=STR,
        algorithm=STR,
        tempo=STR,
        blend_tempo_epochs=INT,
        alpha_target=NUM,
    ),
    TelemetryEventType.SEED_STAGE_CHANGED: record(
        **{"from": STR, "to": STR}, age_epochs=INT, epochs_in_stage=INT, alpha=NUM, blueprint_id=STR
    ),
    TelemetryEventType.SEED_GATE_EVALUATED: record(gate=STR, passed=BOOL, reason=STR, from_stage=STR, target_stage=STR),
    TelemetryEventType.SEED_FOSSILIZED: record(
        blueprint_id=STR, params_added=INT, alpha=NUM, contribution=nullable(NUM), age_epochs=INT
    ),
    TelemetryEventType.SEED_PRUNED: record(
        reason=STR,
        auto_pruned=BOOL,
        blueprint_id=STR,
        params_removed=INT,
        contribution=nullable(NUM),
        age_epochs=INT,
        stage_before=STR,
    ),
    TelemetryEventType.EPISODE_OUTCOME: record(
        env_id=INT,
        episode=INT,
        final_accuracy=NUM,
        total_reward=NUM,
        fossilized=INT,
        op_counts=mapping(INT),
        stability=NUM,
        rollbacks=INT,
        outcome_type={"enum": ["success", "timeout"]},
    ),
    TelemetryEventType.PPO_UPDATE_COMPLETED: record(
        policy_loss=NUM,
        value_loss=NUM,
        entropy=NUM,
        entropy_per_head=mapping(NUM),
        grad_norm=NUM,
        kl_divergence=NUM,
        clip_fraction=NUM,
        explained_variance=NUM,
        nan_grad_count=INT,
        early_stopped=BOOL,
        skipped=BOOL,
        entropy_coef=NUM,
        update_time_ms=NUM,
        ratio_max=NUM,
        ratio_min=NUM,
        advantage_mean=NUM,
        advantage_std=NUM,
        return_mean=NUM,
        value_mean=NUM,
        lr=NUM,
        epochs=INT,
    ),
    TelemetryEventType.RATIO_EXPLOSION_DETECTED: PPO_ANOMALY,
    TelemetryEventType.RATIO_COLLAPSE_DETECTED: PPO_ANOMALY,
    TelemetryEventType.VALUE_COLLAPSE_DETECTED: PPO_ANOMALY,
    TelemetryEventType.NUMERICAL_INSTABILITY_DETECTED: PPO_ANOMALY,
    TelemetryEventType.GRADIENT_PATHOLOGY_DETECTED: PPO_ANOMALY,
    TelemetryEventType.IMPROVEMENT_DETECTED: TREND,
    TelemetryEventType.DEGRADATION_DETECTED: TREND,
    TelemetryEventType.PLATEAU_DETECTED: TREND,
    TelemetryEventType.BATCH_EPOCH_COMPLETED: record(**ROUND_SUMMARY_FIELDS),
    TelemetryEventType.ANALYTICS_SNAPSHOT: {"oneOf": [{"$ref": f"#/$defs/analytics_{k}"} for k in ANALYTICS_KINDS]},
    TelemetryEventType.TRAINING_ENDED: with_optional(
        record(
            outcome={"enum": ["completed", "interrupted", "failed"]},
            rounds_completed=INT,
            discarded_round=nullable(INT),
            stopped_after_epoch=nullable(INT),
            cause=nullable(STR),
        ),
        failed_rank=INT,
        dropped_lines=INT,  # a sharded run's merge that dropped damaged per-rank lines: how many
        dropped_from=array(STR),  # and each one, "events.rank<r>.jsonl:<line> (<why>)"
    ),
    TelemetryEventType.GRADIENT_ANOMALY: NEVER_EMITTED,
    TelemetryEventType.PERFORMANCE_DEGRADATION: NEVER_EMITTED,
    TelemetryEventType.MEMORY_WARNING: NEVER_EMITTED,
    TelemetryEventType.ISOLATION_VIOLATION: NEVER_EMITTED,
}


def _event(event_type: TelemetryEventType) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "event_id": STR,
            "event_type": {"const": event_type.name},
            "timestamp": STR,  # ISO 8601, UTC
            "env_id": INT,  # -1 for run- and round-level events
            "seed_id": nullable(STR),
            "slot_id": nullable(STR),
            "epoch": nullable(INT),
            "group_id": STR,
            "message": STR,
            "severity": {"enum": ["debug", "info", "warning", "error", "critical"]},
            "data": {"$ref": f"#/$defs/data_{event_type.name}"},
            "rank": INT,  # sharded runs only
            "order": array(INT),  # per-rank files of a sharded run only: [round, epoch, phase, env_id, sequence]
        },
        "required": [
            "data", "env_id", "epoch", "event_id", "event_type", "group_id", "message", "seed_id", "severity",
            "slot_id", "timestamp",
        ],
        "additionalProperties": False,
    }  # fmt: skip


def build_schema() -> dict[str, Any]:
    missing = [t.name for t in TelemetryEventType if t not in DATA]
    if missing:
        raise AssertionError(f"event types without a payload schema: {', '.join(missing)}")
    defs: dict[str, Any] = {f"data_{t.name}": DATA[t] for t in TelemetryEventType}
    defs.update({f"analytics_{kind}": schema for kind, schema in ANALYTICS_KINDS.items()})
    defs.update({f"event_{t.name}": _event(t) for t in TelemetryEventType})
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "esper events.jsonl line",
        "description": "One telemetry event; `event_type` selects the shape of `data`.",
        "oneOf": [{"$ref": f"#/$defs/event_{t.name}"} for t in TelemetryEventType],
        "$defs": defs,
    }


EVENT_SCHEMA = build_schema()


def schema_text() -> str:
    return json.dumps(EVENT_SCHEMA, indent=2, sort_keys=True) + "\n"


def validate_line(line: str | dict[str, Any]) -> None:
    """Validate one events.jsonl line (text or parsed) against the event type's schema; needs `jsonschema`."""
    import jsonschema  # a test dependency; the trainer itself never validates

    event = json.loads(line) if isinstance(line, str) else line
    event_type = event.get("event_type") if isinstance(event, dict) else None
    if event_type not in TelemetryEventType.__members__:
        raise jsonschema.ValidationError(f"unknown event_type {event_type!r}")
    error = jsonschema.exceptions.best_match(_validator(event_type).iter_errors(event))
    if error is not None:
        raise error


@functools.cache
def _validator(event_type: str) -> Any:
    """One compiled validator per event type (building one per line made validating a run take a minute)."""
    import jsonschema

    schema = {"$ref": f"#/$defs/event_{event_type}", "$defs": EVENT_SCHEMA["$defs"]}
    return jsonschema.Draft202012Validator(schema)


if __name__ == "__main__":
    sys.stdout.write(schema_text())
