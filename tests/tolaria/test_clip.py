"""The engine's gradient clipping is torch's `clip_grad_norm_`, bit for bit, without its per-call grouping."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from esper.kasmina.model import MorphogeneticModel
from esper.tolaria.engine import clip_grad_norm_


def _pair(seed: int) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(seed)
    first = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.LazyLinear(5))
    first(torch.zeros(1, 3, 6, 6))
    second = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(64, 5))
    second.load_state_dict(first.state_dict())
    return first, second


@pytest.mark.parametrize("max_norm", [1e-3, 0.5, 1.0, 2.0, 1e6])  # 1.0: the trainer's, which skips a multiply
def test_the_same_norm_and_gradients_as_torch(max_norm: float) -> None:
    for seed in range(20):
        reference, ours = _pair(seed)
        x = torch.randn(4, 3, 6, 6) * 10.0 ** (seed % 7 - 3)
        for model in (reference, ours):
            model(x).square().sum().backward()
        expected = nn.utils.clip_grad_norm_(list(reference.parameters()), max_norm)
        found = clip_grad_norm_(list(ours.parameters()), max_norm)
        assert torch.equal(found, expected)
        for a, b in zip(reference.parameters(), ours.parameters()):
            assert a.grad is not None and b.grad is not None and torch.equal(a.grad, b.grad)


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
@pytest.mark.parametrize("max_norm", [1.0, 0.5])
def test_non_finite_gradients_clip_as_torch_does(bad: float, max_norm: float) -> None:
    reference, ours = _pair(0)
    for model in (reference, ours):
        model(torch.ones(2, 3, 6, 6)).sum().backward()
        next(model.parameters()).grad.view(-1)[0] = bad  # type: ignore[union-attr]
    expected = nn.utils.clip_grad_norm_(list(reference.parameters()), max_norm)
    found = clip_grad_norm_(list(ours.parameters()), max_norm)
    torch.testing.assert_close(found, expected, rtol=0, atol=0, equal_nan=True)
    for a, b in zip(reference.parameters(), ours.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=0, atol=0, equal_nan=True)


def test_mixed_dtypes_and_no_gradients_go_to_torch() -> None:
    params = [nn.Parameter(torch.ones(3)), nn.Parameter(torch.ones(2, dtype=torch.float64))]
    for param in params:
        param.grad = torch.full_like(param, 4.0)
    expected = torch.linalg.vector_norm(torch.tensor([4.0 * 3**0.5, 4.0 * 2**0.5]))
    assert torch.allclose(clip_grad_norm_(params, 1.0).double(), expected.double())
    assert clip_grad_norm_([nn.Parameter(torch.ones(2))], 1.0).item() == 0.0


def test_host_parameters_follow_a_conversion() -> None:
    from esper.kasmina.host import CNNHost
    from esper.leyline import get_task_spec

    model = MorphogeneticModel(CNNHost(get_task_spec("cifar_baseline"), init_seed=0), ("r0c0",))
    before = model.host_parameters()
    assert [id(p) for p in before] == [id(p) for p in model.host.parameters()]
    torch.__future__.set_overwrite_module_params_on_conversion(True)  # .double() makes new Parameter objects
    try:
        model.double()
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(False)
    assert not set(map(id, before)) & set(map(id, model.host.parameters()))
    assert all(p.dtype == torch.float64 for p in model.host_parameters())
    assert [id(p) for p in model.host_parameters()] == [id(p) for p in model.host.parameters()]
