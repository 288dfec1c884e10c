"""What changed inside one checkpoint: structure (tensors added, removed, renamed or reshaped) apart from values.

Two checkpoints are maps `{tensor name: digest}` with optional specs `{tensor name: "float32[64,4]"}`
(`tripwire.bitwise.digest.leaf_spec`). A name on one side only is *added* or *removed*, unless a name on the other side
has the same digest (and spec): then it was *renamed*, its value untouched. A name on both sides whose spec differs was
*reshaped* (or retyped). Only a name on both sides with the same spec and another digest *changed value*. An
architecture change then reads "2 added, 2 reshaped" instead of "57 of 90 tensors differ".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


def same_digest(expected: str, actual: str) -> bool:
    """Digests are equal; a shortened golden digest matches a full one by prefix."""
    width = min(len(expected), len(actual))
    return expected[:width] == actual[:width]


@dataclass(frozen=True)
class TensorChanges:
    """The differences inside one checkpoint, each list in the expected side's order, then new names."""

    added: tuple[tuple[str, str], ...] = ()  # (name, spec)
    removed: tuple[tuple[str, str], ...] = ()
    renamed: tuple[tuple[str, str], ...] = ()  # (old name, new name)
    reshaped: tuple[tuple[str, str, str], ...] = ()  # (name, old spec, new spec)
    changed: tuple[str, ...] = ()  # same name and spec, another value

    @property
    def same(self) -> bool:
        return not (self.structural or self.changed)

    @property
    def structural(self) -> bool:
        return bool(self.added or self.removed or self.renamed or self.reshaped)

    def all_names(self) -> list[str]:
        """Every name involved in a difference, changed values first."""
        names = list(self.changed)
        names += [name for name, _, _ in self.reshaped]
        names += [old for old, _ in self.renamed] + [new for _, new in self.renamed]
        names += [name for name, _ in self.removed] + [name for name, _ in self.added]
        return names

    def counts(self) -> str:
        """`2 renamed, 1 added, 3 changed`: how many of each, for one-line cells."""
        parts = [
            (len(self.renamed), "renamed"),
            (len(self.added), "added"),
            (len(self.removed), "removed"),
            (len(self.reshaped), "reshaped"),
            (len(self.changed), "changed in value"),
        ]
        return ", ".join(f"{count} {what}" for count, what in parts if count)

    def format_structure(self, shown: int = 4) -> str:
        """`renamed a -> b; added c (float32[4]); reshaped d float32[2] -> float32[3]`, a few of each."""
        groups = [
            ("renamed", [f"{old} -> {new}" for old, new in self.renamed]),
            ("added", [f"{name} ({spec})" if spec else name for name, spec in self.added]),
            ("removed", [f"{name} ({spec})" if spec else name for name, spec in self.removed]),
            ("reshaped", [f"{name} {old} -> {new}" for name, old, new in self.reshaped]),
        ]
        parts = []
        for what, items in groups:
            if items:
                more = f", ... ({len(items)} in all)" if len(items) > shown else ""
                parts.append(f"{what} {', '.join(items[:shown])}{more}")
        return "; ".join(parts)


def tensor_changes(
    expected: Mapping[str, str],
    actual: Mapping[str, str],
    expected_specs: Mapping[str, str] | None = None,
    actual_specs: Mapping[str, str] | None = None,
) -> TensorChanges:
    """Classify every difference between two checkpoints (see the module docstring)."""
    want_specs, got_specs = expected_specs or {}, actual_specs or {}
    changed, reshaped = [], []
    for name in expected:
        if name not in actual:
            continue
        old, new = want_specs.get(name), got_specs.get(name)
        if old is not None and new is not None and old != new:
            reshaped.append((name, old, new))
        elif not same_digest(expected[name], actual[name]):
            changed.append(name)
    only_old = [name for name in expected if name not in actual]
    only_new = [name for name in actual if name not in expected]
    renamed = []
    for old in only_old:
        matches = [
            new
            for new in only_new
            if same_digest(expected[old], actual[new]) and _compatible(want_specs.get(old), got_specs.get(new))
        ]
        match = _closest(old, matches)
        if match is not None:
            renamed.append((old, match))
            only_new.remove(match)
    renamed_old = {old for old, _ in renamed}
    return TensorChanges(
        added=tuple((name, got_specs.get(name, "")) for name in only_new),
        removed=tuple((name, want_specs.get(name, "")) for name in only_old if name not in renamed_old),
        renamed=tuple(renamed),
        reshaped=tuple(reshaped),
        changed=tuple(changed),
    )


def _compatible(old: str | None, new: str | None) -> bool:
    """Specs agree, or one side has none (a format-1 golden)."""
    return old is None or new is None or old == new


def _common_suffix(a: str, b: str) -> int:
    """How many trailing characters `a` and `b` share."""
    length = 0
    while length < min(len(a), len(b)) and a[-1 - length] == b[-1 - length]:
        length += 1
    return length


def _closest(old: str, candidates: list[str]) -> str | None:
    """The candidate sharing the longest name suffix with `old` (zero-filled biases share digests); None on a tie."""
    if len(candidates) <= 1:
        return candidates[0] if candidates else None
    ranked = sorted(candidates, key=lambda name: _common_suffix(name, old), reverse=True)
    return ranked[0] if _common_suffix(ranked[0], old) > _common_suffix(ranked[1], old) else None
