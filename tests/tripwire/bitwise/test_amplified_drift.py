"""Low-bit drift that grows downstream is told from a value change, and every figure names its own tensor.

A reassociation moves a network's weights by a few ULPs; a bias whose gradient is a near-cancelling sum (residuals
that average to almost zero) turns those few ULPs into a large relative change of its gradient, and Adam's first
step (about `lr * sign(g)`, whatever |g|) carries it to the bias at full scale. esper-lite's 71069ae4 did exactly
this (docs/case-study-esper-lite.md). The same toy model, one step, three ways: a regrouped matmul, that regrouping
on near-cancelling residuals, and a 10 % learning-rate change.
"""

from __future__ import annotations

import torch

from tripwire.bitwise.magnitude import (
    AMPLIFIED,
    AMPLIFIED_SCALE_ULPS,
    DRIFT,
    DRIFT_SCALE_ULPS,
    VALUE_CHANGE,
    Magnitude,
    TensorDelta,
    checkpoint_deltas,
    classify,
)


def one_step(*, regrouped: bool, residual_mean: float, lr: float = 1e-3) -> dict[str, torch.Tensor]:
    """The weights after one Adam step; the targets' noise has exactly `residual_mean` mean per output."""
    torch.manual_seed(0)
    x = torch.randn(256, 8)
    body, head = torch.nn.Linear(8, 32), torch.nn.Linear(32, 4)
    torch.nn.init.zeros_(head.bias)
    with torch.no_grad():
        noise = torch.randn(256, 4)
        target = head(torch.tanh(body(x))) + 0.01 * (noise - noise.mean(0) + residual_mean)
    optimizer = torch.optim.Adam([*body.parameters(), *head.parameters()], lr=lr)
    hidden = torch.tanh(body(x))
    if regrouped:  # the same matmul summed in two halves: a few ULPs apart
        out = hidden[:, :13] @ head.weight[:, :13].T + hidden[:, 13:] @ head.weight[:, 13:].T + head.bias
    else:
        out = head(hidden)
    loss = ((out - target) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return {f"body.{k}": v.detach().clone() for k, v in body.state_dict().items()} | {
        f"head.{k}": v.detach().clone() for k, v in head.state_dict().items()
    }


def magnitude(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> Magnitude:
    deltas, unmeasured = checkpoint_deltas([name for name in a if not torch.equal(a[name], b[name])], a, b)
    assert not unmeasured
    return Magnitude(tuple(deltas), classify(deltas))


def test_a_regrouped_sum_is_drift_in_every_tensor() -> None:
    result = magnitude(one_step(regrouped=False, residual_mean=1e-3), one_step(regrouped=True, residual_mean=1e-3))
    assert result.kind == DRIFT and result.within_drift == len(result.deltas) == 4


def test_the_same_regrouping_grown_by_adam_on_a_near_zero_gradient_is_amplified_drift() -> None:
    result = magnitude(one_step(regrouped=False, residual_mean=1e-4), one_step(regrouped=True, residual_mean=1e-4))
    assert result.kind == AMPLIFIED, result.format()
    bias = next(delta for delta in result.deltas if delta.name == "head.bias")
    assert DRIFT_SCALE_ULPS < bias.scale_ulps <= AMPLIFIED_SCALE_ULPS  # grown past drift, where the gradient cancels
    assert result.within_drift == 3  # everything else moved by a few ULPs
    assert result.summary().startswith(f"{AMPLIFIED}: max |Δ| {bias.max_abs:.3g} = ")
    assert "in head.bias; 3 of 4 tensors within drift" in result.summary()  # one tensor's own figures, named
    assert any(line.strip().startswith("grew beyond it in: head.bias ") for line in result.format())


def test_a_learning_rate_change_is_a_value_change() -> None:
    result = magnitude(
        one_step(regrouped=False, residual_mean=1e-4), one_step(regrouped=False, residual_mean=1e-4, lr=1.1e-3)
    )
    assert result.kind == VALUE_CHANGE and result.within_drift == 0


def _delta(name: str, scale_ulps: float, *, floating: bool = True) -> TensorDelta:
    return TensorDelta(name, 1e-8, scale_ulps, scale_ulps, 1, 8, floating)


def test_the_rule_stays_on_the_safe_side() -> None:
    drift = [_delta(f"w{i}", 3.0) for i in range(9)]
    assert classify([*drift, _delta("b", 900.0)]) == AMPLIFIED
    assert classify([*drift, _delta("b", AMPLIFIED_SCALE_ULPS * 2)]) == VALUE_CHANGE  # grown too far to tell
    assert classify([*drift[:3], *[_delta(f"b{i}", 900.0) for i in range(2)]]) == VALUE_CHANGE  # too widespread
    assert classify([_delta("w", 3.0), _delta("b", 900.0)]) == VALUE_CHANGE  # too few tensors to judge
    assert classify([*drift, _delta("steps", 900.0, floating=False)]) == VALUE_CHANGE  # an integer changed
