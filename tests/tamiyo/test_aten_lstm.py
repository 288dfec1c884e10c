"""The policy's CPU LSTM on ATen's kernels (esper/tamiyo/aten_lstm.py): nn.LSTM's function, no oneDNN op, and the
same bits whatever oneDNN's ISA (the CPU property that moved oneDNN's own LSTM between machines)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from esper.tamiyo.aten_lstm import lstm_on_aten, supported
from esper.tamiyo.policy import FactoredRecurrentActorCritic


def _lstm(features: int, hidden: int, seed: int) -> nn.LSTM:
    torch.manual_seed(seed)
    lstm = nn.LSTM(features, hidden, batch_first=True)
    with torch.no_grad():
        for param in lstm.parameters():
            param.normal_(0.0, 0.3)
    return lstm


@pytest.mark.parametrize(("k", "t", "f", "h"), [(1, 1, 8, 4), (2, 1, 64, 64), (4, 5, 32, 16), (3, 25, 16, 8)])
def test_it_computes_what_nn_lstm_computes(k: int, t: int, f: int, h: int) -> None:
    lstm = _lstm(f, h, seed=k * 100 + t)
    features = torch.randn(k, t, f, requires_grad=True)
    state = (torch.randn(1, k, h), torch.randn(1, k, h))
    expected, (h_expected, c_expected) = lstm(features, state)
    (expected.square().sum() + c_expected.sum()).backward()
    expected_grads = [p.grad.clone() for p in (features, *lstm.parameters()) if p.grad is not None]
    lstm.zero_grad()
    features.grad = None

    out, (h_out, c_out) = lstm_on_aten(lstm, features, state)
    (out.square().sum() + c_out.sum()).backward()
    grads = [p.grad for p in (features, *lstm.parameters()) if p.grad is not None]

    assert out.shape == expected.shape and h_out.shape == h_expected.shape and c_out.shape == c_expected.shape
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(h_out, h_expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(c_out, c_expected, rtol=1e-5, atol=1e-5)
    assert len(grads) == len(expected_grads) == 5
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_a_wrong_gate_order_would_be_seen() -> None:
    """The comparison above can fail: swapping two gates' roles gives another function."""
    lstm = _lstm(8, 4, seed=3)
    features, state = torch.randn(2, 3, 8), (torch.randn(1, 2, 4), torch.randn(1, 2, 4))
    expected, _ = lstm(features, state)
    with torch.no_grad():
        swapped = _lstm(8, 4, seed=3)
        for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
            i, f, g, o = getattr(swapped, name).chunk(4)
            getattr(swapped, name).copy_(torch.cat([f, i, g, o]))
    out, _ = lstm_on_aten(swapped, features, state)
    assert not torch.allclose(out, expected, rtol=1e-3, atol=1e-3)


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.names.add(str(func))
        return func(*args, **(kwargs or {}))


def _policy() -> FactoredRecurrentActorCritic:
    return FactoredRecurrentActorCritic(state_dim=12, num_slots=2, hidden_dim=16, lstm_hidden_dim=8, seed=0)


def test_the_policy_runs_no_onednn_op_on_cpu_with_or_without_gradients() -> None:
    policy = _policy()
    obs, blueprints = torch.randn(3, 4, 12), torch.zeros(3, 4, 2, dtype=torch.long)
    hidden = policy.initial_hidden(3, "cpu")
    with _Ops() as training:
        _, values, _ = policy(obs, blueprints, hidden)
        values.sum().backward()
    with torch.no_grad(), _Ops() as rollout:
        policy(obs[:, 0], blueprints[:, 0], hidden)
    for seen in (training.names, rollout.names):
        assert not [name for name in seen if "mkldnn" in name or "rnn" in name], seen
        assert "aten.addmm.default" in seen or "aten.mm.default" in seen  # the recurrence did run


def test_nn_lstm_itself_would_run_onednn_here() -> None:
    """The guard above has something to catch: on this torch the module's CPU path is oneDNN's."""
    if not (torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled):
        pytest.skip("this torch build has no oneDNN: nn.LSTM runs on ATen here too")
    lstm = _lstm(8, 4, seed=1)
    with torch.no_grad(), _Ops() as ops:
        lstm(torch.randn(2, 1, 8), (torch.zeros(1, 2, 4), torch.zeros(1, 2, 4)))
    assert any("mkldnn_rnn_layer" in name for name in ops.names), ops.names


_DIGEST = """
import hashlib, json, torch
torch.set_num_threads(1)
from esper.tamiyo.policy import FactoredRecurrentActorCritic
policy = FactoredRecurrentActorCritic(state_dim=12, num_slots=2, hidden_dim=64, lstm_hidden_dim=128, seed=0)
with torch.no_grad():
    for p in policy.lstm.parameters():
        p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
obs = torch.randn(4, 6, 12, generator=torch.Generator().manual_seed(1))
logits, values, (h, c) = policy(obs, torch.zeros(4, 6, 2, dtype=torch.long), policy.initial_hidden(4, "cpu"))
values.sum().backward()
parts = [values, h, c, *[p.grad for p in policy.lstm.parameters()]]
print(json.dumps([hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest() for t in parts]))
"""


def _digests(isa: str) -> list[str]:
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": isa, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", _DIGEST], env=env, capture_output=True, text=True, check=True)
    digests: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return digests


def test_the_policy_recurrence_does_not_move_with_onednn_isa() -> None:
    """oneDNN's LSTM gave other bits under another `ONEDNN_MAX_CPU_ISA` on one machine (and under one pin on two CPU
    models); the policy's values, state and LSTM gradients now do not depend on oneDNN at all."""
    assert _digests("AVX2") == _digests("SSE41")


def test_unsupported_shapes_are_refused_with_the_fix() -> None:
    assert supported(nn.LSTM(4, 3, batch_first=True))
    refused = (
        nn.LSTM(4, 3),
        nn.LSTM(4, 3, batch_first=True, num_layers=2),
        nn.LSTM(4, 3, batch_first=True, bias=False),
    )
    for lstm in refused:
        assert not supported(lstm)
        with pytest.raises(ValueError, match="call the module itself"):
            lstm_on_aten(lstm, torch.zeros(1, 1, 4), (torch.zeros(1, 1, 3), torch.zeros(1, 1, 3)))
