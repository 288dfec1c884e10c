"""Telemetry snapshots: reduce an event stream to per-type, per-round and per-env counts and one round's order.

Input is a list of event dicts (the `events.jsonl` wire form) or a path to an `events.jsonl` file (or a
directory holding exactly one). A malformed or partial line raises `TelemetryParseError` as
`path:line: what is wrong`. An event's label is its `event_type`, refined by a detail key of its payload
when present (`ANALYTICS_SNAPSHOT:throughput`), so distinct analytics kinds count separately.

Rounds are segments of the stream closed by a `round_end` label: the trainer's last per-round event, which
only the caller knows (esper's is `ANALYTICS_SNAPSHOT:throughput`; the pytest plugin reads it from the
`tripwire_round_end` ini option). Without one the whole stream is round 0; events after the last round end land
in a trailing segment. Sequence
entries of per-env events carry the env (`EPOCH_COMPLETED@2`), so a reordered env loop shows. The
snapshot (`TelemetryCounts.to_snapshot()`) has only string keys and int or string values, so syrupy's JSON
extension keeps every entry (it silently drops non-string keys). It also holds each label's payload schema
(`tripwire.telemetry.schema`: every field's dotted path and JSON types), so a renamed, dropped, added or retyped payload
field fails even when every count is unchanged.

Reading a failure (`diff_counts`): `SEED_PRUNED: 1 -> 0 (-1)` means one SEED_PRUNED event fewer than the
golden; `order of round 0 changed at position 7: golden EPOCH_COMPLETED, now ANALYTICS_SNAPSHOT:last_action`
means the events are the same in number but emitted in a different order; `schema of EPOCH_COMPLETED: field
data.val_loss dropped` means that field is in no EPOCH_COMPLETED event any more.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tripwire.common.errors import TelemetryParseError
from tripwire.telemetry.schema import Schema, diff_schema, payload_schema

EVENTS_FILE = "events.jsonl"
DEFAULT_DETAIL_KEYS = ("kind",)


def _events_path(path: Path) -> Path:
    """The events file itself, or the single `events.jsonl` below a directory."""
    if not path.is_dir():
        return path
    found = sorted(path.rglob(EVENTS_FILE))
    if len(found) != 1:
        raise TelemetryParseError(f"{path}: expected exactly one {EVENTS_FILE} below it, found {len(found)}")
    return found[0]


def load_events(source: str | Path) -> list[dict[str, Any]]:
    """Parse an events.jsonl file (or a directory holding one); errors name `path:line`."""
    path = _events_path(Path(source))
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise TelemetryParseError(f"{path}: cannot read events file ({error.strerror})") from None
    except UnicodeDecodeError:
        raise TelemetryParseError(f"{path}: not UTF-8 text: not an events file") from None
    events: list[dict[str, Any]] = []
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if number == len(lines):
            raise TelemetryParseError(
                f"{path}:{number}: partial last line (no newline): the writer was killed mid-write; "
                "delete that line or record the run again"
            )
        try:
            event = json.loads(line)
        except json.JSONDecodeError as error:
            raise TelemetryParseError(f"{path}:{number}: malformed JSON ({error.msg}, column {error.colno})") from None
        except RecursionError:
            raise TelemetryParseError(f"{path}:{number}: JSON nested too deeply to be an event") from None
        if not isinstance(event, dict) or not isinstance(event.get("event_type"), str):
            raise TelemetryParseError(f"{path}:{number}: not an event (needs a JSON object with a string event_type)")
        events.append(event)
    return events


def event_label(event: Mapping[str, Any], detail_keys: Sequence[str] = DEFAULT_DETAIL_KEYS) -> str:
    """`event_type`, plus `:<detail>` when the payload carries one of `detail_keys`."""
    label = str(event["event_type"])
    data = event.get("data")
    if isinstance(data, Mapping):
        for key in detail_keys:
            if isinstance(data.get(key), str):
                return f"{label}:{data[key]}"
    return label


@dataclass(frozen=True)
class TelemetryCounts:
    """Counts of one event stream: total, per label, per round segment, per env, one round's order, the schema."""

    total: int
    by_type: dict[str, int]
    by_round: dict[str, dict[str, int]]
    by_env: dict[str, dict[str, int]]
    sequence_round: int
    sequence: list[str] = field(default_factory=list)
    schema: Schema = field(default_factory=dict)

    def to_snapshot(self) -> dict[str, Any]:
        """The golden form: string keys, plain ints and type strings only, keys sorted (safe for syrupy's JSON)."""
        return {
            "total": int(self.total),
            "by_type": _sorted_counts(self.by_type),
            "by_round": {k: _sorted_counts(v) for k, v in sorted(self.by_round.items(), key=_numeric_key)},
            "by_env": {k: _sorted_counts(v) for k, v in sorted(self.by_env.items(), key=_numeric_key)},
            f"sequence_round_{self.sequence_round}": list(self.sequence),
            "schema": {label: dict(fields) for label, fields in sorted(self.schema.items())},
        }


def _sorted_counts(counts: Mapping[str, int]) -> dict[str, int]:
    return {str(k): int(v) for k, v in sorted(counts.items())}


def _numeric_key(item: tuple[str, Any]) -> tuple[int, str]:
    """Sort `"10"` after `"9"`; non-numeric keys (`run`) first."""
    key = item[0]
    return (int(key), key) if key.lstrip("-").isdigit() else (-(10**9), key)


def reduce_events(
    events: Iterable[Mapping[str, Any]] | str | Path,
    *,
    round_end: str | None = None,
    sequence_round: int = 0,
    detail_keys: Sequence[str] = DEFAULT_DETAIL_KEYS,
) -> TelemetryCounts:
    """Reduce events (dicts, or a path to events.jsonl) to `TelemetryCounts`."""
    items = load_events(events) if isinstance(events, (str, Path)) else list(events)
    by_type: Counter[str] = Counter()
    by_round: dict[str, Counter[str]] = {}
    by_env: dict[str, Counter[str]] = {}
    sequence: list[str] = []
    labels: list[str] = []
    segment = 0
    for event in items:
        label = event_label(event, detail_keys)
        labels.append(label)
        by_type[label] += 1
        by_round.setdefault(str(segment), Counter())[label] += 1
        env = event.get("env_id", -1)
        env_key = "run" if env is None or env == -1 else str(env)
        by_env.setdefault(env_key, Counter())[label] += 1
        if segment == sequence_round:
            sequence.append(label if env_key == "run" else f"{label}@{env_key}")
        if label == round_end:
            segment += 1
    return TelemetryCounts(
        total=len(items),
        by_type=dict(by_type),
        by_round={k: dict(v) for k, v in by_round.items()},
        by_env={k: dict(v) for k, v in by_env.items()},
        sequence_round=sequence_round,
        sequence=sequence,
        schema=payload_schema(items, labels),
    )


def diff_counts(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> list[str]:
    """Readable differences between two snapshots: changed type counts, per round/env, order, then schema."""
    lines = _diff_table("", expected.get("by_type", {}), actual.get("by_type", {}))
    for section in ("by_round", "by_env"):
        want, got = expected.get(section, {}), actual.get(section, {})
        for key in sorted(set(want) | set(got), key=lambda k: _numeric_key((k, None))):
            name = "round" if section == "by_round" else "env"
            lines.extend(_diff_table(f"{name} {key}: ", want.get(key, {}), got.get(key, {})))
    lines.extend(_diff_sequences(expected, actual))
    if "schema" in expected or "schema" in actual:
        lines.extend(diff_schema(expected.get("schema"), actual.get("schema", {})))
    return lines


def _diff_table(prefix: str, want: Mapping[str, int], got: Mapping[str, int]) -> list[str]:
    """`prefix LABEL: a -> b (+d)` for each label whose count differs."""
    lines = []
    for label in sorted(set(want) | set(got)):
        a, b = int(want.get(label, 0)), int(got.get(label, 0))
        if a != b:
            lines.append(f"{prefix}{label}: {a} -> {b} ({b - a:+d})")
    return lines


def _diff_sequences(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> list[str]:
    """The first position where a recorded round's event order differs."""
    lines = []
    for key in sorted(k for k in expected if k.startswith("sequence_round_")):
        want, got = list(expected.get(key, [])), list(actual.get(key, []))
        round_name = key.removeprefix("sequence_round_")
        for position, (a, b) in enumerate(zip(want, got), start=1):
            if a != b:
                lines.append(f"order of round {round_name} changed at position {position}: golden {a}, now {b}")
                break
        else:
            if len(want) != len(got):
                lines.append(f"round {round_name} has {len(got)} events, golden {len(want)}")
    return lines
