"""The train step's SGD step and zero_grad (esper/tolaria/optim_steps.py): torch's arithmetic called directly gives
`SGD.step`'s bits and state, and whatever torch's wrapper would have done (hooks, a patched step, a profiler's
labels, another optimizer, a differentiable group, sparse gradients) sends the call through the optimizer itself."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

from esper.tolaria import optim_steps
from esper.tolaria.optim_steps import sgd_step, zero_grads

Factory = Callable[[list[nn.Parameter]], torch.optim.Optimizer]

CONFIGS: dict[str, Factory] = {
    "host: foreach, momentum, weight decay": lambda p: torch.optim.SGD(
        p, lr=0.05, momentum=0.9, weight_decay=5e-4, foreach=True
    ),
    "seed: torch's default route": lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9),
    "nesterov and dampening 0": lambda p: torch.optim.SGD(p, lr=0.02, momentum=0.8, nesterov=True),
    "dampening, maximize": lambda p: torch.optim.SGD(p, lr=0.02, momentum=0.7, dampening=0.1, maximize=True),
    "no momentum (no buffers)": lambda p: torch.optim.SGD(p, lr=0.1),
    "two groups": lambda p: torch.optim.SGD(
        [{"params": p[:2]}, {"params": p[2:], "lr": 0.003, "weight_decay": 1e-3}], lr=0.05, momentum=0.9
    ),
}


def _params(seed: int) -> list[nn.Parameter]:
    generator = torch.Generator().manual_seed(seed)
    shapes = [(8, 3, 3, 3), (8,), (16, 8), (10,), (5,)]
    return [nn.Parameter(torch.randn(shape, generator=generator)) for shape in shapes]


def _grads(params: list[nn.Parameter], step: int) -> None:
    generator = torch.Generator().manual_seed(100 + step)
    for index, param in enumerate(params):
        if index == 3 and step == 2:  # a parameter without a gradient on one step is skipped
            param.grad = None
            continue
        param.grad = torch.randn(param.shape, generator=generator)


def _train(factory: Factory, step: Callable[[torch.optim.Optimizer], None], steps: int = 5) -> tuple[Any, ...]:
    params = _params(0)
    optimizer = factory(params)
    for i in range(steps):
        _grads(params, i)
        step(optimizer)
    return tuple(p.detach().clone() for p in params), optimizer.state_dict()


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


@pytest.mark.parametrize("config", CONFIGS)
def test_the_direct_step_gives_torchs_bits_and_state(config: str) -> None:
    calls = []

    def counted(optimizer: torch.optim.Optimizer) -> None:
        calls.append(optim_steps._direct(optimizer))
        sgd_step(optimizer)

    got = _train(CONFIGS[config], counted)
    want = _train(CONFIGS[config], lambda optimizer: optimizer.step())
    assert all(calls)  # every step went the direct way
    assert _same(got, want)


def test_the_direct_step_differs_from_a_step_that_skips_weight_decay() -> None:
    """The equality above can see a wrong setting: the same steps without weight decay end elsewhere."""

    def without_decay(optimizer: torch.optim.Optimizer) -> None:
        for group in optimizer.param_groups:
            group["weight_decay"] = 0.0
        sgd_step(optimizer)

    factory = CONFIGS["host: foreach, momentum, weight decay"]
    assert not _same(_train(factory, without_decay), _train(factory, lambda optimizer: optimizer.step()))


def test_zero_grads_sets_every_gradient_to_none() -> None:
    params = _params(1)
    optimizer = CONFIGS["two groups"](params)
    _grads(params, 0)
    zero_grads(optimizer)
    assert all(param.grad is None for param in params)


def _stepped_by_torch(optimizer: torch.optim.Optimizer) -> bool:
    """Whether `sgd_step` went through `optimizer.step` (seen by a post-hook added only around the call)."""
    seen: list[bool] = []
    original = optimizer.step
    optimizer.step = lambda *a, **k: (seen.append(True), original(*a, **k))[1]  # type: ignore[method-assign]
    try:
        sgd_step(optimizer)
    finally:
        del optimizer.step
    return bool(seen)


def _sgd(**kwargs: Any) -> torch.optim.SGD:
    params = _params(2)
    _grads(params, 0)
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, **kwargs)


def test_an_optimizer_step_hook_runs() -> None:
    optimizer = _sgd()
    ran: list[str] = []
    optimizer.register_step_pre_hook(lambda *_: ran.append("pre"))
    optimizer.register_step_post_hook(lambda *_: ran.append("post"))
    sgd_step(optimizer)
    assert ran == ["pre", "post"]


def test_a_global_optimizer_hook_runs() -> None:
    optimizer = _sgd()
    ran: list[str] = []
    handle = register_optimizer_step_post_hook(lambda *_: ran.append("global"))
    try:
        sgd_step(optimizer)
    finally:
        handle.remove()
    assert ran == ["global"]


def test_a_step_patched_on_the_class_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """As a tripwire region or checkpoint on `torch.optim:SGD.step` patches it, wrapping torch's own."""
    ran: list[str] = []
    torch_step = torch.optim.SGD.step

    @functools.wraps(torch_step)
    def patched(self: torch.optim.SGD, *args: Any, **kwargs: Any) -> Any:
        ran.append("patched")
        return torch_step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.SGD, "step", patched)
    sgd_step(_sgd())
    assert ran == ["patched"]


def test_a_step_set_on_the_instance_runs() -> None:
    assert _stepped_by_torch(_sgd())


def test_a_profiler_keeps_torchs_labels() -> None:
    optimizer = _sgd()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        zero_grads(optimizer)
        _grads(optimizer.param_groups[0]["params"], 1)
        sgd_step(optimizer)
    names = {event.name for event in profile.events()}
    assert {"Optimizer.zero_grad#SGD.zero_grad", "Optimizer.step#SGD.step"} <= names


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.optim.Adam(_params(3), lr=0.1),
        lambda: _sgd(fused=True),
    ],
    ids=["another optimizer", "a fused group"],
)
def test_other_optimizers_and_groups_step_themselves(make: Callable[[], torch.optim.Optimizer]) -> None:
    optimizer = make()
    for param in optimizer.param_groups[0]["params"]:
        param.grad = torch.ones_like(param)
    assert not optim_steps._direct(optimizer)
    assert _stepped_by_torch(optimizer)


def test_a_differentiable_group_is_left_to_torch() -> None:
    assert not optim_steps._direct(_sgd(differentiable=True))


def test_sparse_gradients_step_through_torch_with_its_result() -> None:
    def train(step: Callable[[torch.optim.Optimizer], None]) -> torch.Tensor:
        torch.manual_seed(0)
        embedding = nn.Embedding(10, 4, sparse=True)
        optimizer = torch.optim.SGD(embedding.parameters(), lr=0.1, momentum=0.9)
        for i in range(3):
            embedding(torch.tensor([i, i + 1, 3])).sum().backward()
            step(optimizer)
            optimizer.zero_grad()
        return embedding.weight.detach().clone()

    assert torch.equal(train(sgd_step), train(lambda optimizer: optimizer.step()))
    embedding = nn.Embedding(10, 4, sparse=True)
    embedding(torch.tensor([1])).sum().backward()
    assert _stepped_by_torch(torch.optim.SGD(embedding.parameters(), lr=0.1, momentum=0.9))


def test_a_sparse_group_after_a_dense_one_steps_each_group_once() -> None:
    def train(step: Callable[[torch.optim.Optimizer], None]) -> tuple[torch.Tensor, ...]:
        torch.manual_seed(0)
        linear, embedding = nn.Linear(4, 2), nn.Embedding(10, 4, sparse=True)
        optimizer = torch.optim.SGD(
            [{"params": linear.parameters()}, {"params": embedding.parameters(), "lr": 0.2}], lr=0.1, momentum=0.9
        )
        for i in range(3):
            linear(embedding(torch.tensor([i, i + 1, 3]))).sum().backward()
            step(optimizer)
            zero_grads(optimizer)
        return tuple(p.detach().clone() for p in (*linear.parameters(), embedding.weight))

    assert _same(train(sgd_step), train(lambda optimizer: optimizer.step()))


def test_a_wrapper_from_outside_torch_is_not_torchs() -> None:
    torch_step = torch.optim.SGD.step
    assert optim_steps._is_torchs(torch_step)
    assert not optim_steps._is_torchs(functools.wraps(torch_step)(lambda *a, **k: torch_step(*a, **k)))
    assert not optim_steps._is_torchs(len)  # no Python code at all
