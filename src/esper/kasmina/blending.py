"""Blend operators: how a seed's output `s` enters the host stream `h` at weight `a`.

`a` is a tensor broadcastable to `h` ([1,1,1,1] for the slot's own alpha, [N,1,1,1] for fused validation),
so both paths run the same kernels. All operators return `h` exactly when `a` is 0.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def straight_through(h: Tensor, s: Tensor) -> Tensor:
    """`h + (s - s.detach())`: the value is exactly `h`, but the seed receives the gradient of the output."""
    return h + (s - s.detach())


def blend_add(h: Tensor, s: Tensor, a: Tensor) -> Tensor:
    """ADD: `lerp(h, s, a)`."""
    return torch.lerp(h, s, a)


def blend_multiply(h: Tensor, s: Tensor, a: Tensor, seed_input: Tensor) -> Tensor:
    """MULTIPLY: `h * (1 + a * tanh(s - seed_input))`, a bounded multiplicative modulation of the host."""
    return h * (1.0 + a * torch.tanh(s - seed_input))


def blend_gate(h: Tensor, s: Tensor, a: Tensor, gate: Tensor) -> Tensor:
    """GATE: `lerp(h, s, a * gate)` with a learned per-sample gate in [0, 1]."""
    return torch.lerp(h, s, a * gate)


class AlphaGate(nn.Module):
    """The learned gate of the GATE algorithm: `sigmoid(Linear(avgpool x))`, one value per sample."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.fc = nn.Linear(channels, 1)

    def forward(self, x: Tensor) -> Tensor:
        pooled = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return torch.sigmoid(self.fc(pooled)).view(-1, 1, 1, 1)


_CAPTURE = threading.local()  # `.active` while this thread captures a CUDA graph of a train step


@contextlib.contextmanager
def reading_graph_inputs() -> Iterator[None]:
    """While a CUDA graph of a train step is captured (`esper.tolaria.graphs`): slots read the alpha tensor that
    `ScalarAlphaCache.refresh` fills in place. A graph replays addresses, so the tensor `get` builds anew for each
    alpha would be read stale (or freed) by every later replay."""
    _CAPTURE.active = True
    try:
        yield
    finally:
        _CAPTURE.active = False


class ScalarAlphaCache:
    """A slot's scalar alpha as a [1,1,1,1] tensor, rebuilt only when alpha, device or dtype changes.

    Built with a fill kernel (`torch.full`), never a host-to-device copy, so it is not a sync point.

    A compiled train step (`--compile-step`) reads `graph_input` instead, which `refresh` fills before each step,
    outside the graph: the traced code then branches on nothing of alpha's value, so an alpha that ramps does not
    re-capture the graph (a float read inside it would be a guarded constant, one graph per value). A CUDA graph's
    capture (`--cuda-graphs`, under `reading_graph_inputs`) reads it too, for the same reason.
    """

    def __init__(self) -> None:
        self._tensor: Tensor | None = None
        self._value = math.nan
        self._input: Tensor | None = None
        self._input_value = math.nan

    def get(self, alpha: float, like: Tensor) -> Tensor:
        if torch.compiler.is_compiling() or getattr(_CAPTURE, "active", False):
            return self.graph_input(like)
        cached = self._tensor
        if (
            cached is None
            or self._value != alpha
            or cached.device != like.device
            or cached.dtype != like.dtype
            # A tensor made under inference_mode (validation) cannot be saved for backward in training.
            or (cached.is_inference() and not torch.is_inference_mode_enabled())
        ):
            cached = torch.full((1, 1, 1, 1), alpha, device=like.device, dtype=like.dtype)
            self._tensor = cached
            self._value = alpha
        return cached

    def refresh(self, alpha: float, device: torch.device) -> Tensor:
        """Hold `alpha` in the float32 tensor a compiled step reads (call eagerly, before the step); return it (a
        CUDA graph keys on its address: refilled in place, it is the same tensor from step to step)."""
        held = self._input
        if held is None or held.device != device or held.is_inference():
            held = self._input = torch.full((1, 1, 1, 1), alpha, device=device, dtype=torch.float32)
        elif self._input_value != alpha:
            held.fill_(alpha)
        self._input_value = alpha
        return held

    def graph_input(self, like: Tensor) -> Tensor:
        """The refreshed alpha in `like`'s dtype (inside a compiled step)."""
        if self._input is None:
            raise RuntimeError("a compiled train step read a slot's alpha before refresh(): call prepare_compiled_step")
        return self._input.to(dtype=like.dtype)

    def clear(self) -> None:
        self._tensor = None
        self._value = math.nan
        self._input = None
        self._input_value = math.nan
