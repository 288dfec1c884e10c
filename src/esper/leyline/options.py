"""The enum-valued run options shared by the config, the CLI and the subsystems that act on them.

Loads no torch, torchvision or numpy.
"""

from __future__ import annotations

from enum import StrEnum


class RewardMode(StrEnum):
    """Which reward function scores an epoch."""

    SHAPED = "shaped"
    ESCROW = "escrow"
    SIMPLIFIED = "simplified"
    SPARSE = "sparse"


class AmpMode(StrEnum):
    """`--amp`: off, or autocast in bf16 (no scaler) / fp16 (one GradScaler per env) on CUDA; auto picks."""

    OFF = "off"
    AUTO = "auto"
    BF16 = "bfloat16"
    FP16 = "float16"


class CompileBackend(StrEnum):
    """`--compile`: run the policy network eagerly (off), or compile it with torch.compile on one of dynamo's
    backends: `eager` (dynamo traces, the graphs run as they are), `aot_eager` (AOTAutograd too) or `inductor`
    (generated kernels: what compiling is for, and what the original runs)."""

    OFF = "off"
    EAGER = "eager"
    AOT_EAGER = "aot_eager"
    INDUCTOR = "inductor"


class CompileMode(StrEnum):
    """`--compile-mode`: inductor's trade of compile time for speed (the original's `--compile-mode`)."""

    DEFAULT = "default"
    REDUCE_OVERHEAD = "reduce-overhead"
    MAX_AUTOTUNE = "max-autotune"


class DatasetName(StrEnum):
    """Where a task's images come from: generated in memory, CIFAR-10 from a local folder, or your own .npz file."""

    SYNTHETIC = "synthetic"
    CIFAR10 = "cifar10"
    NPZ = "npz"
    IMAGEFOLDER = "imagefolder"
