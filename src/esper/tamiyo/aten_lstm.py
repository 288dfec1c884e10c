"""The policy's LSTM on CPU, on ATen's own kernels instead of oneDNN's: bits that travel between x86 CPUs.

On CPU, `nn.LSTM` runs through oneDNN (`aten.mkldnn_rnn_layer`), and its bits did not travel between machines
under the gate's pin (`ONEDNN_MAX_CPU_ISA=AVX2`). Seen 2026-12-02: scenario (g)'s value estimate at its first step
after a PPO update, from identical weights and input, differed between the machine that recorded the golden and an
Intel Xeon (AMX), while valgrind's emulated Haswell agreed with the Xeon; on the Xeon the same values also moved with
`ONEDNN_MAX_CPU_ISA` alone. The pin fixes the instruction set, not which RNN kernel oneDNN picks. A golden that
holds on one CPU gates nothing on the next (docs/portability.md).

`lstm_on_aten` computes the same cell from ATen ops: the input projection of every step as one linear, then per
step the hidden projection, the four gates and the state update, in `nn.LSTM`'s gate order (i, f, g, o). Linear
layers run on MKL, which the gate pins to its reproducible branch (`MKL_CBWR=COMPATIBLE,STRICT`), the gates on
ATen's vector kernels (`ATEN_CPU_CAPABILITY=avx2`): the two pins that already make every other layer travel.
It is a float32 LSTM equal to `nn.LSTM` to rounding (`tests/tamiyo/test_aten_lstm.py`), not bitwise: its sums group
differently from oneDNN's and from `nn.LSTM`'s own ATen path. On CUDA the policy keeps `nn.LSTM` (cuDNN).
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

Hidden = tuple[torch.Tensor, torch.Tensor]
_PARAMETERS = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")


def supported(lstm: nn.LSTM) -> bool:
    """The shape of LSTM this module computes: one layer, one direction, batch first, with biases, no projection."""
    return lstm.num_layers == 1 and not lstm.bidirectional and lstm.bias and not lstm.proj_size and lstm.batch_first


def lstm_on_aten(lstm: nn.LSTM, features: torch.Tensor, hidden: Hidden) -> tuple[torch.Tensor, Hidden]:
    """`lstm(features, hidden)` on [K, T, F] features and a ([1, K, H], [1, K, H]) state: output [K, T, H] and the
    state after the last step, in the module's shapes; autograd records it like any other ops."""
    if not supported(lstm):
        raise ValueError(
            "lstm_on_aten computes a one-layer, one-direction, batch-first LSTM with biases and no projection; "
            f"got {lstm!r}: call the module itself"
        )
    w_ih, w_hh, b_ih, b_hh = (cast(torch.Tensor, getattr(lstm, name)) for name in _PARAMETERS)
    projected = F.linear(features, w_ih, b_ih)  # every step's input projection at once
    h, c = hidden[0][0], hidden[1][0]
    outputs = []
    for step in range(features.shape[1]):
        gates = F.linear(h, w_hh, b_hh) + projected[:, step]
        i, f, g, o = gates.chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outputs.append(h)
    return torch.stack(outputs, dim=1), (h.unsqueeze(0), c.unsqueeze(0))
