"""An instrument on a callable that is not a function: a `torch.library.custom_op`, a `functools.partial`. A function
standing in its place could only be called, and the loop uses more of it (`@op.register_fake` crashed the loop with
"'function' object has no attribute 'register_fake'"); its stand-in is an object that is the original in everything
but `type()` and `is`. A class is refused with the method to use instead."""

from __future__ import annotations

import functools
import pickle
import runpy
from pathlib import Path

import pytest
import torch

from tripwire.outside.record import record
from tripwire.outside.stand import StandInObject
from tripwire.scenario import Region, Scenario

LOOP = """
import functools
import os

import torch


@torch.library.custom_op("tripwire_test::scale", mutates_args=())
def scale(x: torch.Tensor, k: float) -> torch.Tensor:
    return x * k


@scale.register_fake
def _(x, k):
    return torch.empty_like(x)


def _backward(ctx, grad):
    return grad * ctx.k, None


def _setup(ctx, inputs, output):
    ctx.k = inputs[1]


scale.register_autograd(_backward, setup_context=_setup)


class Policy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    def forward(self, x):
        return self.layer(x)


def shift(x, by):
    return x + by


shifted = functools.partial(shift, by=1.0)


class Table:
    @functools.lru_cache(maxsize=None)
    def row(self, i):
        return torch.full((1,), float(i))


class Ops:
    half = functools.partial(torch.mul, other=0.5)  # a class attribute: binds from Python 3.14 on, not before

if __name__ == "__main__":
    torch.manual_seed(0)
    policy = Policy()
    table = Table()
    x = torch.ones(2, 3, requires_grad=True)
    for _ in range(3):
        scale(Ops.half(shifted(policy(x))) + table.row(1), 2.0).sum().backward()
    facts = [shifted.func.__name__, shifted.keywords, isinstance(policy, Policy)]
    facts += [Table.row.cache_info().hits, table.row.cache_info().currsize, Ops.half.keywords]
    torch.save((x.grad, facts), os.path.join(os.path.dirname(__file__), "out.pt"))
"""


def test_a_custom_op_and_a_partial_with_regions_run_as_alone(tmp_path: Path) -> None:
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "loop.py").write_text(LOOP.replace("tripwire_test::", "tripwire_test_alone::"), encoding="utf-8")
    (tmp_path / "loop.py").write_text(LOOP, encoding="utf-8")
    runpy.run_path(str(alone / "loop.py"), run_name="__main__")
    regions = [
        Region("__main__:scale", "op"),
        Region("__main__:shifted", "shift"),
        Region("__main__:Table.row", "table"),  # an `lru_cache`d method: `cache_info` was lost
        Region("__main__:Ops.half", "half"),  # Python 3.13 gave a partial a `__get__`: its `.func` was lost
    ]
    result = record(Scenario(name="objects", script="loop.py", regions=regions), tmp_path)
    assert result.ok, result.cause
    assert result.calls == {f"__main__:{name}": 3 for name in ("scale", "shifted", "Table.row", "Ops.half")}
    grad, facts = torch.load(tmp_path / "out.pt")
    grad_alone, facts_alone = torch.load(alone / "out.pt")
    assert torch.equal(grad, grad_alone)
    assert facts == facts_alone == ["shift", {"by": 1.0}, True, 2, 1, {"other": 0.5}]


def test_a_class_as_a_target_is_refused_in_one_line_naming_the_method_to_use(tmp_path: Path) -> None:
    """A class stood in for by anything else breaks its instances' pickling (by its name) and `isinstance`: refused,
    with `__init__` named for its construction."""
    (tmp_path / "loop.py").write_text(LOOP.replace("tripwire_test::", "tripwire_test_class::"), encoding="utf-8")
    result = record(Scenario(name="cls", script="loop.py", regions=[Region("__main__:Policy", "p")]), tmp_path)
    assert result.status == "error" and "\n" not in result.cause
    assert "a class cannot be stood in for" in result.cause and "__main__:Policy.__init__" in result.cause


class Counter:
    """A callable object with attributes and methods of its own."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, value: int) -> int:
        self.calls += 1
        return value * 2

    def reset(self) -> None:
        self.calls = 0


def test_the_object_stand_in_is_the_original_but_for_type_and_identity() -> None:
    original = Counter()
    seen: list[tuple[int, ...]] = []

    def call(target: object, args: tuple[int, ...], kwargs: dict[str, object]) -> object:
        seen.append(args)
        return target(*args, **kwargs)  # type: ignore[operator]

    stand = StandInObject(original, call)
    assert stand(3) == 6 and seen == [(3,)] and original.calls == 1
    stand.calls = 10  # set on the original
    assert original.calls == 10 and vars(stand) is vars(original)
    stand.reset()
    assert original.calls == 0
    assert isinstance(stand, Counter) and stand == original and hash(stand) == hash(original)
    assert repr(stand) == repr(original) and stand.__wrapped__ is original
    partial = functools.partial(pow, 2)
    assert type(pickle.loads(pickle.dumps(StandInObject(partial, call)))) is functools.partial
    assert type(stand) is StandInObject and stand is not original


class Slotted:
    """A callable object without a `__dict__`."""

    __slots__ = ("scale",)

    def __init__(self) -> None:
        self.scale = 2

    def __call__(self, value: int) -> int:
        return value * self.scale


def test_an_original_without_a_dict_has_a_stand_in_without_one() -> None:
    original = Slotted()
    stand = StandInObject(original, lambda target, args, kwargs: target(*args, **kwargs))
    assert stand(3) == 6
    with pytest.raises(TypeError, match="__dict__"):
        vars(original)
    with pytest.raises(TypeError, match="__dict__"):  # as of the original, not an empty dict of the stand-in's
        vars(stand)
    assert not hasattr(stand, "__dict__")
    stand.scale = 5
    assert original.scale == 5 and stand(1) == 5 and isinstance(stand, Slotted) and stand == original
    assert type(pickle.loads(pickle.dumps(stand))) is Slotted and pickle.loads(pickle.dumps(stand)).scale == 5
