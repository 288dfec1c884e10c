"""CUDA streams and autocast for the engine: which stream and precision an env runs in, and the stream waits
that replace host syncs (an env stream waits for the loader's copies; the default stream waits for every env
stream at the end of a pass). On CPU every helper is a no-op context or returns at once."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Protocol

import torch
from torch import Tensor

from esper.leyline.options import AmpMode


class StreamedEnv(Protocol):
    """What these helpers read of an env (`esper.tolaria.engine.EnvRuntime` has it)."""

    @property
    def device(self) -> torch.device: ...

    @property
    def stream(self) -> torch.cuda.Stream | None: ...

    @property
    def amp_dtype(self) -> torch.dtype | None: ...


def resolve_amp_dtype(mode: AmpMode, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for `mode` on `device`; None means full precision (always the case on CPU)."""
    if mode is AmpMode.OFF or device.type != "cuda":
        return None
    if mode is AmpMode.BF16:
        return torch.bfloat16
    if mode is AmpMode.FP16:
        return torch.float16
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def stream_context(env: StreamedEnv) -> contextlib.AbstractContextManager[object]:
    """Run on the env's stream when it has one (CUDA), else in the current context."""
    if env.stream is None:
        return contextlib.nullcontext()
    return torch.cuda.stream(env.stream)


def autocast_context(env: StreamedEnv) -> contextlib.AbstractContextManager[object]:
    if env.amp_dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=env.device.type, dtype=env.amp_dtype)


def wait_for_default_stream(env: StreamedEnv, tensors: Sequence[Tensor]) -> None:
    """Make the env stream wait for the loader's copies and tell the allocator the env stream uses them."""
    if env.stream is None:
        return
    env.stream.wait_stream(torch.cuda.default_stream(env.device))
    for tensor in tensors:
        tensor.record_stream(env.stream)


def join_streams(envs: Sequence[StreamedEnv]) -> None:
    """Make each device's default stream wait for every env stream on it (no host sync)."""
    for env in envs:
        if env.stream is not None:
            torch.cuda.default_stream(env.device).wait_stream(env.stream)
