"""CIFAR-10 from a local `cifar-10-batches-py` folder through torchvision (never downloaded).

torchvision's `CIFAR10` reads the pickled batches; the images are then normalized with the standard statistics
and kept in memory as one tensor. The train-time augmentation (RandomCrop(32, padding=4), horizontal flip) is
applied per batch by the batch iterator (`augment_batch`), batched and seeded, instead of per sample in
DataLoader workers.

`LocalCIFAR10` is torchvision's class with its md5 checks turned into presence checks: torchvision compares each
file against the md5 of the official archive, so any other copy in the same on-disk format (a subset, a test
fixture, a re-pickled mirror) is rejected as "corrupted". Reading stays torchvision's own code; a missing file
still fails, and so does a file that is not a CIFAR pickle. This module imports torchvision (~1.7 s), so
`esper.data.datasets` imports it only when CIFAR-10 is asked for.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch
from torchvision.datasets import CIFAR10

from esper.data.records import CIFAR10_MEAN, CIFAR10_STD, DataDirectoryError, ImageDataset

BATCH_FOLDER = "cifar-10-batches-py"


class LocalCIFAR10(CIFAR10):
    """torchvision's CIFAR10 reader that checks the batch files exist instead of matching the official md5s."""

    # md5 None makes torchvision's `check_integrity` test only that the file exists.
    train_list = [[name, None] for name, _ in CIFAR10.train_list]  # noqa: RUF012 - torchvision's own layout
    test_list = [[name, None] for name, _ in CIFAR10.test_list]  # noqa: RUF012
    meta = {**CIFAR10.meta, "md5": None}  # noqa: RUF012


def load_cifar10(data_dir: str, *, train: bool, n_samples: int | None = None) -> ImageDataset:
    """One split of CIFAR-10 from `data_dir` (the folder that contains `cifar-10-batches-py`)."""
    root = Path(data_dir)
    if not (root / BATCH_FOLDER).is_dir():
        raise DataDirectoryError(
            f"no CIFAR-10 at {str(root)!r} (expected {BATCH_FOLDER}/ inside): pass --data-dir pointing at the "
            f"folder that holds {BATCH_FOLDER}"
        )
    try:
        source = LocalCIFAR10(root=str(root), train=train, download=False)
    except (RuntimeError, OSError, EOFError, KeyError, ValueError, pickle.UnpicklingError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise DataDirectoryError(
            f"CIFAR-10 under {str(root)!r} is incomplete or unreadable ({reason}): pass --data-dir a complete copy"
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
