"""Telemetry payload values: a digest of every field of every event, compared with a context-bound golden.

`payload_trajectory(events, context, exclude=...)` turns an event stream into a
`tripwire.bitwise.trajectory.Trajectory`: one checkpoint per event, named `0007 EPOCH_COMPLETED@env0` (1-based position,
label, env for per-env events), mapping each field's dotted path (objects flattened as in `tripwire.telemetry.schema`; a
list is one field) to the `tripwire.bitwise.digest.value_digest` of its value, floats by their IEEE bytes. Fields that
differ from run to run however deterministic the trainer is are left out: ids and timestamps by default
(`DEFAULT_EXCLUDED`); a trainer adds its wall-clock fields (durations, rates) and run-location fields (file paths). A
pattern is a dotted path matched with `fnmatch` (so `data.*_ms` works) against a field and every object above it, in
events of every type; `LABEL::PATH` limits it to events whose label matches `LABEL` (`charts/SPS::data.*`). Values
depend on float numerics, so payload goldens are keyed by determinism context like trajectory goldens
(`GoldenStore.check_payloads`, `baselines/payloads/<scenario>/<context key>.json`).

Reading a failure (`PayloadDivergence`), the first differing event and field named (digests shortened here;
the message shows 16 hex characters):

    telemetry payload diverged at event 3 of 22 (EPOCH_COMPLETED@env0): field data.train_loss golden c17b.. now 8893..
      5 of 31 fields differ here: data.train_loss, data.train_accuracy, ...; 16 later events differ too

`now absent` means the field is no longer in that event (dropped or renamed: the telemetry schema says which);
`golden EPOCH_COMPLETED@env0, now ANALYTICS_SNAPSHOT:last_action@env0` means events were added, dropped or
reordered up to that position (the telemetry counts and order say which).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any

import torch

from tripwire.bitwise.digest import leaf_value, short, value_digest
from tripwire.bitwise.magnitude import Magnitude, classify, spacing
from tripwire.bitwise.trajectory import Trajectory, TrajectoryReport, compare_trajectories
from tripwire.common.errors import GuardrailFailure
from tripwire.common.names import distinct, excluded
from tripwire.telemetry.counts import DEFAULT_DETAIL_KEYS, event_label
from tripwire.telemetry.schema import join_path

DEFAULT_EXCLUDED = ("event_id", "timestamp")


class PayloadDivergence(GuardrailFailure):
    """Telemetry payload values differ from their golden; the message names the event, its type and the field."""


def _leaves(prefix: str, value: Any, out: list[tuple[str, Any]]) -> None:
    """Flatten objects into `out` by dotted path; lists, scalars and empty objects are leaves."""
    if isinstance(value, Mapping) and value:
        for key, item in value.items():
            _leaves(join_path(prefix, key), item, out)
    else:
        out.append((prefix, value))


def event_fields(event: Mapping[str, Any]) -> dict[str, Any]:
    """An event's leaves by dotted path (see `_leaves`): what digests, values and exclude patterns read. A path two
    leaves share (a key `"a.b"` beside `a` -> `b`) is numbered on the later one, `a.b#2`, so neither is lost."""
    fields: list[tuple[str, Any]] = []
    for key, value in event.items():
        _leaves(str(key), value, fields)
    return dict(zip(distinct([path for path, _ in fields]), (value for _, value in fields)))


def patterns_for(label: str, exclude: Sequence[str]) -> list[str]:
    """The field patterns of `exclude` that apply to events labelled `label` (plain ones, and `LABEL::PATH` ones
    whose label glob matches)."""
    plain = [pattern for pattern in exclude if "::" not in pattern]
    scoped = [pattern.split("::", 1) for pattern in exclude if "::" in pattern]
    return plain + [path for glob, path in scoped if fnmatchcase(label, glob)]


def payload_digests(
    event: Mapping[str, Any],
    exclude: Sequence[str] = DEFAULT_EXCLUDED,
    detail_keys: Sequence[str] = DEFAULT_DETAIL_KEYS,
) -> dict[str, str]:
    """`{dotted field path: digest}` of one event's values, excluded fields left out."""
    fields = event_fields(event)
    patterns = patterns_for(event_label(event, detail_keys), exclude)
    return {path: value_digest(value) for path, value in fields.items() if not excluded(path, patterns)}


def event_name(position: int, event: Mapping[str, Any], detail_keys: Sequence[str] = DEFAULT_DETAIL_KEYS) -> str:
    """`0007 EPOCH_COMPLETED@env0`: 1-based position, label, and the env of a per-env event."""
    env = event.get("env_id", -1)
    where = "" if env is None or env == -1 else f"@env{env}"
    return f"{position:04d} {event_label(event, detail_keys)}{where}"


def payload_trajectory(
    events: Iterable[Mapping[str, Any]],
    context: Mapping[str, Any],
    *,
    exclude: Sequence[str] = DEFAULT_EXCLUDED,
    detail_keys: Sequence[str] = DEFAULT_DETAIL_KEYS,
) -> Trajectory:
    """One checkpoint per event, `{field: digest}`, stamped with the determinism context it was recorded in."""
    checkpoints = [
        (event_name(position, event, detail_keys), payload_digests(event, exclude, detail_keys))
        for position, event in enumerate(events, start=1)
    ]
    return Trajectory(checkpoints, dict(context))


def payload_values(
    events: Iterable[Mapping[str, Any]],
    *,
    exclude: Sequence[str] = DEFAULT_EXCLUDED,
    detail_keys: Sequence[str] = DEFAULT_DETAIL_KEYS,
) -> dict[str, dict[str, torch.Tensor]]:
    """The numbers behind `payload_trajectory`'s digests, named alike: `{event: {field: tensor}}` for every field
    that holds a number or a list of numbers, so a differing field can be measured (`tripwire.bitwise.magnitude`:
    a logged Python float is counted in float32 ULPs, the precision of the tensor it usually came from)."""
    values: dict[str, dict[str, torch.Tensor]] = {}
    for position, event in enumerate(events, start=1):
        fields = event_fields(event)
        patterns = patterns_for(event_label(event, detail_keys), exclude)
        kept = {
            path: tensor
            for path, value in fields.items()
            if not isinstance(value, str) and not excluded(path, patterns) and (tensor := leaf_value(value)) is not None
        }
        if kept:
            values[event_name(position, event, detail_keys)] = kept
    return values


def unmatched_patterns(events: Iterable[Mapping[str, Any]], exclude: Sequence[str]) -> list[str]:
    """The `exclude` patterns that left out no field of any event: a typo'd field or label excludes nothing, and
    the wall-clock field it meant still differs between two runs."""
    waiting = list(dict.fromkeys(exclude))
    for event in events:
        if not waiting:
            break
        fields = event_fields(event)
        label = event_label(event)
        waiting = [
            pattern for pattern in waiting if not any(excluded(path, patterns_for(label, [pattern])) for path in fields)
        ]
    return waiting


def _label(name: str) -> str:
    """`EPOCH_COMPLETED@env0` from the checkpoint name `0007 EPOCH_COMPLETED@env0`."""
    return name.split(" ", 1)[-1]


def format_payload_report(
    report: TrajectoryReport, golden: Trajectory, current: Trajectory, labels: tuple[str, str] = ("golden", "now")
) -> str:
    """The failure message for a payload comparison: first differing event, its type and field (`labels` name the
    two sides)."""
    old, new = labels
    head = f"telemetry payload diverged at event {report.first_index} of {report.total}"
    later = f"{report.later_divergences} later events differ too"
    where = f" ({report.source})" if report.source else ""
    if report.structure:
        index = (report.first_index or 1) - 1
        want = _label(golden.checkpoints[index][0]) if index < len(golden) else "no event"
        got = _label(current.checkpoints[index][0]) if index < len(current) else "no event"
        if len(current) == len(golden):
            side = "the golden" if old == "golden" else old
            why = f"as many events as {side}, {len(golden)}: reordered or replaced"
        else:
            why = f"{len(current)} events, {old} {len(golden)}: events added or dropped"
        return f"{head}: {old} {want}, {new} {got} ({why})\n  {later}{where}"
    now = "absent" if report.actual_digest == "<absent>" else short(report.actual_digest)
    was = "absent" if report.expected_digest == "<absent>" else short(report.expected_digest)
    shown = ", ".join(report.differing_tensors[:6]) + (", ..." if len(report.differing_tensors) > 6 else "")
    return "\n".join(
        [
            f"{head} ({_label(report.first_name)}): field {report.first_tensor} {old} {was} {new} {now}",
            f"  {len(report.differing_tensors)} of {report.tensors_in_checkpoint} fields differ here: {shown}; "
            f"{later}{where}",
        ]
    )


def compare_payloads(
    golden: Trajectory, current: Trajectory, *, source: str = "", labels: tuple[str, str] = ("golden", "now")
) -> str | None:
    """None when every event's payload digests match the golden's, else the failure message."""
    report = compare_trajectories(golden, current, source=source)
    return None if report.ok else format_payload_report(report, golden, current, labels)


def check_payloads(golden: Trajectory, current: Trajectory, *, source: str = "") -> None:
    """Raise `PayloadDivergence` naming the first differing event and field when the payloads differ."""
    message = compare_payloads(golden, current, source=source)
    if message is not None:
        raise PayloadDivergence(message)


def _field(checkpoint: str, name: str) -> tuple[str, str]:
    """A payload field across the run: its event type (`EPOCH_COMPLETED` of `0007 EPOCH_COMPLETED@env0`) and name."""
    return _label(checkpoint).split("@", 1)[0], name


def field_scales(*sides: Mapping[str, Mapping[str, torch.Tensor]]) -> dict[tuple[str, str], float]:
    """Each numeric payload field's largest finite magnitude over every event of the run, on either side."""
    scales: dict[tuple[str, str], float] = {}
    for values in sides:
        for checkpoint, kept in values.items():
            for name in kept:
                value = kept[name]
                if value.is_floating_point() and value.numel():
                    finite = value.abs().nan_to_num(0.0, posinf=0.0, neginf=0.0)
                    key = _field(checkpoint, name)
                    scales[key] = max(scales.get(key, 0.0), float(finite.max()))
    return scales


def payload_magnitude(
    magnitude: Magnitude, checkpoint: str, a: Mapping[str, Mapping[str, torch.Tensor]], b: Mapping[str, Any]
) -> Magnitude:
    """The first differing event's magnitude with the trajectory's rule applied as to a tensor: a field's values
    over the run are its elements, so a difference is measured against the field's scale (its largest magnitude in
    any event), not against the one logged number, which may sit near zero where a regrouped sum moves it by many of
    its own ULPs (a reward or an advantage mean). Kind and size then agree with the trajectory's on the same change."""
    scales = field_scales(a, b)
    deltas = []
    for delta in magnitude.deltas:
        scale = scales.get(_field(checkpoint, delta.name), 0.0)
        if delta.floating and scale > 0.0:
            delta = dataclasses.replace(delta, scale_ulps=delta.max_abs / spacing(scale, torch.float32))
        deltas.append(delta)
    return dataclasses.replace(magnitude, deltas=tuple(deltas), kind=classify(deltas))
