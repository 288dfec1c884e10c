"""Telemetry contracts: event types, levels and the event record every backend receives."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum, IntEnum, auto
from typing import Any


class TelemetryEventType(Enum):
    """Event types the trainer emits (JAN's set, in declaration order)."""

    SEED_GERMINATED = auto()
    SEED_STAGE_CHANGED = auto()
    SEED_GATE_EVALUATED = auto()
    SEED_FOSSILIZED = auto()
    SEED_PRUNED = auto()
    EPOCH_COMPLETED = auto()
    BATCH_EPOCH_COMPLETED = auto()
    PLATEAU_DETECTED = auto()
    DEGRADATION_DETECTED = auto()
    IMPROVEMENT_DETECTED = auto()
    TAMIYO_INITIATED = auto()
    GRADIENT_ANOMALY = auto()
    PERFORMANCE_DEGRADATION = auto()
    PPO_UPDATE_COMPLETED = auto()
    MEMORY_WARNING = auto()
    RATIO_EXPLOSION_DETECTED = auto()
    RATIO_COLLAPSE_DETECTED = auto()
    VALUE_COLLAPSE_DETECTED = auto()
    GRADIENT_PATHOLOGY_DETECTED = auto()
    NUMERICAL_INSTABILITY_DETECTED = auto()
    GOVERNOR_ROLLBACK = auto()
    TRAINING_STARTED = auto()
    CHECKPOINT_LOADED = auto()
    COUNTERFACTUAL_MATRIX_COMPUTED = auto()
    ANALYTICS_SNAPSHOT = auto()
    EPISODE_OUTCOME = auto()
    ISOLATION_VIOLATION = auto()
    TRAINING_ENDED = auto()  # every run's last event: completed, interrupted (with the discarded round) or failed


LIFECYCLE_EVENT_TYPES = frozenset(
    {
        TelemetryEventType.SEED_GERMINATED,
        TelemetryEventType.SEED_STAGE_CHANGED,
        TelemetryEventType.SEED_GATE_EVALUATED,
        TelemetryEventType.SEED_FOSSILIZED,
        TelemetryEventType.SEED_PRUNED,
    }
)


class TelemetryLevel(IntEnum):
    """`--telemetry-level off|minimal|normal|debug`."""

    OFF = 0
    MINIMAL = 1
    NORMAL = 2
    DEBUG = 3


class AnalyticsKind(str, Enum):
    """`kind` of an ANALYTICS_SNAPSHOT payload."""

    LAST_ACTION = "last_action"
    BATCH_STATS = "batch_stats"
    ACTION_DISTRIBUTION = "action_distribution"
    SUMMARY_TABLE = "summary_table"
    THROUGHPUT = "throughput"
    REWARD_SUMMARY = "reward_summary"
    MASK_HIT_RATES = "mask_hit_rates"
    HEURISTIC_EPISODE = "heuristic_episode"


# The minimum level at which each event type is emitted. Unlisted types need MINIMAL.
EVENT_LEVEL: dict[TelemetryEventType, TelemetryLevel] = {
    TelemetryEventType.EPOCH_COMPLETED: TelemetryLevel.NORMAL,
    TelemetryEventType.ANALYTICS_SNAPSHOT: TelemetryLevel.NORMAL,
    TelemetryEventType.COUNTERFACTUAL_MATRIX_COMPUTED: TelemetryLevel.NORMAL,
    TelemetryEventType.SEED_GATE_EVALUATED: TelemetryLevel.NORMAL,
}


def _jsonable(value: Any) -> Any:
    """Make a payload value JSON-safe and deterministic (non-finite floats become strings)."""
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)


# `data` keys that carry wall-clock measurements (PPO update time, round time, throughput): the only payload
# values that differ between two runs with the same seed. Determinism checks drop them.
WALL_CLOCK_DATA_KEYS: frozenset[str] = frozenset(
    {"update_time_ms", "train_time_s", "env_epochs_per_s", "step_time_ms", "fps", "samples_per_s"}
)


@dataclass(frozen=True)
class TelemetryEvent:
    """One telemetry event. Between equal runs only `event_id`, `timestamp` and the wall-clock measurements
    named in `WALL_CLOCK_DATA_KEYS` differ.

    `env_id` is -1 for run-level events; `epoch` is the inner epoch for per-epoch events and the round
    index for per-round events. `rank` and `order` are set only in a run sharded over torch.distributed ranks:
    the rank that emitted the event, and its merge key (round, epoch, phase, env, sequence) that puts the
    ranks' events back in the order one process emits them; a single-process run's lines carry neither.
    """

    event_type: TelemetryEventType
    data: dict[str, Any] = field(default_factory=dict)
    env_id: int = -1
    epoch: int | None = None
    seed_id: str | None = None
    slot_id: str | None = None
    severity: str = "info"
    message: str = ""
    group_id: str = "default"
    event_id: str = ""
    timestamp: str = ""
    rank: int | None = None
    order: tuple[int, ...] | None = None

    def to_json_dict(self) -> dict[str, Any]:
        """The wire form: one JSON object per events.jsonl line, `event_type` as the enum name."""
        wire = {
            "event_id": self.event_id,
            "event_type": self.event_type.name,
            "timestamp": self.timestamp,
            "env_id": self.env_id,
            "seed_id": self.seed_id,
            "slot_id": self.slot_id,
            "epoch": self.epoch,
            "group_id": self.group_id,
            "message": self.message,
            "severity": self.severity,
            "data": _jsonable(self.data),
        }
        if self.rank is not None:
            wire["rank"] = self.rank
        if self.order is not None:
            wire["order"] = list(self.order)
        return wire
