"""Task data: the synthetic default (no download) and CIFAR-10 from a local directory."""

from esper.data.datasets import VALID_DATASETS, augment_batch, load_task_data
from esper.data.records import CIFAR10_MEAN, CIFAR10_STD, DataDirectoryError, ImageDataset

__all__ = [
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "VALID_DATASETS",
    "DataDirectoryError",
    "ImageDataset",
    "augment_batch",
    "load_task_data",
]
