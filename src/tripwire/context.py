"""Determinism context: the settings a bitwise golden depends on, captured, keyed and compared.

Bitwise results are only reproducible under the same torch build, device, CPU code paths, thread count and
determinism flags. The CPU code paths are those of `tripwire.numerics`: ATen's dispatch level
(`torch.backends.cpu.get_cpu_capability()`) and the oneDNN and MKL pins. Under the portable pin they read
`AVX2` on every x86-64 CPU with AVX2, whatever its native ISA, so one golden serves all of them.

A golden records this context; on a machine whose context differs, comparing against it would fail falsely,
so `mismatches()` lists the differences. The gate then does not pass blindly: it says which setting differs,
and under CI it fails unless the run compared base and head on the same machine (`--against`).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Mapping
from typing import Any

import torch

from tripwire.numerics import cpu_numerics

KEY_CHARS = 10


def _device_name(device: torch.device) -> str:
    """`cpu`, or the CUDA device's product name (bitwise results differ between GPU models)."""
    if device.type == "cuda" and torch.cuda.is_available():
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return device.type


def capture_context(device: torch.device | str = "cpu") -> dict[str, Any]:
    """The determinism context of this process for work on `device` (plain JSON values, sorted keys)."""
    resolved = torch.device(device)
    context: dict[str, Any] = {
        "torch": torch.__version__,
        "device": _device_name(resolved),
        "machine": platform.machine(),
        **cpu_numerics(),
        "threads": torch.get_num_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }
    if resolved.type == "cuda":
        context["cuda"] = torch.version.cuda
        context["cudnn_deterministic"] = bool(torch.backends.cudnn.deterministic)
        context["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
        context["tf32_matmul"] = bool(torch.backends.cuda.matmul.allow_tf32)
        context["tf32_cudnn"] = bool(torch.backends.cudnn.allow_tf32)
        context["cublas_workspace_config"] = os.environ.get("CUBLAS_WORKSPACE_CONFIG", "")
    return dict(sorted(context.items()))


def context_key(context: Mapping[str, Any]) -> str:
    """A short stable key for file names: `cpu-avx512-t1-<hash>`, readable and unique per context."""
    encoded = json.dumps(dict(sorted(context.items())), sort_keys=True).encode()
    digest = hashlib.sha256(encoded).hexdigest()[:KEY_CHARS]
    device = str(context.get("device", "dev")).split(":")[0]
    capability = str(context.get("cpu_capability", "na")).lower()
    return f"{device}-{capability}-t{context.get('threads', 'x')}-{digest}"


def mismatches(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """`key: recorded -> current` for every setting that differs (empty when the contexts match)."""
    keys = sorted(set(recorded) | set(current))
    return [
        f"{key}: {recorded.get(key, '<unset>')!r} -> {current.get(key, '<unset>')!r}"
        for key in keys
        if recorded.get(key) != current.get(key)
    ]
