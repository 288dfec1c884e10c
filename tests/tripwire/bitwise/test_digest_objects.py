"""An object in a checkpoint (a dataclass of tensors, an optimizer, a deque of returns) is digested by its fields,
never by its repr: a repr shows a large tensor's ends only (`tensor([0., 0., ..., 0.])`), an optimizer's settings
only, and a plain object's address, so a change in the middle compared identical and two equal objects differed."""

from __future__ import annotations

import collections
import dataclasses
import warnings

import numpy as np
import pytest
import torch

from tripwire.bitwise.trajectory import checkpoint_entries, digest_value


@dataclasses.dataclass
class Rollout:
    observations: torch.Tensor
    returns: collections.deque[float]
    seed: int


def _rollout(middle: float = 0.0, last_return: float = 1.0) -> Rollout:
    observations = torch.zeros(4000)
    observations[2000] = middle
    return Rollout(observations, collections.deque([0.5, last_return], maxlen=100), seed=7)


def test_a_change_in_the_middle_of_an_objects_large_tensor_changes_its_digest() -> None:
    for wrap in (lambda r: r, lambda r: [r, 1.0], lambda r: {"rollout": r}, lambda r: (r,)):
        assert digest_value(wrap(_rollout())) == digest_value(wrap(_rollout()))  # equal objects: equal digests
        assert digest_value(wrap(_rollout())) != digest_value(wrap(_rollout(middle=1.0)))
        assert digest_value(wrap(_rollout())) != digest_value(wrap(_rollout(last_return=2.0)))


def test_an_object_checkpoint_is_named_by_its_fields() -> None:
    names = [name for name, *_ in checkpoint_entries({"rollout": _rollout()})]
    assert names == ["rollout.observations", "rollout.returns", "rollout.seed"]
    assert [name for name, *_ in checkpoint_entries(_rollout())] == ["observations", "returns", "seed"]


def test_an_optimizer_inside_a_checkpoint_is_digested_by_its_state() -> None:
    def stepped(lr: float) -> torch.optim.Optimizer:
        weight = torch.nn.Parameter(torch.ones(3))
        optimizer = torch.optim.Adam([weight], lr=0.1)
        weight.grad = torch.full((3,), lr)
        optimizer.step()
        return optimizer

    assert digest_value({"opt": stepped(1.0)}) == digest_value({"opt": stepped(1.0)})
    assert digest_value({"opt": stepped(1.0)}) != digest_value({"opt": stepped(2.0)})


def test_plain_values_and_arrays_digest_as_before() -> None:
    """What was never an object keeps its digest: plain values, lists of them, NumPy arrays and scalars."""
    assert digest_value([1.0, 2, "a", None]) == digest_value([1.0, 2, "a", None])
    assert digest_value(np.arange(3.0)) == digest_value(torch.arange(3.0, dtype=torch.float64))
    assert digest_value(np.float32(1.5)) == digest_value(1.5)


def test_two_keys_of_one_name_are_both_digested() -> None:
    """A key `"a.b"` and `a` -> `b` are named alike (`str(key)`, joined by dots), and so were `1` and `"1"`. The
    later is numbered (`a.b#2`), so a change to either changes the digest; the earlier was replaced and passed."""
    for clash, change in (
        ({"a.b": torch.ones(2), "a": {"b": torch.zeros(2)}}, ("a.b", torch.full((2,), 5.0))),
        ({1: 1.0, "1": 2.0}, (1, 9.0)),
        ({"x": {"y.z": 1, "y": {"z": 1}}, "x.y.z#2": 3}, ("x.y.z#2", 4)),  # a real `#2` keeps its name
    ):
        key, value = change
        assert digest_value(clash) != digest_value({**clash, key: value})
        assert len(digest_value(clash)) == len(checkpoint_entries(clash)) == 2 + ("x" in clash)
    names = [name for name, *_ in checkpoint_entries({"x": {"y.z": 1, "y": {"z": 1}}, "x.y.z#2": 3})]
    assert names == ["x.y.z", "x.y.z#3", "x.y.z#2"]
    assert [name for name, *_ in checkpoint_entries({"a.b": 1, "c": {"d": 2}})] == ["a.b", "c.d"]  # no clash: as before


def test_a_key_keeps_its_kind_where_its_text_would_hide_it() -> None:
    """Failed before: `{1: x}` and `{"1": x}` were both named `1`, so a state whose int keys came back as strings (a
    checkpoint round-tripped through JSON) compared identical. A string key that spells another kind's value is
    named quoted; an int key, and every string that spells none, keeps its name."""
    for as_is, as_text in (
        ({0: {"step": 1.0}}, {"0": {"step": 1.0}}),
        ({1.5: 1.0}, {"1.5": 1.0}),
        ({True: 1.0, None: 2.0}, {"True": 1.0, "None": 2.0}),
        ({(0, 1): 1.0}, {"(0, 1)": 1.0}),
        ({float("nan"): 1.0}, {"nan": 1.0}),
    ):
        assert digest_value(as_is) != digest_value(as_text), as_is
    names = [name for name, *_ in checkpoint_entries({"state": {0: {"exp_avg": 1.0}}, "1": 2.0, "bias": 3.0})]
    assert names == ["state.0.exp_avg", "'1'", "bias"]
    plain = {"lr": 1.0, "Normal": 2.0, "ninety": 3.0, "b.c": 4.0, "Training": 5.0, "-x": 6.0, "[1]x": 7.0}
    assert [name for name, *_ in checkpoint_entries(plain)] == list(plain)


class Forwarding:
    """A wrapper that forwards an attribute it lacks to what it wraps, warning as it does (gymnasium 0.29's `Wrapper`
    warns "env.state_dict to get variables from other wrappers is deprecated"), with slots left unset."""

    __slots__ = ("inner", "unset")

    def __init__(self, inner: object) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> object:
        warnings.warn(f"forwarded {name}", UserWarning, stacklevel=2)
        return getattr(self.inner, name)


def test_a_digest_never_asks_an_object_for_what_it_lacks() -> None:
    """Digesting an object looks up `state_dict` on its class and reads its own fields: a `__getattr__` that forwards
    or warns is never run, so a capture prints no warning of the loop's wrapper and spends no 'once' of it."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        digests = [digest_value(Forwarding(Rollout(torch.full((3,), x), collections.deque(), 1))) for x in (0.0, 1.0)]
    assert [str(warning.message) for warning in caught] == []
    assert digests[0] != digests[1]


def test_capturing_a_gymnasium_wrapper_prints_no_warning() -> None:
    gymnasium = pytest.importorskip("gymnasium")
    env = gymnasium.wrappers.RecordEpisodeStatistics(gymnasium.make("CartPole-v1"))
    env.reset(seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        digest_value(env)
    assert [str(warning.message) for warning in caught] == []


class Saver:
    """A `state_dict` that is not torch's protocol: it needs a path."""

    def __init__(self, weights: torch.Tensor) -> None:
        self.weights = weights

    def state_dict(self, path: str) -> dict[str, object]:
        raise AssertionError("tripwire called a state_dict that needs an argument")


def test_a_state_dict_that_needs_an_argument_leaves_the_object_read_by_its_fields() -> None:
    assert digest_value(Saver(torch.zeros(3))) == digest_value(Saver(torch.zeros(3)))
    assert digest_value(Saver(torch.zeros(3))) != digest_value(Saver(torch.ones(3)))


def test_modules_and_generators_in_a_list_are_digested_by_their_state() -> None:
    """A list of plain values is digested whole by their exact text; a module or generator in one was too, so by its
    repr: layers and an address, never weights or state. `[actor, critic]` compared identical after training, and
    two equal generators differed by address."""
    torch.manual_seed(0)
    actor = torch.nn.Linear(2, 2)
    torch.manual_seed(1)
    trained = torch.nn.Linear(2, 2)
    for wrap in (lambda m: [m, 1.0], lambda m: (m,), lambda m: {"nets": [m]}):
        assert digest_value(wrap(actor)) != digest_value(wrap(trained))
    first, second = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    assert digest_value([first, 1]) == digest_value([second, 1])
    torch.rand(1, generator=second)
    assert digest_value([first, 1]) != digest_value([second, 1])
