"""Trajectories: ordered, named checkpoints of bitwise digests, recorded during a run and compared to a golden.

A recorder collects checkpoints such as `r0/e1/env0/train` (weights after an env's train pass),
`r0/e1/actions`, `r0/e1/rewards` or `r0/policy` (policy after the update). Each checkpoint maps tensor
names to digests (see `tripwire.bitwise.digest`) and to specs (`float32[64,4]`: dtype and shape, `float`, `list[3]`).
Comparing two trajectories walks them in order and names the FIRST checkpoint whose digests differ and, inside
it, what changed: structure (tensors added, removed, renamed with the same digest, reshaped or retyped) apart from
values. Everything after a first divergence usually differs too, so only a count of later divergences is given.

Reading a failure (`TrajectoryReport.format()`):

    trajectory diverged at checkpoint 3 of 21, 'r0/e2/env0/train' (18 later checkpoints differ too)
      structure: renamed critic.0.weight -> value.0.weight; added value.2.bias (float32[1])
      first tensor: 'model.host.conv1.weight'  golden 1f0c3a5e9b2d7c41  now 8e77b0d2c9a1f3e5
      2 of 14 tensors differ: model.host.conv1.weight, model.host.conv1.bias
      magnitude: low-bit drift: max |Δ| 2.4e-09 = 3 ULP (1 of scale) in 2 tensor(s)

The magnitude line appears when both sides kept their values (`TrajectoryRecorder(keep_values=True)`, a result of
`python -m tripwire run`): see `tripwire.bitwise.magnitude` for the rule. Goldens carry the determinism context they
were recorded in (`tripwire.common.context`); see `tripwire.gates.goldens` for the file layout and the
skip-on-context-mismatch rule.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tripwire.bitwise.digest import leaf_record, leaf_records, leaf_spec, leaf_value, leaves, short, value_digest
from tripwire.bitwise.fields import an_object, object_state
from tripwire.bitwise.magnitude import Magnitude, checkpoint_deltas, classify, growth_point
from tripwire.bitwise.tensor_diff import TensorChanges, tensor_changes
from tripwire.bitwise.values import Values, load_values, save_values
from tripwire.common.errors import GoldenFileError, TrajectoryDivergence, TripwireError, read_golden_json
from tripwire.common.files import write_text
from tripwire.common.names import listed, matching
from tripwire.sync import ignore_syncs

__all__ = ["Trajectory", "TrajectoryRecorder", "TrajectoryReport", "compare_trajectories", "load_values", "save_values"]

FORMAT = "tripwire-trajectory/2"  # 2 adds each checkpoint's specs; format 1 (digests only) still loads
FORMATS = ("tripwire-trajectory/1", FORMAT)
STORED_CHARS = 16  # digests are stored shortened: 64 bits per tensor is ample to detect a change
VALUES_FILE_SUFFIX = ".values.pt"
KEEP_VALUES_VARIABLE = "TRIPWIRE_KEEP_VALUES"
GROWTH_POINTS = 8


def checkpoint_entries(
    value: Any, keep: bool = False, exclude: Sequence[str] = (), matched: set[str] | None = None
) -> list[tuple[str, str, str, torch.Tensor | None]]:
    """`(tensor name, digest, spec, kept value)` of each leaf of a checkpoint's value (a tensor, module, generator,
    mapping or plain value); the value, a detached CPU copy (`leaf_value`), only with `keep`, else None. A leaf of a
    mapping whose name (or a name above it) matches a glob of `exclude` is left out; each pattern that left out a
    leaf is added to `matched`."""
    if isinstance(value, torch.nn.Module):
        value = value.state_dict()
    elif an_object(value):  # an object's fields, each a named leaf (`tripwire.bitwise.fields`)
        value = object_state(value)
    if isinstance(value, Mapping) and value:
        named = leaves("", value)
        if exclude:
            named = _kept(named, exclude, set() if matched is None else matched)
        records = leaf_records([leaf for _, leaf in named], keep)
        return [(name, *record) for (name, _), record in zip(named, records)]
    if isinstance(value, torch.Generator):
        return [("state", value_digest(value), leaf_spec(value), leaf_value(value) if keep else None)]
    if isinstance(value, torch.Tensor):
        return [("value", *leaf_record(value, keep))]
    return [("value", value_digest(value), leaf_spec(value), leaf_value(value) if keep else None)]


def _kept(named: list[tuple[str, Any]], exclude: Sequence[str], matched: set[str]) -> list[tuple[str, Any]]:
    kept = []
    for name, leaf in named:
        hits = matching(name, exclude)
        if hits:
            matched.update(hits)
        else:
            kept.append((name, leaf))
    return kept


def digest_value(value: Any) -> dict[str, str]:
    """`{tensor name: digest}` of a tensor, module, generator, mapping, sequence or plain value."""
    with ignore_syncs():
        return {name: digest for name, digest, _, _ in checkpoint_entries(value)}


@dataclass
class Trajectory:
    """An ordered list of `(checkpoint name, {tensor name: digest})`, their specs, and where it was recorded."""

    checkpoints: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)
    specs: dict[str, dict[str, str]] = field(default_factory=dict)  # checkpoint name -> {tensor name: spec}
    # The values behind the digests, when kept (`TrajectoryRecorder(keep_values=True)`, or a golden's
    # `<file>.values.pt` beside it): comparisons then say how big a difference is. Never part of the JSON form.
    values: Values | None = field(default=None, compare=False, repr=False)

    def names(self) -> list[str]:
        """Checkpoint names in recording order."""
        return [name for name, _ in self.checkpoints]

    def __len__(self) -> int:
        return len(self.checkpoints)

    def __iter__(self) -> Iterator[tuple[str, dict[str, str]]]:
        return iter(self.checkpoints)

    def select(self, prefix: str) -> Trajectory:
        """The checkpoints whose name starts with `prefix` (e.g. one round: `r1/`)."""
        kept = [(n, d) for n, d in self.checkpoints if n.startswith(prefix)]
        return Trajectory(kept, dict(self.context), {n: self.specs[n] for n, _ in kept if n in self.specs})

    def to_json(self) -> dict[str, Any]:
        """The golden-file form: format tag, context, and checkpoints with shortened digests (and specs)."""
        rows: list[list[Any]] = []
        for name, digests in self:
            row: list[Any] = [name, {k: v[:STORED_CHARS] for k, v in digests.items()}]
            if self.specs.get(name):
                row.append(dict(self.specs[name]))
            rows.append(row)
        return {"format": FORMAT, "context": dict(sorted(self.context.items())), "checkpoints": rows}

    @classmethod
    def from_json(cls, data: Any, source: str = "<json>") -> Trajectory:
        """Parse the golden-file form; raises `GoldenFileError` naming `source` when malformed."""
        if not isinstance(data, Mapping) or data.get("format") not in FORMATS:
            raise GoldenFileError(f'{source}: not a trajectory golden (expected "format": "{FORMAT}")')
        raw = data.get("checkpoints")
        if not isinstance(raw, list) or not all(_is_checkpoint(item) for item in raw):
            raise GoldenFileError(
                f"{source}: 'checkpoints' must be a list of [name, {{tensor: digest}}, {{tensor: spec}}?] rows"
            )
        context = data.get("context", {})
        specs = {str(item[0]): dict(item[2]) for item in raw if len(item) == 3}
        return cls(
            [(str(item[0]), dict(item[1])) for item in raw],
            dict(context) if isinstance(context, Mapping) else {},
            specs,
        )

    @classmethod
    def load(cls, path: str | Path) -> Trajectory:
        """Read a golden file; missing or malformed files raise `GoldenFileError` naming the path."""
        path = Path(path)
        data = read_golden_json(path, "trajectory golden does not exist")
        return cls.from_json(data, source=str(path))

    def save(self, path: str | Path) -> Path:
        """Write the golden form: one checkpoint per line, so a diff shows which checkpoints changed."""
        path = Path(path)
        data = self.to_json()
        lines = [
            "{",
            f'  "format": {json.dumps(data["format"])},',
            f'  "context": {json.dumps(data["context"], sort_keys=True)},',
            '  "checkpoints": [',
        ]
        rows = [f"    {json.dumps(item)}" for item in data["checkpoints"]]
        lines.append(",\n".join(rows))
        lines.extend(["  ]", "}"])
        write_text(path, "\n".join(lines) + "\n")  # whole or not at all: a golden is never left half-written
        return path


def _is_checkpoint(item: Any) -> bool:
    """True for a `[name, {tensor: digest}]` or `[name, {tensor: digest}, {tensor: spec}]` row of strings."""
    if not (isinstance(item, list) and len(item) in (2, 3) and isinstance(item[0], str)):
        return False
    maps = item[1:]
    return all(isinstance(m, Mapping) and all(isinstance(v, str) for v in m.values()) for m in maps)


class TrajectoryRecorder:
    """Records named checkpoints in order: `recorder.record("r0/e1/env0/train", model)`.

    `keep_values=True` also keeps a CPU copy of every number, so a comparison with another run of this machine
    can say how big a difference is (`tripwire.bitwise.magnitude`); past `values_limit_bytes` only digests are kept. The
    default follows the environment variable `TRIPWIRE_KEEP_VALUES` (`1`: keep), which `nox -s guardrails --
    --against REF` sets for both the base's and this tree's runs.
    """

    def __init__(
        self,
        context: Mapping[str, Any] | None = None,
        *,
        keep_values: bool | None = None,
        values_limit_bytes: int = 512 * 2**20,
    ) -> None:
        self.trajectory = Trajectory(context=dict(context or {}))
        self.keep_values = os.environ.get(KEEP_VALUES_VARIABLE) == "1" if keep_values is None else keep_values
        self.values: dict[str, dict[str, torch.Tensor]] = {}
        if self.keep_values:
            self.trajectory.values = self.values
        self.values_limit_bytes = values_limit_bytes
        self.values_bytes = 0
        self.values_truncated_at = ""  # the first checkpoint whose values were not kept (over the limit)
        self._seen: set[str] = set()
        self.excluded_by: set[str] = set()  # the `exclude` patterns of `record` that left out a leaf

    def record(self, name: str, value: Any, exclude: Sequence[str] = ()) -> dict[str, str]:
        """Digest `value` under checkpoint `name` (names must be unique), leaving out the leaves `exclude` names
        (globs on leaf names: `return.train_time`, `self.start_time`, `*time*`); returns the digests. The patterns
        that left out a leaf are added to `excluded_by`."""
        if name in self._seen:
            raise TripwireError(f"checkpoint {name!r} recorded twice: give each checkpoint a unique name")
        self._seen.add(name)
        with ignore_syncs():  # the probe's own torch calls: not counted, nor paid for under the counting modes
            keep = self.keep_values and not self.values_truncated_at
            entries = checkpoint_entries(value, keep, exclude, self.excluded_by)
            digests = {tensor: digest for tensor, digest, _, _ in entries}
            self.trajectory.checkpoints.append((name, digests))
            self.trajectory.specs[name] = {tensor: spec for tensor, _, spec, _ in entries}
            if keep:
                self._keep(name, {tensor: kept for tensor, _, _, kept in entries if kept is not None})
        return digests

    def _keep(self, name: str, kept: dict[str, torch.Tensor]) -> None:
        size = sum(v.numel() * v.element_size() for v in kept.values())
        if self.values_bytes + size > self.values_limit_bytes:
            self.values_truncated_at = name
            return
        self.values_bytes += size
        self.values[name] = kept

    def __len__(self) -> int:
        return len(self.trajectory)


@dataclass(frozen=True)
class TrajectoryReport:
    """Outcome of `compare_trajectories`; `format()` names the first divergence."""

    total: int
    first_index: int | None = None
    first_name: str = ""
    first_tensor: str = ""
    expected_digest: str = ""
    actual_digest: str = ""
    differing_tensors: tuple[str, ...] = ()
    tensors_in_checkpoint: int = 0
    later_divergences: int = 0
    structure: str = ""  # a missing/extra/renamed checkpoint, when that is the first difference
    source: str = ""
    changes: TensorChanges | None = None  # inside the first diverging checkpoint: structure apart from values
    magnitude: Magnitude | None = None  # how big the value difference is, when both sides kept values
    # the first diverging checkpoint's plain values (not tensors: a setting, a count) that differ: (name, A, B)
    plain: tuple[tuple[str, str, str], ...] = ()

    @property
    def ok(self) -> bool:
        """True when both trajectories are bitwise identical, checkpoint for checkpoint."""
        return self.first_index is None

    @property
    def kind(self) -> str:
        """`identical`, `checkpoints` (added, dropped or reordered), `structure`, `low-bit drift`, `value change`,
        or `values` (values differ, magnitude unknown)."""
        if self.ok:
            return "identical"
        if self.structure:
            return "checkpoints"
        if self.changes is not None and self.changes.structural and not self.changes.changed:
            return "structure"
        return self.magnitude.kind if self.magnitude is not None and self.magnitude.deltas else "values"

    def format(self, labels: tuple[str, str] = ("golden", "now")) -> str:
        """Human-readable report; the first line names the first diverging checkpoint. `labels` name the two sides
        (`("A", "B")` for two results)."""
        where = f" ({self.source})" if self.source else ""
        if self.ok:
            return f"trajectory identical over {self.total} checkpoints{where}"
        head = (
            f"trajectory diverged at checkpoint {self.first_index} of {self.total}, {self.first_name!r}"
            f" ({self.later_divergences} later checkpoints differ too){where}"
        )
        if self.structure:
            return f"{head}\n  {self.structure}"
        lines = [head]
        if self.changes is not None and self.changes.structural:
            lines.append(f"  structure: {self.changes.format_structure()}")
        changed = self.changes.changed if self.changes is not None else self.differing_tensors
        if changed:
            shown = ", ".join(changed[:8]) + (", ..." if len(changed) > 8 else "")
            first = changed[0]
            lines.append(
                f"  first tensor: {first!r}  {labels[0]} {short(self.expected_digest)}"
                f"  {labels[1]} {short(self.actual_digest)}"
            )
            lines.append(f"  {len(changed)} of {self.tensors_in_checkpoint} tensors differ: {shown}")
        if self.plain:
            lines.append(f"  plain values that differ: {format_plain(self.plain)}")
        if self.magnitude is not None:
            lines.extend(self.magnitude.format())
        return "\n".join(lines)

    def raise_if_diverged(self) -> None:
        """Raise `TrajectoryDivergence` carrying `format()` when the trajectories differ."""
        if not self.ok:
            raise TrajectoryDivergence(self.format())


def compare_trajectories(
    expected: Trajectory,
    actual: Trajectory,
    *,
    source: str = "",
    expected_values: Values | None = None,
    actual_values: Values | None = None,
) -> TrajectoryReport:
    """Walk both trajectories in order and report the first diverging checkpoint: what changed inside it and,
    when both sides' values are given (or kept on the trajectories), how big the difference is and how it grows over
    the later checkpoints."""
    expected_values = expected.values if expected_values is None else expected_values
    actual_values = actual.values if actual_values is None else actual_values
    first: TrajectoryReport | None = None
    later: list[int] = []
    total = max(len(expected), len(actual))
    for index in range(total):
        report = _compare_at(expected, actual, index, total, source)
        if report is None:
            continue
        if first is None:
            first = report
        else:
            later.append(index)
    if first is None:
        return TrajectoryReport(total=total, source=source)
    magnitude = None
    if expected_values is not None and actual_values is not None and not first.structure:
        magnitude = _magnitude(first, expected, expected_values, actual_values, later)
    plain = plain_changes(first, expected, expected_values, actual_values)
    return dataclasses.replace(first, later_divergences=len(later), magnitude=magnitude, plain=plain)


PLAIN_SHOWN = 6  # plain values named in a report, at most
_PLAIN_SPECS = frozenset({"bool", "int", "float", "complex", "str", "none"})  # `digest.leaf_spec` of Python's scalars
_PLAIN_WIDTH = 40  # characters of one value shown


def plain_changes(
    report: TrajectoryReport, expected: Trajectory, a: Values | None, b: Values | None
) -> tuple[tuple[str, str, str], ...]:
    """The changed leaves of the first diverging checkpoint that are plain values, not tensors (an optimizer's
    `betas`, a config's number, a flag), with both sides' values when both kept them: a changed setting is most
    often the cause, and among a checkpoint's tensors, which it moves, it would be one name of many."""
    if report.changes is None or not report.changes.changed:
        return ()
    name = report.first_name
    specs = expected.specs.get(name, {})
    found = []
    for leaf in report.changes.changed:
        spec = specs.get(leaf, "")
        if spec not in _PLAIN_SPECS and not (spec.startswith("list[") and spec.endswith("]")):
            continue  # a tensor (`float32[64,4]`) or an object digested whole (its class's name)
        found.append((leaf, _plain_text(a, name, leaf), _plain_text(b, name, leaf)))
    return tuple(found)


def _plain_text(values: Values | None, checkpoint: str, leaf: str) -> str:
    """A kept plain value as Python writes it (`0.99`, `[0.9, 0.99]`, `True`); '' when it was not kept."""
    if values is None or checkpoint not in values or leaf not in values[checkpoint]:
        return ""
    try:
        value = values[checkpoint][leaf]
    except TripwireError:  # a damaged values file: the digests still say which values differ
        return ""
    if not isinstance(value, torch.Tensor) or value.numel() > 16:
        return ""
    with ignore_syncs():
        text = repr(value.tolist())
    return text if len(text) <= _PLAIN_WIDTH else text[: _PLAIN_WIDTH - 3] + "..."


def format_plain(plain: Sequence[tuple[str, str, str]]) -> str:
    """`betas [0.9, 0.99] -> [0.9, 0.98], lr`: each plain value that differs, with both values when known."""
    return listed([f"{leaf} {old} -> {new}" if old and new else leaf for leaf, old, new in plain], PLAIN_SHOWN)


def _magnitude(
    first: TrajectoryReport, expected: Trajectory, a: Values, b: Values, later: Sequence[int]
) -> Magnitude | None:
    """Deltas of the first diverging checkpoint's changed tensors, classified, with the growth afterwards."""
    name = first.first_name
    if name not in a or name not in b or first.changes is None or not first.changes.changed:
        return None
    deltas, unmeasured = checkpoint_deltas(first.changes.changed, a[name], b[name])
    growth = []
    step = max(1, len(later) // GROWTH_POINTS)  # growth at up to GROWTH_POINTS later checkpoints, and the last
    for index in dict.fromkeys([*later[::step], *later[-1:]]):
        later_name = expected.checkpoints[index][0]
        if later_name in a and later_name in b:
            point = growth_point(index + 1, later_name, a[later_name], b[later_name])
            if point is not None:
                growth.append(point)
    measured = {delta.name for delta in deltas} | set(unmeasured)
    below = tuple(name for name in first.changes.changed if name not in measured)  # kept, and 0 at float32's resolution
    return Magnitude(tuple(deltas), classify(deltas), tuple(unmeasured), tuple(growth), below)


def _compare_at(
    expected: Trajectory, actual: Trajectory, index: int, total: int, source: str
) -> TrajectoryReport | None:
    """The divergence at position `index` (1-based in the report), or None when both agree there."""
    position = index + 1
    if index >= len(actual):
        name = expected.checkpoints[index][0]
        return TrajectoryReport(total, position, name, structure=f"checkpoint {name!r} is missing now", source=source)
    if index >= len(expected):
        name = actual.checkpoints[index][0]
        return TrajectoryReport(total, position, name, structure=f"checkpoint {name!r} is new", source=source)
    (want_name, want), (got_name, got) = expected.checkpoints[index], actual.checkpoints[index]
    if want_name != got_name:
        text = f"golden has checkpoint {want_name!r} here, the run recorded {got_name!r} (order or naming changed)"
        return TrajectoryReport(total, position, want_name, structure=text, source=source)
    changes = tensor_changes(want, got, expected.specs.get(want_name, {}), actual.specs.get(got_name, {}))
    if changes.same:
        return None
    differing = changes.all_names()
    tensor = changes.changed[0] if changes.changed else differing[0]
    return TrajectoryReport(
        total,
        position,
        want_name,
        first_tensor=tensor,
        expected_digest=want.get(tensor, "<absent>"),
        actual_digest=got.get(tensor, "<absent>"),
        differing_tensors=tuple(differing),
        tensors_in_checkpoint=len(set(want) | set(got)),
        source=source,
        changes=changes,
    )
