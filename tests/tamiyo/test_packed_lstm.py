"""The policy's LSTM on oneDNN-packed weights: bitwise `nn.LSTM`, and never stale after the weights change."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from esper.tamiyo import packed_lstm
from esper.tamiyo.policy import FactoredRecurrentActorCritic

pytestmark = pytest.mark.skipif(
    packed_lstm._OPS is None or not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN RNN"
)


def _lstm(inputs: int, hidden: int, seed: int = 0) -> nn.LSTM:
    torch.manual_seed(seed)
    return nn.LSTM(inputs, hidden, num_layers=1, batch_first=True)


def _state(batch: int, hidden: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(1, batch, hidden), torch.randn(1, batch, hidden)


def _assert_same(lstm: nn.LSTM, features: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]) -> None:
    with torch.no_grad():
        assert packed_lstm.usable(lstm, features, state)
        out, (h, c) = packed_lstm.packed_step(lstm, features, state)
        ref_out, (ref_h, ref_c) = lstm(features, state)
    assert out.shape == ref_out.shape and h.shape == ref_h.shape and c.shape == ref_c.shape
    assert torch.equal(out, ref_out) and torch.equal(h, ref_h) and torch.equal(c, ref_c)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("batch", "steps"), [(1, 1), (2, 1), (4, 1), (16, 1), (3, 7), (4, 25), (1, 25)])
@pytest.mark.parametrize("training", [True, False])
def test_bitwise_the_modules_result(threads: int, batch: int, steps: int, training: bool) -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for inputs, hidden in ((512, 512), (40, 128)):
            lstm = _lstm(inputs, hidden).train(training)
            _assert_same(lstm, torch.randn(batch, steps, inputs), _state(batch, hidden))
    finally:
        torch.set_num_threads(before)


def test_the_result_differs_without_the_modules_time_major_copy() -> None:
    """The op reads its input as contiguous time-major memory: handing it the transposed view (what `nn.LSTM` makes
    contiguous first) gives other numbers, so the comparison above can tell a wrong call from a right one."""
    lstm = _lstm(64, 64)
    features, (h, c) = torch.randn(3, 5, 64), _state(3, 64)
    assert packed_lstm._OPS is not None
    with torch.no_grad():
        w_ih, w_hh = packed_lstm._packed_weights(lstm)
        wrong = packed_lstm._OPS[1](
            features.transpose(0, 1), w_ih, w_hh, lstm.bias_ih_l0, lstm.bias_hh_l0, h[0], c[0], False, [], 2, 64, 1,
            True, False, True, True,
        )  # fmt: skip
        reference, _ = lstm(features, (h, c))
    assert not torch.equal(wrong[0].transpose(0, 1), reference)


def _step(lstm: nn.LSTM, optimizer: torch.optim.Optimizer) -> None:
    optimizer.zero_grad()
    lstm(torch.randn(2, 3, lstm.input_size))[0].square().mean().backward()
    optimizer.step()


@pytest.mark.parametrize(
    "update",
    [
        pytest.param(lambda ps: torch.optim.Adam(ps, lr=0.01, fused=True), id="fused-adam"),
        pytest.param(lambda ps: torch.optim.Adam(ps, lr=0.01, foreach=True), id="foreach-adam"),
        pytest.param(lambda ps: torch.optim.Adam(ps, lr=0.01, foreach=False), id="for-loop-adam"),
        pytest.param(lambda ps: torch.optim.SGD(ps, lr=0.1), id="sgd"),
    ],
)
def test_repacked_after_an_optimizer_step(update) -> None:  # type: ignore[no-untyped-def]
    lstm = _lstm(32, 48)
    features, state = torch.randn(2, 1, 32), _state(2, 48)
    _assert_same(lstm, features, state)  # packs
    before = lstm.weight_ih_l0.detach().clone()
    _step(lstm, update(list(lstm.parameters())))
    assert not torch.equal(before, lstm.weight_ih_l0)
    _assert_same(lstm, features, state)


def test_fused_adam_leaves_the_version_counter_so_the_step_hook_is_needed() -> None:
    """Fused Adam (the trainer's update) writes the weights without bumping their version counters: the key alone
    would keep the stale copy; the optimizer step hook drops it."""
    lstm = _lstm(32, 48)
    features, state = torch.randn(2, 1, 32), _state(2, 48)
    _assert_same(lstm, features, state)
    version = lstm.weight_ih_l0._version
    stale = packed_lstm._PACKED[lstm]
    _step(lstm, torch.optim.Adam(lstm.parameters(), lr=0.01, fused=True))
    assert lstm.weight_ih_l0._version == version
    assert lstm not in packed_lstm._PACKED  # dropped by the hook
    with torch.no_grad():
        stale_out = packed_lstm._OPS[1](  # type: ignore[index]
            features.transpose(0, 1).contiguous(), *stale.weights, lstm.bias_ih_l0, lstm.bias_hh_l0, state[0][0],
            state[1][0], False, [], 2, 48, 1, True, False, True, True,
        )  # fmt: skip
        reference, _ = lstm(features, state)
    assert not torch.equal(stale_out[0].transpose(0, 1), reference)  # what a stale copy would have returned
    _assert_same(lstm, features, state)


def test_an_optimizer_over_other_weights_keeps_the_copy() -> None:
    lstm, other = _lstm(16, 16), nn.Linear(4, 4)
    _assert_same(lstm, torch.randn(1, 1, 16), _state(1, 16))
    packed = packed_lstm._PACKED[lstm]
    optimizer = torch.optim.SGD(other.parameters(), lr=0.1)
    other(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    assert packed_lstm._PACKED[lstm] is packed


def test_repacked_after_load_state_dict_and_to() -> None:
    lstm, donor = _lstm(16, 24), _lstm(16, 24, seed=1)
    features, state = torch.randn(3, 1, 16), _state(3, 24)
    _assert_same(lstm, features, state)
    lstm.load_state_dict(donor.state_dict())
    _assert_same(lstm, features, state)
    with torch.no_grad():
        lstm.weight_hh_l0.mul_(0.5)
    _assert_same(lstm, features, state)
    lstm.double().float()  # new storage for every weight
    _assert_same(lstm, features, state)


def test_not_used_where_the_module_would_not_run_onednn_or_gradients_are_on() -> None:
    lstm = _lstm(8, 8)
    features, state = torch.randn(2, 1, 8), _state(2, 8)
    assert not packed_lstm.usable(lstm, features, state)  # grad mode on: the update's backward needs the module
    with torch.no_grad():
        assert packed_lstm.usable(lstm, features, state)
        assert not packed_lstm.usable(lstm, features.double(), (state[0].double(), state[1].double()))
        torch.backends.mkldnn.enabled = False  # type: ignore[attr-defined]  # a settable property of torch's
        try:
            assert not packed_lstm.usable(lstm, features, state)
        finally:
            torch.backends.mkldnn.enabled = True  # type: ignore[attr-defined]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not packed_lstm.usable(lstm, features, state)
        two_layers = nn.LSTM(8, 8, num_layers=2, batch_first=True)
        assert not packed_lstm.usable(two_layers, features, (torch.zeros(2, 2, 8), torch.zeros(2, 2, 8)))
        assert not packed_lstm.usable(nn.LSTM(8, 8), features, state)  # time-major module


def test_the_policys_rollout_step_runs_packed_and_matches_the_module() -> None:
    policy = FactoredRecurrentActorCritic(state_dim=20, num_slots=3, hidden_dim=64, lstm_hidden_dim=96, seed=3)
    obs, blueprints = torch.randn(4, 20), torch.randint(0, 14, (4, 3))
    hidden = (torch.randn(1, 4, 96), torch.randn(1, 4, 96))
    with torch.no_grad():
        packed = policy(obs, blueprints, hidden)
        assert policy.lstm in packed_lstm._PACKED
        features = policy._encode(obs, blueprints).unsqueeze(1)
        out, new_hidden = policy.lstm(features, hidden)
    logits, values, after = packed
    assert torch.equal(after[0], new_hidden[0]) and torch.equal(after[1], new_hidden[1])
    assert torch.equal(values, policy.value_head(out.squeeze(1)).squeeze(-1).detach())
    for name, head in policy.heads.items():
        assert torch.equal(logits[name], head(out.squeeze(1)).detach())
