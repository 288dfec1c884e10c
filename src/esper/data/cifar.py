"""CIFAR-10 from a local `cifar-10-batches-py` folder through torchvision (never downloaded).

`torchvision.datasets.CIFAR10(root, download=False)` reads and checks the pickled batches; the images are then
normalized with the standard statistics and kept in memory as one tensor. The train-time augmentation
(RandomCrop(32, padding=4), horizontal flip) is applied per batch by the batch iterator (`augment_batch`),
batched and seeded, instead of per sample in DataLoader workers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from esper.data.datasets import CIFAR10_MEAN, CIFAR10_STD, DataDirectoryError, ImageDataset

BATCH_FOLDER = "cifar-10-batches-py"


def load_cifar10(data_dir: str, *, train: bool, n_samples: int | None = None) -> ImageDataset:
    """One split of CIFAR-10 from `data_dir` (the folder that contains `cifar-10-batches-py`)."""
    root = Path(data_dir)
    if not (root / BATCH_FOLDER).is_dir():
        raise DataDirectoryError(
            f"no CIFAR-10 at {str(root)!r} (expected {BATCH_FOLDER}/ inside): pass --data-dir pointing at the "
            f"folder that holds {BATCH_FOLDER}"
        )
    from torchvision.datasets import CIFAR10

    try:
        source = CIFAR10(root=str(root), train=train, download=False)
    except RuntimeError as error:
        raise DataDirectoryError(
            f"CIFAR-10 under {str(root)!r} is incomplete or corrupted ({error}): pass --data-dir a complete copy"
        ) from None
    data = np.asarray(source.data)  # [N, 32, 32, 3] uint8
    labels = np.asarray(source.targets, dtype=np.int64)
    if n_samples is not None:
        data, labels = data[:n_samples], labels[:n_samples]
    images = torch.from_numpy(np.ascontiguousarray(data)).permute(0, 3, 1, 2).float().div_(255.0)
    mean = torch.tensor(CIFAR10_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR10_STD).view(1, 3, 1, 1)
    images = ((images - mean) / std).contiguous()
    split = "train" if train else "test"
    return ImageDataset(images, torch.from_numpy(labels), num_classes=10, name=f"cifar10-{split}", augment=train)
