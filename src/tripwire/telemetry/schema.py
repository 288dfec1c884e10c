"""Telemetry payload schemas: per event label, every field's dotted path and the JSON types seen there.

An event (a wire dict) is walked field by field. Each path maps to the union of the JSON types of the values
seen at it over every event of the label (`null`, `bool`, `int`, `float`, `str`, `list`, `object`), joined
with `|` in sorted order (`float|null`). Objects are flattened with dots, members included, whatever their
keys: a payload keyed by data (slot ids, op names) reads `data.seeds.r0c1.stage: str`, so which slots report
and which ops were counted are part of the schema, as deterministic as the event counts beside them. The
elements of a list are typed under `path[]` (`data.heads: list`, `data.heads[]: int`); an empty list types
the list only. A key holding a dot is not escaped. The schema holds types, never values, so it does not
depend on float numerics and lives in the telemetry snapshot (`TelemetryCounts.to_snapshot()["schema"]`).

Reading a failure (`diff_schema`), one line per change, the event label and the field named:

    schema of EPOCH_COMPLETED: field data.val_loss dropped
    schema of EPOCH_COMPLETED: field data.val_los added
    schema of EPOCH_COMPLETED: field data.epoch int -> str

A dropped or added object is named once, with the count of fields below it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tripwire.common.errors import update_command

Schema = dict[str, dict[str, str]]  # {event label: {dotted field path: "type|type"}}


def json_type(value: Any) -> str:
    """The JSON type name of a decoded value (`bool` before `int`: a bool is no number on the wire)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, (list, tuple)):
        return "list"
    return type(value).__name__


def join_path(prefix: str, key: Any) -> str:
    """`prefix.key`, or `key` at the top level."""
    return f"{prefix}.{key}" if prefix else str(key)


def _collect_types(path: str, value: Any, out: dict[str, set[str]]) -> None:
    """Add the type of `value` at `path`, then the types below it (members, list elements)."""
    out.setdefault(path, set()).add(json_type(value))
    if isinstance(value, Mapping):
        for key, item in value.items():
            _collect_types(join_path(path, key), item, out)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _collect_types(f"{path}[]", item, out)


def field_types(events: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """`{dotted path: "type|type"}` over `events` (all of one label), paths sorted."""
    seen: dict[str, set[str]] = {}
    for event in events:
        for key, value in event.items():
            _collect_types(str(key), value, seen)
    return {path: "|".join(sorted(types)) for path, types in sorted(seen.items())}


def payload_schema(events: Iterable[Mapping[str, Any]], labels: Sequence[str]) -> Schema:
    """The schema of each label: `labels[i]` is the label of the i-th event
    (`tripwire.telemetry.counts.event_label`)."""
    by_label: dict[str, list[Mapping[str, Any]]] = {}
    for event, label in zip(events, labels, strict=True):
        by_label.setdefault(label, []).append(event)
    return {label: field_types(items) for label, items in sorted(by_label.items())}


def _fields(count: int) -> str:
    return f"{count} field" if count == 1 else f"{count} fields"


def _below(path: str, parents: set[str]) -> bool:
    """True when `path` lies under one of `parents` (`a.b` or `a[]` under `a`)."""
    return any(path.startswith((f"{parent}.", f"{parent}[]")) for parent in parents if parent != path)


def _named_once(label: str, paths: set[str], change: str) -> list[str]:
    """One line per top-most path of `paths`, with the number of changed fields below it."""
    lines = []
    for path in sorted(paths):
        if _below(path, paths):
            continue
        inner = sum(1 for other in paths if _below(other, {path}))
        suffix = f" (with {_fields(inner)} below it)" if inner else ""
        lines.append(f"schema of {label}: field {path} {change}{suffix}")
    return lines


def diff_schema(expected: Mapping[str, Mapping[str, str]] | None, actual: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Readable schema changes, per label in sorted order: dropped fields, added fields, then retyped ones."""
    if expected is None:
        return [f"the golden has no payload schema (recorded before schemas were): record it with {update_command()}"]
    lines: list[str] = []
    for label in sorted(set(expected) | set(actual)):
        if label not in actual:
            lines.append(f"schema of {label}: no event of this type now (golden: {_fields(len(expected[label]))})")
            continue
        if label not in expected:
            lines.append(f"schema of {label}: new event type ({_fields(len(actual[label]))})")
            continue
        want, got = expected[label], actual[label]
        lines.extend(_named_once(label, set(want) - set(got), "dropped"))
        lines.extend(_named_once(label, set(got) - set(want), "added"))
        for path in sorted(set(want) & set(got)):
            if want[path] != got[path]:
                lines.append(f"schema of {label}: field {path} {want[path]} -> {got[path]}")
    return lines
