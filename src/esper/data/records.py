"""The records every data source builds: an in-memory image split, its normalization and the split names.

`datasets` (the entry point) imports the sources lazily and the sources import these records, so keeping them
here leaves no import cycle in `esper.data`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from esper.messages import first_line

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
            raise ValueError(
                f"{self.name}: images must be float32, got {self.images.dtype}: convert them with images.float() "
                "(scaled to [0, 1] or normalized)"
            )
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


# Bounds and checks every source goes through (issue 27) ------------------------------------------------------

MAX_CLASSES = 100_000  # labels 0..K-1 with K at most this: the host's classifier is Linear(channels, K)
MIN_CLASSES = 2  # one class leaves nothing to learn: every loss is 0 and every accuracy 100 %


class DataCheckError(DataDirectoryError):
    """Loaded data that cannot be trained on (NaN pixels, labels out of range, too few samples, ...): one line naming
    the split, the field and the fix. A DataDirectoryError, so the CLI reports it in one line with exit code 2."""


class UserLoaderError(DataDirectoryError):
    """A `--dataset package.module:function` loader that failed, exited or returned something unusable; the message
    names the function."""


def min_image_size(n_blocks: int, kernel_size: int, pool_layers: int) -> int:
    """The smallest square image a host can take: every conv keeps (odd kernel) or grows by one (even kernel) the
    size, and each of the first `pool_layers` blocks is followed by MaxPool2d(2), which needs at least 2x2 input."""
    size = 1
    while not _fits(size, n_blocks, kernel_size, pool_layers):
        size += 1
    return size


def _fits(size: int, n_blocks: int, kernel_size: int, pool_layers: int) -> bool:
    for block in range(n_blocks):
        size += 2 * (kernel_size // 2) - kernel_size + 1
        if block < pool_layers:
            if size < 2:
                return False
            size //= 2
    return size >= 1


def check_dataset(
    dataset: ImageDataset,
    *,
    split: str,
    source: str,
    batch_size: int | None = None,
    min_size: tuple[int, int] | None = None,
) -> ImageDataset:
    """Refuse one loaded split that cannot be trained on; `min_size` is (pixels, host depth) from `min_image_size`.

    Checks: images [N, C, H, W] float32 with C, H, W >= 1 and every value finite; int64 labels in [0, num_classes);
    2 <= num_classes <= MAX_CLASSES; at least one sample, or one full batch of `batch_size`; H and W at least
    `min_size`'s pixels; a `len()` that raises or disagrees with the images. Returns `dataset` (a subclass as a plain
    ImageDataset of its fields, so none of its own methods reaches the run); DataCheckError (one line naming the split,
    the field and the fix) otherwise.
    """
    where = f"{source}: {split} split"
    images, labels = dataset.images, dataset.labels
    for field, value in (("images", images), ("labels", labels)):  # a subclass may have skipped __post_init__
        if not isinstance(value, Tensor):
            kind = type(value).__name__
            raise DataCheckError(f"{where}: {field} are of type {kind}: give torch tensors (torch.as_tensor)")
        if value.is_nested or value.layout != torch.strided or value.is_quantized or value.device.type != "cpu":
            kind = "nested" if value.is_nested else "quantized" if value.is_quantized else str(value.layout)
            place = value.device.type if value.device.type != "cpu" else kind.replace("torch.", "")
            raise DataCheckError(
                f"{where}: {field} are a {place} tensor: give dense tensors in CPU memory (.to_dense(), .cpu(), "
                ".dequantize()); esper moves batches to the run's device itself"
            )
    if not isinstance(dataset.name, str) or not isinstance(dataset.augment, bool):
        raise DataCheckError(
            f"{where}: name {dataset.name!r} and augment {dataset.augment!r} must be a str and a bool: build the "
            "ImageDataset with them"
        )
    if images.dim() != 4 or min(images.shape[1:]) < 1 or images.dtype != torch.float32:
        raise DataCheckError(
            f"{where}: images are {images.dtype} {list(images.shape)}: "
            "give float32 images [N, C, H, W] with C, H, W >= 1"
        )
    classes = dataset.num_classes
    if not isinstance(classes, int) or not MIN_CLASSES <= classes <= MAX_CLASSES:
        raise DataCheckError(
            f"{where}: num_classes is {classes!r}: give {MIN_CLASSES} to {MAX_CLASSES} classes (labels 0..K-1)"
        )
    count = int(images.shape[0])
    _check_length(dataset, count, where)
    needed = max(1, batch_size or 1)
    if count < needed:
        raise DataCheckError(
            f"{where}: {count} samples, fewer than one batch of {needed}: give at least {needed} samples per split "
            "or lower --batch-size"
        )
    if labels.dtype != torch.int64 or labels.shape != images.shape[:1]:
        raise DataCheckError(f"{where}: labels are {labels.dtype} {list(labels.shape)}: give int64 labels [{count}]")
    # One host read per split for the label range and finiteness (the data are host tensors; a GPU run reads them
    # before moving batches): the sync budgets see one `.tolist()` per split, not three scalar reads.
    lowest, highest, finite = torch.stack(
        [labels.min().to(torch.float64), labels.max().to(torch.float64), torch.isfinite(images).all().to(torch.float64)]
    ).tolist()
    low, high = int(lowest), int(highest)
    if low < 0 or high >= classes:
        raise DataCheckError(
            f"{where}: labels span {low}..{high}, outside 0..{classes - 1} (num_classes={classes}): "
            f"use labels 0..{classes - 1}"
        )
    if not finite:
        bad = int((~torch.isfinite(images)).sum())
        raise DataCheckError(
            f"{where}: images hold {bad} NaN or infinite values (after normalization): replace them "
            "(e.g. numpy.nan_to_num) or drop those samples"
        )
    if min_size is not None:
        pixels, depth = min_size
        height, width = int(images.shape[2]), int(images.shape[3])
        if min(height, width) < pixels:
            raise DataCheckError(
                f"{where}: images are {height}x{width}: images must be at least {pixels}x{pixels} for a host of "
                f"depth {depth}, so resize them or pick a --task with fewer pooling blocks"
            )
    if type(dataset) is ImageDataset:
        return dataset
    # a subclass's own methods (a __len__ that raises later, say) go no further than this check
    return ImageDataset(images, labels, classes, dataset.name, dataset.augment)


def _check_length(dataset: ImageDataset, count: int, where: str) -> None:
    """Refuse a dataset whose `len()` raises or disagrees with its images (a subclass that overrides `__len__`)."""
    try:
        length = len(dataset)
    except Exception as error:  # the user's own __len__: whatever it raises is one line naming it
        raise DataCheckError(
            f"{where}: len() of the {type(dataset).__name__} raised {type(error).__name__} ({first_line(error, 160)}): "
            "an ImageDataset's length is its images' first dimension; drop the __len__ override"
        ) from None
    if length != count:
        raise DataCheckError(
            f"{where}: len() of the {type(dataset).__name__} is {length}, its images hold {count}: drop the "
            "__len__ override (the length is the images' first dimension)"
        )


def validate_splits(
    train: ImageDataset,
    val: ImageDataset,
    *,
    classes: int | None = None,
    batch_size: int | None = None,
    min_size: tuple[int, int] | None = None,
    source: str,
) -> None:
    """The one check of a run's data, after both splits are loaded and before any training: `check_dataset` on each
    split, the same C, H, W in both, and (when `classes` is given) labels of both splits below `classes`."""
    for split, dataset in (("train", train), ("val", val)):
        check_dataset(dataset, split=split, source=source, batch_size=batch_size, min_size=min_size)
    check_same_shape(train, val, source=source)
    if classes is not None:
        for split, dataset in (("train", train), ("val", val)):
            if int(dataset.labels.max()) >= classes:
                raise DataCheckError(
                    f"{source}: {split} split has label {int(dataset.labels.max())}, the host has {classes} classes: "
                    f"use labels 0..{classes - 1}"
                )


def check_same_shape(train: ImageDataset, val: ImageDataset, *, source: str) -> None:
    """The same C, H, W in both splits (shapes only: no data read), once each split passed `check_dataset`."""
    if train.images.shape[1:] != val.images.shape[1:]:
        shown = ["x".join(str(n) for n in d.images.shape[1:]) for d in (train, val)]
        raise DataCheckError(
            f"{source}: val split images are {shown[1]} (C x H x W), the train split's {shown[0]}: give both splits "
            "the same channels and size"
        )
