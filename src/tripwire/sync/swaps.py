"""Counting every call of a function however it was referenced: its code swapped for a trampoline while counting.

A module attribute patch (`torch.cuda.synchronize = counted`) misses a reference taken before it
(`sync = torch.cuda.synchronize` at import, or a bound `stream.synchronize` kept aside): that name still holds the
original function object. `swap_code(function, counted)` changes the object itself: its `__code__` becomes a
trampoline that hands the call to `counted(args, kwargs)` (reached through a keyword-only default, so nothing is
added to the function's module), which records it and calls an untouched copy of the original. `restore` puts the
original code back. The trampoline has the original's free variables, so a method that calls `super()` (its
`__class__` cell) can be swapped too. While swapped, the function's signature is still its own: `__signature__` holds
it (what `inspect.signature` reads first), so a loop that asks which arguments `torch.load` takes (`"weights_only" in
inspect.signature(torch.load).parameters`) gets the answer it gets without tripwire; `restore` takes it off again.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Swap", "swap_code"]


def _trampoline(*args: Any, _tripwire_counted: Any = None, **kwargs: Any) -> Any:
    return _tripwire_counted(args, kwargs)  # pass-through


class _MethodTrampoline:
    def method(self, *args: Any, _tripwire_counted: Any = None, **kwargs: Any) -> Any:
        __class__  # type: ignore[name-defined]  # noqa: B018  (a free variable, as in a method calling super())
        return _tripwire_counted((self, *args), kwargs)  # pass-through


_TRAMPOLINES = {(): _trampoline.__code__, ("__class__",): _MethodTrampoline.method.__code__}


_NONE = object()


@dataclass
class Swap:
    """One swapped function and what puts it back."""

    function: types.FunctionType
    code: types.CodeType
    defaults: tuple[Any, ...] | None
    kwdefaults: dict[str, Any] | None
    signature: Any = _NONE  # the function's own `__signature__` attribute before the swap (`_NONE`: it had none)

    def restore(self) -> None:
        self.function.__code__ = self.code
        self.function.__defaults__ = self.defaults
        self.function.__kwdefaults__ = self.kwdefaults
        if self.signature is _NONE:
            vars(self.function).pop("__signature__", None)
        else:
            self.function.__signature__ = self.signature  # type: ignore[attr-defined]


def swap_code(function: Any, counted: Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]) -> Swap | None:
    """Route every call of `function` to `counted(original, args, kwargs)`, `original` an untouched copy of it;
    None when it cannot be swapped (not a Python function, or free variables no trampoline has)."""
    if not isinstance(function, types.FunctionType):
        return None
    trampoline = _TRAMPOLINES.get(function.__code__.co_freevars)
    if trampoline is None:
        return None
    original = types.FunctionType(
        function.__code__, function.__globals__, function.__name__, function.__defaults__, function.__closure__
    )
    original.__kwdefaults__ = function.__kwdefaults__
    try:
        signature: Any = inspect.signature(function)
    except (TypeError, ValueError):  # none Python can give: none to keep
        signature = None
    kept = vars(function).get("__signature__", _NONE)
    swap = Swap(function, function.__code__, function.__defaults__, function.__kwdefaults__, kept)
    if signature is not None:
        function.__signature__ = signature  # type: ignore[attr-defined]
    function.__code__ = trampoline
    function.__defaults__ = None
    function.__kwdefaults__ = {"_tripwire_counted": _Bound(counted, original)}
    return swap


class _Bound:
    """`counted(original, args, kwargs)` as the trampoline calls it: `(args, kwargs)`."""

    def __init__(self, counted: Callable[[Any, tuple[Any, ...], dict[str, Any]], Any], original: Any) -> None:
        self.counted = counted
        self.original = original

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self.counted(self.original, args, kwargs)  # pass-through
