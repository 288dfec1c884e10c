"""What a checkpoint must hold, field by field, checked before any of it is used.

`torch.load(weights_only=True)` guarantees that loading runs no code, not that the fields are what the trainer
expects: a crafted or foreign checkpoint in the right format can hold a string where a count belongs, a tensor of
another shape or dtype in the optimizer state (fused Adam then writes past its buffers), a sparse or meta tensor,
NaN in a normalizer. `problem(value, spec)` walks a loaded value against a spec and names the first field that does
not conform; the client's spec is derived from the state a freshly built client would save (`of_state`), so it
follows the network's real shapes without a hand-kept copy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from esper.messages import escape


@dataclass(frozen=True)
class TensorSpec:
    """A dense tensor of this shape and dtype; floating-point values finite (and at least `minimum`)."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    minimum: float | None = None


@dataclass(frozen=True)
class Scalar:
    """A plain Python value of one of `kinds` (bool is not an int here); numbers finite and at least `minimum`."""

    kinds: tuple[type, ...]
    minimum: float | None = None


@dataclass(frozen=True)
class Fields:
    """A dict with these keys (those in `optional` may be absent; with `partial`, any may be); a key not listed is
    refused unless `extra` gives the spec its value must meet."""

    fields: Mapping[Any, Any]
    optional: frozenset[Any] = field(default_factory=frozenset)
    partial: bool = False
    extra: Any = None


@dataclass(frozen=True)
class ListOf:
    """A list (or tuple) of any length, each element conforming to `element`."""

    element: Any


@dataclass(frozen=True)
class Exactly:
    """A list or tuple of exactly these elements' specs."""

    elements: tuple[Any, ...]


@dataclass(frozen=True)
class OneOf:
    """Any of these tensor or scalar specs."""

    options: tuple[TensorSpec | Scalar, ...]


@dataclass(frozen=True)
class Value:
    """Exactly this value (e.g. the parameter indices an optimizer's group must list)."""

    value: Any


@dataclass(frozen=True)
class Plain:
    """Any value `weights_only` loading produced that the trainer only records (never computes with)."""


INT = Scalar((int,))
COUNT = Scalar((int,), minimum=0)
FLOAT = Scalar((float, int))
NON_NEGATIVE = Scalar((float, int), minimum=0.0)
STR = Scalar((str,))
BOOL = Scalar((bool,))
NONE = Scalar((type(None),))
INT_LIMIT = 2**63  # beyond this an int no longer fits the int64 a count becomes in a tensor


def of_state(value: Any) -> Any:
    """The spec a saved copy of `value` (a fresh object's tensor, or dict of tensors, such as a module's state dict)
    must meet: the same keys, tensors of the same shape and dtype."""
    if isinstance(value, torch.Tensor):
        return TensorSpec(tuple(value.shape), value.dtype)
    if isinstance(value, Mapping):
        return Fields({key: of_state(item) for key, item in value.items()})
    raise TypeError(f"no checkpoint spec for a {type(value).__name__}: declare it")


def _article(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def _kind(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        layout = "" if value.layout == torch.strided else f"{value.layout} ".replace("torch.", "")
        return f"a {layout}{value.dtype} tensor of shape {tuple(value.shape)}".replace("torch.", "")
    return _article(type(value).__name__)


def _name(key: Any) -> str:
    return escape(str(key)) if isinstance(key, str) else repr(key)


def problem(value: Any, spec: Any, where: str = "") -> str | None:
    """The first way `value` fails `spec`, as "<field path>: <what it is>, expected <what>", or None. Tensors' values
    (finite, bounds) are checked after the structure, all in one host read."""
    pending: list[tuple[str, torch.Tensor, TensorSpec]] = []
    return _structure(value, spec, where, pending) or _values(pending)


def _values(pending: list[tuple[str, torch.Tensor, TensorSpec]]) -> str | None:
    """The first tensor holding NaN or infinity, or a value below its spec's minimum."""
    if not pending:
        return None
    yes = torch.ones((), dtype=torch.bool)
    flags = [
        torch.stack(
            [
                torch.isfinite(tensor).all() if tensor.is_floating_point() else yes,
                (tensor >= spec.minimum).all() if spec.minimum is not None else yes,
            ]
        )
        for _, tensor, spec in pending
    ]
    read = torch.stack(flags).tolist()  # one host read for every tensor of the checkpoint
    for (here, _, spec), (finite, bounded) in zip(pending, read, strict=True):
        if not finite:
            return f"{here}: holds non-finite values (NaN or infinity)"
        if not bounded:
            return f"{here}: holds values below {spec.minimum:g}"
    return None


def _structure(value: Any, spec: Any, where: str, pending: list[tuple[str, torch.Tensor, TensorSpec]]) -> str | None:
    """`problem` without the tensors' values: those are appended to `pending`."""
    here = where or "the checkpoint"
    if isinstance(spec, Plain):
        return None
    if isinstance(spec, OneOf):
        tried = []
        for option in spec.options:
            own: list[tuple[str, torch.Tensor, TensorSpec]] = []
            tried.append(_structure(value, option, where, own))
            if tried[-1] is None:
                pending.extend(own)
                return None
        fitting = [found for option, found in zip(spec.options, tried, strict=True) if _fits(value, option)]
        if fitting:  # of the right kind, but out of bounds: say how
            return fitting[0]
        return f"{here}: {_kind(value)}, expected {' or '.join(_describe(option) for option in spec.options)}"
    if isinstance(spec, Value):
        return None if _same(value, spec.value) else f"{here}: differs from this run's {_short(spec.value)}"
    if isinstance(spec, TensorSpec):
        found = _tensor_problem(value, spec, here)
        if found is None:
            pending.append((here, value, spec))
        return found
    if isinstance(spec, Scalar):
        return _scalar_problem(value, spec, here)
    if isinstance(spec, Fields):
        if not isinstance(value, dict):
            return f"{here}: {_kind(value)}, expected a dict"
        missing = [key for key in spec.fields if key not in value and key not in spec.optional and not spec.partial]
        unknown = [key for key in value if key not in spec.fields] if spec.extra is None else []
        for what, keys in (("lacks the field", missing), ("has the unknown field", unknown)):
            if keys:
                more = f" (and {len(keys) - 1} more)" if len(keys) > 1 else ""
                return f"{here}: {what} {_name(keys[0])}{more}"
        for key, item in value.items():
            name = f"{where}.{_name(key)}" if where else _name(key)
            found = _structure(item, spec.fields.get(key, spec.extra), name, pending)
            if found is not None:
                return found
        return None
    if isinstance(spec, (ListOf, Exactly)):
        if not isinstance(value, (list, tuple)):
            return f"{here}: {_kind(value)}, expected a list"
        if isinstance(spec, Exactly) and len(value) != len(spec.elements):
            return f"{here}: {len(value)} items, expected {len(spec.elements)}"
        for index, item in enumerate(value):
            element = spec.element if isinstance(spec, ListOf) else spec.elements[index]
            found = _structure(item, element, f"{here}[{index}]", pending)
            if found is not None:
                return found
        return None
    raise TypeError(f"unknown checkpoint spec {spec!r}")


def _fits(value: Any, spec: TensorSpec | Scalar) -> bool:
    """Whether `value` is of the kind `spec` wants (a tensor for a TensorSpec, one of a Scalar's types)."""
    if isinstance(spec, TensorSpec):
        return isinstance(value, torch.Tensor)
    return isinstance(value, spec.kinds) and not (isinstance(value, bool) and bool not in spec.kinds)


def _describe(spec: TensorSpec | Scalar) -> str:
    if isinstance(spec, TensorSpec):
        return f"a dense {spec.dtype} tensor of shape {spec.shape}".replace("torch.", "")
    return " or ".join("None" if kind is type(None) else _article(kind.__name__) for kind in spec.kinds)


def _same(value: Any, expected: Any) -> bool:
    """Equal and of the same plain types all the way down (a tensor never equals a plain value)."""
    if type(value) is not type(expected):
        return False
    if isinstance(expected, (list, tuple)):
        return len(value) == len(expected) and all(_same(a, b) for a, b in zip(value, expected, strict=True))
    return bool(value == expected)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _tensor_problem(value: Any, spec: TensorSpec, here: str) -> str | None:
    expected = _describe(spec)
    if not isinstance(value, torch.Tensor):
        return f"{here}: {_kind(value)}, expected {expected}"
    if value.layout != torch.strided or value.is_meta or value.is_quantized or value.is_nested:
        return f"{here}: {_kind(value)}{' on the meta device' * value.is_meta}, expected {expected}"
    if value.dtype != spec.dtype or tuple(value.shape) != spec.shape:
        return f"{here}: {_kind(value)}, expected {expected}"
    return None


def _scalar_problem(value: Any, spec: Scalar, here: str) -> str | None:
    if not _fits(value, spec):
        return f"{here}: {_kind(value)}, expected {_describe(spec)}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"{here}: {value}, expected a finite number"
    if isinstance(value, int) and abs(value) >= INT_LIMIT:
        return f"{here}: {value}, expected an integer below 2**63"
    if spec.minimum is not None and value < spec.minimum:
        return f"{here}: {value}, expected at least {spec.minimum:g}"
    return None
