"""Trajectories: ordered, named checkpoints of bitwise digests, recorded during a run and compared to a golden.

A recorder collects checkpoints such as `r0/e1/env0/train` (weights after an env's train pass),
`r0/e1/actions`, `r0/e1/rewards` or `r0/policy` (policy after the update). Each checkpoint maps tensor
names to digests (see `tripwire.digest`). Comparing two trajectories walks them in order and names the
FIRST checkpoint whose digests differ and, inside it, the first tensor; everything after a first
divergence usually differs too, so only a count of later divergences is given.

Reading a failure (`TrajectoryReport.format()`):

    trajectory diverged at checkpoint 3 of 21, 'r0/e2/env0/train' (18 later checkpoints differ too)
      first tensor: 'model.host.conv1.weight'  golden 1f0c3a5e9b2d7c41  now 8e77b0d2c9a1f3e5
      2 of 14 tensors differ: model.host.conv1.weight, model.host.conv1.bias

Goldens carry the determinism context they were recorded in (`tripwire.context`); see
`tripwire.goldens` for the file layout and the skip-on-context-mismatch rule.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tripwire.digest import short, state_digest, tensor_digest, value_digest
from tripwire.errors import GoldenFileError, TrajectoryDivergence, TripwireError, read_golden_json

FORMAT = "tripwire-trajectory/1"
STORED_CHARS = 16  # digests are stored shortened: 64 bits per tensor is ample to detect a change


def digest_value(value: Any) -> dict[str, str]:
    """`{tensor name: digest}` of a tensor, module, generator, mapping, sequence or plain value."""
    if isinstance(value, torch.nn.Module):
        return state_digest(value.state_dict())
    if isinstance(value, torch.Tensor):
        return {"value": tensor_digest(value)}
    if isinstance(value, torch.Generator):
        return {"state": value_digest(value)}
    if isinstance(value, Mapping) and value:
        return state_digest(value)
    return {"value": value_digest(value)}


@dataclass
class Trajectory:
    """An ordered list of `(checkpoint name, {tensor name: digest})`, plus where it was recorded."""

    checkpoints: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)

    def names(self) -> list[str]:
        """Checkpoint names in recording order."""
        return [name for name, _ in self.checkpoints]

    def __len__(self) -> int:
        return len(self.checkpoints)

    def __iter__(self) -> Iterator[tuple[str, dict[str, str]]]:
        return iter(self.checkpoints)

    def select(self, prefix: str) -> Trajectory:
        """The checkpoints whose name starts with `prefix` (e.g. one round: `r1/`)."""
        return Trajectory([(n, d) for n, d in self.checkpoints if n.startswith(prefix)], dict(self.context))

    def to_json(self) -> dict[str, Any]:
        """The golden-file form: format tag, context, and checkpoints with shortened digests."""
        return {
            "format": FORMAT,
            "context": dict(sorted(self.context.items())),
            "checkpoints": [[name, {k: v[:STORED_CHARS] for k, v in digests.items()}] for name, digests in self],
        }

    @classmethod
    def from_json(cls, data: Any, source: str = "<json>") -> Trajectory:
        """Parse the golden-file form; raises `GoldenFileError` naming `source` when malformed."""
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise GoldenFileError(f'{source}: not a trajectory golden (expected "format": "{FORMAT}")')
        raw = data.get("checkpoints")
        if not isinstance(raw, list) or not all(_is_checkpoint(item) for item in raw):
            raise GoldenFileError(f"{source}: 'checkpoints' must be a list of [name, {{tensor: digest}}] pairs")
        context = data.get("context", {})
        return cls([(str(n), dict(d)) for n, d in raw], dict(context) if isinstance(context, Mapping) else {})

    @classmethod
    def load(cls, path: str | Path) -> Trajectory:
        """Read a golden file; missing or malformed files raise `GoldenFileError` naming the path."""
        path = Path(path)
        data = read_golden_json(path, "trajectory golden does not exist")
        return cls.from_json(data, source=str(path))

    def save(self, path: str | Path) -> Path:
        """Write the golden form: one checkpoint per line, so a diff shows which checkpoints changed."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
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
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path


def _is_checkpoint(item: Any) -> bool:
    """True for a `[name, {tensor: digest}]` pair with string digests."""
    if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
        return False
    digests = item[1]
    return isinstance(digests, Mapping) and all(isinstance(v, str) for v in digests.values())


class TrajectoryRecorder:
    """Records named checkpoints in order: `recorder.record("r0/e1/env0/train", model)`."""

    def __init__(self, context: Mapping[str, Any] | None = None) -> None:
        self.trajectory = Trajectory(context=dict(context or {}))
        self._seen: set[str] = set()

    def record(self, name: str, value: Any) -> dict[str, str]:
        """Digest `value` under checkpoint `name` (names must be unique); returns the digests."""
        if name in self._seen:
            raise TripwireError(f"checkpoint {name!r} recorded twice: give each checkpoint a unique name")
        self._seen.add(name)
        digests = digest_value(value)
        self.trajectory.checkpoints.append((name, digests))
        return digests

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

    @property
    def ok(self) -> bool:
        """True when both trajectories are bitwise identical, checkpoint for checkpoint."""
        return self.first_index is None

    def format(self) -> str:
        """Human-readable report; the first line names the first diverging checkpoint."""
        where = f" ({self.source})" if self.source else ""
        if self.ok:
            return f"trajectory identical over {self.total} checkpoints{where}"
        head = (
            f"trajectory diverged at checkpoint {self.first_index} of {self.total}, {self.first_name!r}"
            f" ({self.later_divergences} later checkpoints differ too){where}"
        )
        if self.structure:
            return f"{head}\n  {self.structure}"
        shown = ", ".join(self.differing_tensors[:8]) + (", ..." if len(self.differing_tensors) > 8 else "")
        return "\n".join(
            [
                head,
                f"  first tensor: {self.first_tensor!r}  golden {short(self.expected_digest)}"
                f"  now {short(self.actual_digest)}",
                f"  {len(self.differing_tensors)} of {self.tensors_in_checkpoint} tensors differ: {shown}",
            ]
        )

    def raise_if_diverged(self) -> None:
        """Raise `TrajectoryDivergence` carrying `format()` when the trajectories differ."""
        if not self.ok:
            raise TrajectoryDivergence(self.format())


def _same(expected: str, actual: str) -> bool:
    """Digests are equal; a shortened golden digest matches a full one by prefix."""
    width = min(len(expected), len(actual))
    return expected[:width] == actual[:width]


def _checkpoint_differences(expected: Mapping[str, str], actual: Mapping[str, str]) -> list[str]:
    """Tensor names that differ in value, or exist on one side only, in `expected`'s order then new ones."""
    names = list(expected) + [name for name in actual if name not in expected]
    return [n for n in names if n not in expected or n not in actual or not _same(expected[n], actual[n])]


def compare_trajectories(expected: Trajectory, actual: Trajectory, *, source: str = "") -> TrajectoryReport:
    """Walk both trajectories in order and report the first diverging checkpoint and tensor."""
    first: TrajectoryReport | None = None
    later = 0
    total = max(len(expected), len(actual))
    for index in range(total):
        report = _compare_at(expected.checkpoints, actual.checkpoints, index, total, source)
        if report is None:
            continue
        if first is None:
            first = report
        else:
            later += 1
    if first is None:
        return TrajectoryReport(total=total, source=source)
    return dataclasses.replace(first, later_divergences=later)


def _compare_at(
    expected: Sequence[tuple[str, dict[str, str]]],
    actual: Sequence[tuple[str, dict[str, str]]],
    index: int,
    total: int,
    source: str,
) -> TrajectoryReport | None:
    """The divergence at position `index` (1-based in the report), or None when both agree there."""
    position = index + 1
    if index >= len(actual):
        name = expected[index][0]
        return TrajectoryReport(total, position, name, structure=f"checkpoint {name!r} is missing now", source=source)
    if index >= len(expected):
        name = actual[index][0]
        return TrajectoryReport(total, position, name, structure=f"checkpoint {name!r} is new", source=source)
    (want_name, want), (got_name, got) = expected[index], actual[index]
    if want_name != got_name:
        text = f"golden has checkpoint {want_name!r} here, the run recorded {got_name!r} (order or naming changed)"
        return TrajectoryReport(total, position, want_name, structure=text, source=source)
    differing = _checkpoint_differences(want, got)
    if not differing:
        return None
    tensor = differing[0]
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
    )
