"""Reproducible CUDA runs: deterministic algorithms, cuDNN's deterministic kernels and cuBLAS's fixed workspace.

CPU kernels are deterministic already (the gate pins their code paths and threads). On CUDA, two runs of one seed
differ from the first train step unless torch is told to use deterministic kernels (measured on an H200: a_baseline
diverged at its first checkpoint with 28 of 41 tensors differing; with these settings 29 of 29 checkpoints were
identical, docs/measurements.md). `make_reproducible` turns them on for a CUDA run, before any CUDA kernel runs:

- `CUBLAS_WORKSPACE_CONFIG=:4096:8` (unless set already: cuBLAS reads it when it starts, at the first matmul);
- `torch.use_deterministic_algorithms(True)`: an op with no deterministic CUDA kernel raises instead of varying;
- `torch.backends.cudnn.deterministic = True` and `torch.backends.cudnn.benchmark = False`;
- `torch.utils.deterministic.fill_uninitialized_memory = False`: with deterministic algorithms torch otherwise fills
  every new uninitialized tensor (`empty`, `empty_strided`, a resize) with NaN, a kernel each, in case an op reads
  memory it never wrote. No op of the trainer does: on an H200, a run's checkpoint is the same bit for bit with
  the fill and without it, and two runs without it are equal; and without it an epoch took 10 % less time there
  (88.6 ms against 99.1 at 1 env, docs/measurements.md). A loop that suspects such a read sets it back after this.

`--no-deterministic` leaves torch's defaults: faster kernels where torch has them (cuDNN's autotuned convolutions,
atomics in scatter and index ops), and runs that differ in their last bits from one to the next. A CPU run changes
nothing either way. What is in force is reported (`determinism`) in TRAINING_STARTED and in the checkpoint; the fill
is not, since it changes no result of an op that writes all it returns.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

CUBLAS_WORKSPACE = ":4096:8"


def make_reproducible(devices: Sequence[torch.device], deterministic: bool) -> dict[str, Any]:
    """Turn deterministic CUDA kernels on when `deterministic` and a device is CUDA; return what is in force."""
    if deterministic and any(device.type == "cuda" for device in devices):
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]
    return determinism(deterministic)


def determinism(requested: bool) -> dict[str, Any]:
    """What decides whether a CUDA run repeats bitwise, as in force now (plain JSON values)."""
    return {
        "requested": requested,
        "algorithms": torch.are_deterministic_algorithms_enabled(),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG", ""),
    }
