"""An event's fields are its call's arguments by name, as `inspect.Signature.bind` names them, however bound."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from tripwire.outside.instrument import TargetHooks


def plain(tag: str, value: float, step: int | None = None, walltime: float | None = None) -> None: ...


def keyword_only(tag: str, *, value: float = 0.0) -> None: ...


def variadic(tag: str, *values: float, **options: Any) -> None: ...


def reference(function: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """What `_bind` gave before it bound plain signatures itself."""
    try:
        return dict(inspect.signature(function).bind(*args, **kwargs).arguments)
    except TypeError:
        return {f"arg{index}": value for index, value in enumerate(args)} | kwargs


CALLS = [
    (plain, ("loss", 1.5, 3), {}),
    (plain, ("loss", 1.5), {"step": 3}),
    (plain, ("loss",), {"walltime": 2.0, "value": 1.5}),  # keywords out of the signature's order
    (plain, (), {"value": 1.5, "tag": "loss"}),
    (plain, ("loss", 1.5, 3, 2.0), {}),
    (plain, ("loss",), {}),  # a required argument missing: not bindable
    (plain, ("loss", 1.5, 3, 2.0, "extra"), {}),  # one too many
    (plain, ("loss", 1.5), {"tag": "again"}),  # given twice
    (plain, ("loss", 1.5), {"unknown": 1}),
    (keyword_only, ("loss",), {"value": 2.0}),
    (variadic, ("loss", 1.0, 2.0), {"flag": True}),
]


@pytest.mark.parametrize(("function", "args", "kwargs"), CALLS)
def test_arguments_are_named_as_signature_bind_names_them(function: Any, args: tuple[Any, ...], kwargs: Any) -> None:
    hooks = TargetHooks(label="f", session=None)  # type: ignore[arg-type]  # binding reads no session
    for _ in range(2):  # the first call reads the signature, the second reuses what it kept
        bound = hooks._bind(function, args, kwargs)
        expected = reference(function, args, kwargs)
        assert list(bound.items()) == list(expected.items())
