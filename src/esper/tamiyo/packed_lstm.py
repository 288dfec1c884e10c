"""The policy's LSTM weights kept in oneDNN's blocked layout between no-grad steps on CPU.

On CPU, `nn.LSTM` runs through oneDNN (`aten.mkldnn_rnn_layer`), which reorders both weight matrices into its
blocked layout on every call: for the policy's pair of [2048, 512] matrices that is about 2.3 ms of a 2.5 ms
one-step call on one thread. The rollout calls the LSTM once per epoch (and the bootstrap once per round) with the
weights unchanged between PPO updates, so `packed_step` reorders them once, with the op inductor's freezing pass
uses for the same purpose (`mkldnn._reorder_mkldnn_rnn_layer_weight`), and then calls the op `nn.LSTM` calls, with
the arguments it passes, on the reordered copy. A reorder moves bytes and computes nothing, so every result is
bitwise `nn.LSTM`'s (`tests/tamiyo/test_packed_lstm.py` compares them over batch sizes, sequence lengths and
thread counts, and after each kind of weight update).

Only where `nn.LSTM` itself would run oneDNN and nothing needs gradients: CPU float32, oneDNN available and enabled,
grad mode off, no CPU autocast, a 1-layer, one-direction, batch-first LSTM with biases and no projection.
Everywhere else (CUDA, the PPO update's backward) the module runs as it is.

The copy is stale once the weights change, and is rebuilt when:
- either weight's storage or version counter changes (`load_state_dict`, `.to()`, foreach Adam, SGD: every in-place
  write autograd keeps track of);
- an optimizer holding either weight takes a step (a global optimizer step hook): fused Adam, this trainer's
  update, writes the weights without bumping their version counters.
Writes that bypass both (through `.data`, numpy or DLPack) are not seen; the trainer makes none.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn
from torch.optim.optimizer import Optimizer, register_optimizer_step_post_hook

Hidden = tuple[torch.Tensor, torch.Tensor]
_LSTM_MODE = 2  # oneDNN's cell kind for LSTM, as `nn.LSTM` passes it


def _ops() -> tuple[Any, Any] | None:
    """The reorder op and the layer op, or None where this torch build has no oneDNN RNN."""
    try:
        reorder = torch.ops.mkldnn._reorder_mkldnn_rnn_layer_weight.default
        layer = torch.ops.aten.mkldnn_rnn_layer.default
    except (AttributeError, RuntimeError):
        return None
    return reorder, layer


_OPS = _ops()


@dataclass
class _Packed:
    key: tuple[int, ...]  # the weights' data pointers and version counters when packed
    weights: tuple[torch.Tensor, torch.Tensor]  # the oneDNN-layout copies of weight_ih and weight_hh
    weight_ids: frozenset[int]


_PACKED: weakref.WeakKeyDictionary[nn.LSTM, _Packed] = weakref.WeakKeyDictionary()
# Env worker threads step their hosts' optimizers, so the hook may run beside a policy call on another thread.
_LOCK = threading.Lock()
_hook_handle: Any = None
# The ids of every packed copy's weights, replaced whole under _LOCK whenever _PACKED gains an entry and read without
# it: the hook runs on every optimizer step in the process (each env's host, every batch), and almost none holds a
# packed weight. It may still name the weights of an LSTM since collected; such a step only takes the slow path.
_packed_ids: frozenset[int] = frozenset()


def _drop_on_step(optimizer: Optimizer, args: Any, kwargs: Any) -> None:
    """Global optimizer step hook: forget every packed copy whose weights this optimizer holds."""
    packed_ids = _packed_ids
    if not any(id(p) in packed_ids for group in optimizer.param_groups for p in group["params"]):
        return
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    with _LOCK:
        for lstm, packed in list(_PACKED.items()):
            if packed.weight_ids & held:
                del _PACKED[lstm]
        _remember_ids()


def _remember_ids() -> None:
    """Recompute `_packed_ids` from `_PACKED` (hold _LOCK)."""
    global _packed_ids
    _packed_ids = frozenset().union(*(packed.weight_ids for packed in _PACKED.values()))


def usable(lstm: nn.LSTM, features: torch.Tensor, hidden: Hidden) -> bool:
    """Whether `packed_step` runs this call: the conditions `nn.LSTM` itself runs oneDNN under, without gradients."""
    if _OPS is None or torch.is_grad_enabled():
        return False
    if lstm.num_layers != 1 or lstm.bidirectional or not lstm.bias or lstm.proj_size or not lstm.batch_first:
        return False
    if not (torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled):
        return False
    if torch.is_autocast_enabled("cpu") or features.numel() == 0:
        return False
    tensors = (features, hidden[0], hidden[1], lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0, lstm.bias_hh_l0)
    return all(type(t) in (torch.Tensor, nn.Parameter) and t.device.type == "cpu" for t in tensors) and all(
        t.dtype == torch.float32 for t in tensors
    )


def _packed_weights(lstm: nn.LSTM) -> tuple[torch.Tensor, torch.Tensor]:
    global _hook_handle
    assert _OPS is not None
    w_ih, w_hh = cast(torch.Tensor, lstm.weight_ih_l0), cast(torch.Tensor, lstm.weight_hh_l0)
    key = (w_ih.data_ptr(), w_ih._version, w_hh.data_ptr(), w_hh._version)
    with _LOCK:
        packed = _PACKED.get(lstm)
        if packed is not None and packed.key == key:
            return packed.weights
        if _hook_handle is None:
            _hook_handle = register_optimizer_step_post_hook(_drop_on_step)
    reordered = _OPS[0](w_ih, w_hh, lstm.hidden_size, False, True, True)
    packed = _Packed(key, (reordered[0], reordered[1]), frozenset((id(w_ih), id(w_hh))))
    with _LOCK:
        _PACKED[lstm] = packed
        _remember_ids()
    return packed.weights


def packed_step(lstm: nn.LSTM, features: torch.Tensor, hidden: Hidden) -> tuple[torch.Tensor, Hidden]:
    """`lstm(features, hidden)` on [K, T, F] features (call only where `usable`): output [K, T, H] and the state
    after the last step, ([1, K, H], [1, K, H]), bitwise what the module returns."""
    assert _OPS is not None
    w_ih, w_hh = _packed_weights(lstm)
    # `nn.LSTM` hands the op time-major contiguous input and takes [K, H] views of the [1, K, H] state
    time_major = features.transpose(0, 1).contiguous()
    out, h, c, _ = _OPS[1](
        time_major,
        w_ih,
        w_hh,
        lstm.bias_ih_l0,
        lstm.bias_hh_l0,
        hidden[0][0],
        hidden[1][0],
        False,  # reverse
        [],  # batch sizes (no packed sequence)
        _LSTM_MODE,
        lstm.hidden_size,
        1,  # layers
        True,  # biases
        False,  # bidirectional
        True,  # batch first, as the module passes it for input it has already made time-major
        lstm.training,
    )
    return out.transpose(0, 1), (h.unsqueeze(0), c.unsqueeze(0))
