"""Nothing is passed that was not digested: a capture name that binds nothing is an error, objects inside objects
are descended into until their numbers are digested (within a reported bound), and a capture of no value is an error
that says what to capture instead.

The cases are the ones that compared `identical` on loops nobody here wrote: `arg:weigths` (a typo) digested None,
`arg:buffer._meta` digested None, and Tianshou's `VectorReplayBuffer` digested its 20 index fields and left out
`_meta`, every observation, action and reward, so a learning-rate change compared identical."""

from __future__ import annotations

import array
import collections
import datetime
import decimal
import functools
import itertools
import os
import random
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tripwire.bitwise.fields import MAX_CHAIN
from tripwire.bitwise.trajectory import digest_value
from tripwire.outside.capture import MAX_DEPTH, MAX_LEAVES, left_out, no_value, not_excluded, object_state
from tripwire.outside.compare import compare_results
from tripwire.outside.instrument import jsonable
from tripwire.outside.record import record
from tripwire.outside.result import Result
from tripwire.scenario import Checkpoint, EventCall, Scenario, ScenarioError

LOOP = """
import sys

import numpy as np


class Batch:  # Tianshou's Batch: fields set as attributes, arrays inside
    def __init__(self, **fields):
        self.__dict__.update(fields)


class Buffer:  # Tianshou's ReplayBuffer: index fields beside `_meta`, which holds the data
    def __init__(self, size):
        self.maxsize, self._index, self._size, self.stack_num = size, 0, 0, 1
        self._meta = Batch(obs=np.zeros((size, 3)), act=np.zeros(size, dtype=np.int64), rew=np.zeros(size))


def update(buffer, weights, lr):
    buffer._meta.rew[: buffer._size] *= 1.0 - lr
    return weights * (1.0 - lr)


if __name__ == "__main__":
    lr = float(sys.argv[1])
    buffer, weights = Buffer(8), np.ones(4)
    for step in range(4):
        buffer._meta.obs[step] = step * lr
        buffer._meta.rew[step] = step + lr
        buffer._index, buffer._size = step + 1, step + 1
        weights = update(buffer, weights, lr)
"""


def _run(
    tmp_path: Path, capture: tuple[str, ...], lr: str = "0.1", name: str = "a", exclude: tuple[str, ...] = ()
) -> Result:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "loop.py").write_text(LOOP)
    scenario = Scenario(
        name="capture",
        script="loop.py",
        argv=[lr],
        checkpoints=[Checkpoint("__main__:update", capture, exclude=exclude)],
    )
    return record(scenario, folder)


def test_a_checkpoints_exclude_leaves_out_the_leaves_it_names_and_says_which_named_none(tmp_path: Path) -> None:
    """A wall-clock field kept beside the numbers (Tianshou's `return.train_time`, SB3's `self.start_time`) made two
    runs of one loop differ with no way to leave it out but capturing less; `exclude` leaves it out by name."""
    capture = ("arg:buffer",)
    changed = _run(tmp_path, capture, lr="0.11", name="changed", exclude=("arg:buffer._meta.rew",))
    base = _run(tmp_path, capture, name="base", exclude=("arg:buffer._meta.rew",))
    specs = base.trajectory.specs["update#1"]
    assert "arg:buffer._meta.rew" not in specs and "arg:buffer._meta.obs" in specs and base.notes == []
    assert not compare_results(base, changed).ok  # obs still differs
    only_lr = _run(tmp_path, capture, lr="0.11", name="only", exclude=("arg:buffer._meta.*", "arg:buffer.nothing*"))
    again = _run(tmp_path, capture, name="again", exclude=("arg:buffer._meta.*", "arg:buffer.nothing*"))
    assert compare_results(again, only_lr).ok  # all that lr changed is left out
    assert again.notes == [
        "checkpoint on __main__:update: exclude 'arg:buffer.nothing*' left out no leaf: check the name (a leaf is "
        "named as `compare` names it: return.NAME, self.NAME.FIELD)"
    ]
    with pytest.raises(ScenarioError, match="exclude"):
        Checkpoint("__main__:update", exclude="arg:buffer._meta")  # type: ignore[arg-type]


def test_a_capture_name_that_binds_nothing_is_an_error_naming_the_arguments(tmp_path: Path) -> None:
    result = _run(tmp_path, ("arg:weigths",))
    assert result.status == "error"
    assert "capture 'arg:weigths' binds nothing: the call's arguments are buffer, weights, lr" in result.cause


def test_an_attribute_path_that_names_nothing_is_an_error(tmp_path: Path) -> None:
    result = _run(tmp_path, ("arg:buffer._mta",))
    assert result.status == "error" and "Buffer has no attribute '_mta' (it has _index, _meta, _size" in result.cause


def test_an_object_inside_an_object_is_descended_into_until_its_numbers_are_digested(tmp_path: Path) -> None:
    """Tianshou's buffer: `_meta`'s arrays are digested now, so a learning-rate change is seen."""
    base = _run(tmp_path, ("arg:buffer",))
    assert base.ok, base.cause
    specs = base.trajectory.specs["update#1"]
    assert specs["arg:buffer._meta.obs"] == "float64[8,3]" and specs["arg:buffer._index"] == "int"
    assert base.notes == []
    changed = _run(tmp_path, ("arg:buffer",), lr="0.11", name="b")
    assert not compare_results(base, changed).ok


def test_arg_with_an_attribute_path_digests_that_attribute(tmp_path: Path) -> None:
    result = _run(tmp_path, ("arg:buffer._meta",))
    assert result.ok and "arg:buffer._meta.rew" in result.trajectory.specs["update#1"]


def test_a_capture_of_no_value_is_an_error_that_says_what_to_capture(tmp_path: Path) -> None:
    """The loop's `update` returns an array, but a capture of the lock it holds digests nothing."""
    result = _run(tmp_path, ("arg:lr",))
    assert result.ok  # a float is a value
    state = object_state(type("Holder", (), {"__init__": lambda self: setattr(self, "f", print)})())
    assert no_value(state, ["f (builtin_function_or_method)"]).startswith("it digested nothing (only None)")
    only_sizes = {"_index": 3, "_size": 3, "name": "buffer"}
    assert no_value(only_sizes, ["_meta (Batch: deeper than 6 objects)"]).startswith("it digested only plain ints")
    assert no_value(only_sizes, []) == ""  # ints alone are values (an action), when nothing was left out


def test_the_descent_stops_at_its_depth_and_says_so() -> None:
    """Objects of unrelated classes, each holding the next: each is a level, and the walk stops at `MAX_DEPTH`."""
    chain: object = np.ones(2)
    for level in range(MAX_DEPTH + 3):
        holder = type(f"Level{level}", (), {})()  # a class of its own: no two levels are of one family
        holder.child = chain
        chain = holder
    skipped: list[str] = []
    object_state(chain, skipped)
    assert skipped and f"deeper than {MAX_DEPTH} objects" in skipped[0]


class Env:
    """A gym-style environment: its state is what the capture is for."""

    def __init__(self) -> None:
        self.state = np.array([0.25, -1.5])


class Wrapper(Env):
    """A gym-style wrapper: an environment holding the next one in `env`."""

    def __init__(self, env: Env) -> None:
        self.env = env


def test_a_wrapper_chain_is_walked_at_one_level_to_the_state_below_it() -> None:
    """SB3's and Tianshou's env sits under a vector env and four or five gym wrappers, each holding the next in
    `env`: counted a level each, the environment's state lay past `MAX_DEPTH` and every capture of the algorithm
    named it left out. Links of one family (a class both inherit from) are walked at their owner's level."""

    class Algorithm:
        def __init__(self, env: Env) -> None:
            self.env = {"envs": [env]}

    env: Env = Env()
    for _ in range(MAX_DEPTH + 2):
        env = Wrapper(env)
    skipped: list[str] = []
    state = object_state(Algorithm(env), skipped)
    inner = state["env"]["envs"][0]
    for _ in range(MAX_DEPTH + 2):
        inner = inner["env"]
    assert skipped == [] and np.array_equal(inner["state"], np.array([0.25, -1.5]))


def test_a_chain_longer_than_its_bound_stops_and_says_so() -> None:
    """A linked list of one class is a chain too: past `MAX_CHAIN` links each is a level again, so a thousand nodes
    end in a note, not in Python's recursion limit."""

    class Node:
        def __init__(self, child: object) -> None:
            self.child = child

    chain: object = np.ones(2)
    for _ in range(1000):
        chain = Node(chain)
    skipped: list[str] = []
    object_state(chain, skipped)
    assert skipped == [".".join(["child"] * (MAX_CHAIN + MAX_DEPTH + 1)) + f" (Node: deeper than {MAX_DEPTH} objects)"]


def test_an_object_holding_several_of_its_family_is_no_chain() -> None:
    """A node holding three references to the next node of its class (a graph, a tree) is read a level per node:
    walked as a chain it was read once per path, 3**22 paths, and the capture never ended."""

    class Node:
        def __init__(self, after: object) -> None:
            self.a = self.b = self.c = after

    node: object = None
    for _ in range(30):
        node = Node(node)
    skipped: list[str] = []
    object_state(node, skipped)
    assert len(skipped) == 3 ** (MAX_DEPTH + 1) and skipped[0] == "a.a.a.a.a.a.a (Node: deeper than 6 objects)"


def test_a_capture_reads_at_most_its_bound_of_objects_and_its_note_stays_short() -> None:
    class Empty:
        pass

    skipped: list[str] = []
    object_state({"items": [Empty() for _ in range(MAX_LEAVES + 50)]}, skipped)
    assert len(skipped) == 50 and skipped[0] == f"['items'][{MAX_LEAVES}] (Empty: past {MAX_LEAVES} objects)"
    note = left_out(skipped)
    assert note.endswith(", ... and 38 more") and note.count("(Empty: past") == 12


def test_a_cycle_is_walked_once() -> None:
    class Ring:
        pass

    ring = Ring()
    ring.next = ring  # type: ignore[attr-defined]
    ring.value = torch.ones(1)  # type: ignore[attr-defined]
    skipped: list[str] = []
    state = object_state(ring, skipped)
    assert isinstance(state["value"], torch.Tensor) and skipped == ["next (Ring: a cycle)"]


class Holder:
    """An object holding one value of the kind under test, beside a plain count."""

    def __init__(self, value: object) -> None:
        self.value = value
        self.step = 3


def _advanced(make: Callable[[], Any], draws: int) -> Any:
    generator = make()
    if isinstance(generator, torch.Generator):
        torch.rand(draws, generator=generator)
    elif isinstance(generator, random.Random):
        [generator.random() for _ in range(draws)]
    else:
        generator.random(draws)
    return generator


# Values with no fields of their own (no `__dict__`, nothing to descend into), each made holding `x`: an episode-return
# deque (SB3's `ep_info_buffer`), a set, the random generators an environment or sampler keeps, NumPy arrays torch
# has no dtype for, bytes, and Python's numbers and dates. Each digested as `{}` before: a change compared identical.
HOLDING: dict[str, Callable[[float], object]] = {
    "deque": lambda x: collections.deque([1.0, x], maxlen=100),
    "set": lambda x: {1.0, x},
    "frozenset of strings": lambda x: frozenset({"a", "b", str(x)}),
    "complex": lambda x: complex(1.0, x),
    "array.array": lambda x: array.array("d", [1.0, x]),
    "bytes": lambda x: bytes([1, int(x)]),
    "bytearray": lambda x: bytearray([1, int(x)]),
    "range": lambda x: range(int(x)),
    "Decimal": lambda x: decimal.Decimal(x),
    "datetime": lambda x: datetime.datetime(2026, 1, int(x)),
    "NumPy strings": lambda x: np.array(["a", str(x)]),
    "NumPy objects": lambda x: np.array([1.0, x, None], dtype=object),
    "NumPy records": lambda x: np.array([(1, x)], dtype=[("a", "i4"), ("b", "f8")]),
    "NumPy datetimes": lambda x: np.array([int(x)], dtype="datetime64[s]"),
    "NumPy dtype": lambda x: np.dtype("float32" if x < 3 else "float64"),
    "NumPy Generator": lambda x: _advanced(lambda: np.random.default_rng(0), int(x)),
    "NumPy RandomState": lambda x: _advanced(lambda: np.random.RandomState(0), int(x)),
    "random.Random": lambda x: _advanced(lambda: random.Random(0), int(x)),
    "torch.Generator": lambda x: _advanced(lambda: torch.Generator().manual_seed(0), int(x)),
    "torch.layout": lambda x: torch.strided if x < 3 else torch.sparse_coo,
    # built in C with no fields: digested by what pickling keeps of it
    "NumPy bit generator": lambda x: np.random.PCG64(0).advance(int(x)),
    "NumPy SeedSequence": lambda x: np.random.SeedSequence(int(x)),
    "compiled pattern": lambda x: re.compile("a" * int(x)),
    # a masked array's mask is not in its bytes
    "NumPy masked array": lambda x: np.ma.masked_array([1.0, 2.0], mask=[False, x > 3]),
}


@pytest.mark.parametrize("kind", list(HOLDING))
def test_a_value_with_no_fields_of_its_own_is_digested_by_what_it_holds(kind: str) -> None:
    """What such a value holds is digested, the same for the same value (a set's order is not the hash seed's) and
    different for a different one, and nothing is said to be left out."""
    skipped: list[str] = []
    digests = [digest_value(object_state(Holder(HOLDING[kind](x)), skipped)) for x in (2.0, 2.0, 5.0)]
    assert digests[0] == digests[1] != digests[2]
    assert skipped == []


def test_a_set_of_strings_digests_the_same_under_every_hash_seed() -> None:
    script = (
        "from tripwire.outside.capture import object_state\n"
        "from tripwire.bitwise.trajectory import digest_value\n"
        "print(digest_value(object_state({'names': {'actor', 'critic', 'value', 'policy', 'entropy'}})))\n"
    )
    seen = {
        subprocess.run(
            [sys.executable, "-c", script], env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True, text=True
        ).stdout
        for seed in ("0", "1", "2")
    }
    assert len(seen) == 1 and "'names': " in next(iter(seen))


class _Schedule:
    """A learning-rate schedule as SB3 writes one (`FloatSchedule`, `LinearSchedule`): a callable object."""

    def __init__(self, start: float) -> None:
        self.start = start

    def __call__(self, progress: float) -> float:
        return self.start * progress


def test_a_callable_object_is_read_by_its_fields_and_a_partial_by_its_arguments() -> None:
    """Failed before: any callable was left out by name, so a schedule's start compared identical when changed."""
    for make in (_Schedule, lambda x: functools.partial(_Schedule, x), lambda x: functools.partial(print, sep=x)):
        skipped: list[str] = []
        digests = [digest_value(object_state(Holder(make(x)), skipped)) for x in (2.0, 2.0, 5.0)]
        assert digests[0] == digests[1] != digests[2]
        assert all(name.startswith("value['func'] (") for name in skipped)  # a partial's function: named


def test_functions_methods_classes_and_torchs_callables_are_named_as_left_out() -> None:
    """And a callable object called in C: its fields are a compiler's caches, which differ between runs."""
    left_out = {
        "function": _advanced,
        "method": _Schedule(1.0).__call__,
        "builtin": print,
        "class": _Schedule,
        "method-wrapper": (1.0).__add__,
        "op": torch.ops.aten.add.default,
        "compiled": torch.compile(_advanced),
        "called in C, with fields": functools.lru_cache(_advanced),  # as a numba or jax compiled function
        "ufunc": np.add,
    }
    for name, value in left_out.items():
        skipped: list[str] = []
        object_state(Holder(value), skipped)
        assert len(skipped) == 1 and skipped[0].startswith("value ("), (name, skipped)


def test_an_object_built_in_c_with_no_fields_is_named_as_left_out() -> None:
    """One tripwire cannot read (no `__dict__`, no `__slots__`) is said to be left out, not digested as nothing."""
    skipped: list[str] = []
    object_state(Holder(itertools.count(5)), skipped)
    assert skipped == ["value (count: no fields tripwire can read)"]


@pytest.mark.parametrize("capture", [("return",), ("arg:weights",), ("args",)])
def test_captures_of_values_pass(tmp_path: Path, capture: tuple[str, ...]) -> None:
    assert _run(tmp_path, capture).ok


def test_a_checkpoint_that_digests_only_none_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "loop.py").write_text(LOOP)
    checkpoint = Checkpoint("__main__:Buffer.__init__", ("return",))  # __init__ returns None
    result = record(Scenario(name="none", script="loop.py", argv=["0.1"], checkpoints=[checkpoint]), tmp_path)
    assert result.status == "error"
    assert "capture 'return' digests no value: it digested nothing (only None)" in result.cause
    assert "capture the field that holds the data by name" in result.cause


EVENT_LOOP = """
import sys


class Stats:  # a metrics object handed to the logger: its repr shows its address
    def __init__(self, loss):
        self.loss, self.steps = loss, 3


def log(tag, stats):
    pass


if __name__ == "__main__":
    for step in range(2):
        log("train", Stats(float(sys.argv[1]) * step))
"""


def _logged(tmp_path: Path, loss: str, name: str) -> Result:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "loop.py").write_text(EVENT_LOOP)
    scenario = Scenario(
        name="events", script="loop.py", argv=[loss], event_calls=[EventCall("__main__:log", label="tag")]
    )
    return record(scenario, folder)


def test_an_event_argument_whose_repr_shows_its_address_is_logged_by_its_fields(tmp_path: Path) -> None:
    """`<Stats object at 0x7f...>` differs each run: two runs of one loop diverged, and a change inside compared
    as any other address change. Its fields are what the payload holds now."""
    base, again, changed = (_logged(tmp_path, loss, name) for loss, name in (("0.5", "a"), ("0.5", "b"), ("0.7", "c")))
    assert base.ok and again.ok and changed.ok
    assert compare_results(base, again).ok
    assert not compare_results(base, changed).ok
    assert jsonable(object()) == "<skipped object>"  # nothing to read: named, never an address


def test_what_a_checkpoints_exclude_names_is_not_said_again_as_left_out() -> None:
    """skrl's agent holds a tensorboard writer (locks, a thread) that its scenario excludes as `self.writer.*`: the
    note of what the capture left out named them all, burying what was left out by mistake."""

    class Writer:
        def __init__(self) -> None:
            self.lock = __import__("threading").Lock()

    class Agent:
        def __init__(self) -> None:
            self.writer = Writer()
            self.hooks = {"on-step": print}
            self.schedulers = [print, torch.zeros(1)]
            self.weights = torch.ones(2)

    skipped: list[str] = []
    object_state(Agent(), skipped)
    assert len(skipped) == 3, skipped
    assert not_excluded("self", skipped, ()) == skipped
    assert not_excluded("self", skipped, ("self.writer.*",)) == [s for s in skipped if "writer" not in s]
    kept = not_excluded("self", skipped, ("self.writer", "self.hooks.on-step", "self.schedulers.0"))
    assert kept == [], kept
    assert not_excluded("self", skipped, ("writer.*", "self.weights")) == skipped  # named as compare names them
    assert not_excluded("return", ["it (function)"], ("return",)) == []
