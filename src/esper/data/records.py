"""The records every data source builds: an in-memory image split, its normalization and the split names.

`datasets` (the entry point) imports the sources lazily and the sources import these records, so keeping them
here leaves no import cycle in `esper.data`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

VALID_SPLITS: tuple[str, ...] = ("train", "val", "test")

# Per-channel normalization of CIFAR-10 (also applied to the synthetic task, so both look alike to a host).
CIFAR10_MEAN: tuple[float, float, float] = (0.4914, 0.4822, 0.4465)
CIFAR10_STD: tuple[float, float, float] = (0.2470, 0.2435, 0.2616)

IMAGE_SHAPE: tuple[int, int, int] = (3, 32, 32)  # CIFAR-10 and the synthetic task; your own data may differ


class DataDirectoryError(ValueError):
    """A dataset directory that is missing or incomplete; the message names `--data-dir`."""


@dataclass(frozen=True)
class ImageDataset:
    """A whole split in memory: normalized float32 images [N, C, H, W] and int64 labels [N].

    `augment` says whether this split is meant to be augmented during training (True for "train").
    """

    images: Tensor
    labels: Tensor
    num_classes: int
    name: str
    augment: bool

    def __post_init__(self) -> None:
        if self.images.dim() != 4 or min(self.images.shape[1:]) < 1:
            raise ValueError(f"{self.name}: images must be [N, C, H, W], got {list(self.images.shape)}")
        if self.images.dtype != torch.float32:
            raise ValueError(f"{self.name}: images must be float32, got {self.images.dtype}")
        if self.labels.dtype != torch.int64 or self.labels.shape != self.images.shape[:1]:
            raise ValueError(
                f"{self.name}: labels must be int64 [{self.images.shape[0]}], "
                f"got {self.labels.dtype} {list(self.labels.shape)}"
            )

    def __len__(self) -> int:
        return int(self.images.shape[0])


def check_split(split: str) -> str:
    """Validate a split name; "val" and "test" both mean held-out data."""
    if split not in VALID_SPLITS:
        raise ValueError(f"unknown split {split!r}: choose one of {', '.join(VALID_SPLITS)}")
    return split
