"""`tripwire.common.unhook`: what the loop built on a stand-in while recorded keeps working, on the original."""

from __future__ import annotations

import functools
from typing import Any

from tripwire.common.unhook import put_back, unhook


def original(value: int) -> int:
    return value + 1


def stand_in(value: int) -> int:
    return -1  # a stand-in that shows it was called


def wrap(function: Any, factor: int) -> Any:
    @functools.wraps(function)
    def wrapper(value: int) -> int:
        return int(function(value)) * factor

    return wrapper


def test_a_wrapper_of_a_wrapper_of_the_stand_in_ends_on_the_original() -> None:
    inner = wrap(stand_in, 1)
    outer = wrap(inner, 10)
    assert outer(1) == -10
    assert unhook(outer, stand_in, original)
    assert outer(1) == 20 and inner.__wrapped__ is original  # type: ignore[attr-defined]


def test_a_wrapper_dynamo_made_of_the_stand_in_calls_and_unwraps_to_the_original() -> None:
    """`torch.compiler.disable(f, recursive=False)` of a stand-in holds it in its closure, in `__wrapped__` and in
    `_torchdynamo_orig_callable`, which dynamo unwraps to when the loop compiles the wrapper: all three end on the
    original, so no stand-in outlives the recording inside the loop's wrapper."""
    import torch
    from torch._dynamo.eval_frame import innermost_fn

    wrapper = torch.compiler.disable(stand_in, recursive=False)
    assert wrapper(1) == -1 and innermost_fn(wrapper) is stand_in
    assert unhook(wrapper, stand_in, original)
    assert wrapper(1) == 2
    assert innermost_fn(wrapper) is original and wrapper.__wrapped__ is original
    assert not [value for value in vars(wrapper).values() if value is stand_in]


def test_an_object_that_does_not_hold_the_stand_in_is_left_alone() -> None:
    def independent(value: int) -> int:
        return original(value) * 2

    assert not unhook(independent, stand_in, original)
    assert independent(1) == 4


class Owner:
    helper = staticmethod(original)


def test_put_back_restores_its_own_and_keeps_the_loops_replacement_minus_the_stand_in() -> None:
    ours = staticmethod(stand_in)
    Owner.helper = ours  # type: ignore[assignment]
    put_back(Owner, "helper", True, staticmethod(original), ours)
    assert Owner.helper(1) == 2  # ours was still there: the original is back

    Owner.helper = ours  # type: ignore[assignment]
    found: Any = Owner.helper  # the loop wraps what it finds: the function the staticmethod holds
    Owner.helper = staticmethod(lambda value: found(value) + 100)  # type: ignore[assignment]
    put_back(Owner, "helper", True, staticmethod(original), ours)
    assert Owner.helper(1) == 102  # the loop's wrapper stays, around the original
