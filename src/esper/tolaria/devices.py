"""Device resolution: `--device` / `--devices` strings to torch devices, with one-line errors."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tripwire.sync import kinds, record_sync


class DeviceError(ValueError):
    """A device string that cannot be used on this machine."""


def resolve_device(text: str) -> torch.device:
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise DeviceError(f"bad device {text!r}: use cpu, cuda or cuda:N") from None
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        raise DeviceError(f"unsupported device {text!r}: use cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        raise DeviceError(f"device {text!r} requested but CUDA is not available here: pass --device cpu")
    index = 0 if device.index is None else device.index
    if index >= torch.cuda.device_count():
        raise DeviceError(
            f"device {text!r} does not exist: this machine has {torch.cuda.device_count()} CUDA device(s)"
        )
    return torch.device("cuda", index)


def resolve_devices(device: str, devices: Sequence[str] | None) -> list[torch.device]:
    """The env placement list: env i runs on result[i % len(result)]."""
    names = list(devices) if devices else [device]
    return [resolve_device(name) for name in names]


def synchronize(device: torch.device) -> None:
    """Wait for every kernel queued on `device`: `torch.cuda.synchronize` on CUDA. On CPU there is nothing to wait
    for, and the sync the same line makes on a GPU is reported instead (`record_sync`), so a gate running on CPU
    counts it where the GPU run waits."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    else:
        record_sync(kinds.CUDA_SYNCHRONIZE)
