"""Task data: the synthetic default (no download) and CIFAR-10 from a local directory."""

from esper.data.datasets import VALID_DATASETS, augment_batch, load_task_data
from esper.data.records import (
    CIFAR10_MEAN,
    CIFAR10_STD,
    DataCheckError,
    DataDirectoryError,
    ImageDataset,
    UserLoaderError,
    check_dataset,
    min_image_size,
    validate_splits,
)

__all__ = [
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "VALID_DATASETS",
    "DataCheckError",
    "DataDirectoryError",
    "ImageDataset",
    "UserLoaderError",
    "augment_batch",
    "check_dataset",
    "load_task_data",
    "min_image_size",
    "validate_splits",
]
