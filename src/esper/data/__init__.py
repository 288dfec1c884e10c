"""Task data: the synthetic default (no download) and CIFAR-10 from a local directory."""

from esper.data.datasets import (
    CIFAR10_MEAN,
    CIFAR10_STD,
    VALID_DATASETS,
    DataDirectoryError,
    ImageDataset,
    augment_batch,
    load_task_data,
)

__all__ = [
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "VALID_DATASETS",
    "DataDirectoryError",
    "ImageDataset",
    "augment_batch",
    "load_task_data",
]
