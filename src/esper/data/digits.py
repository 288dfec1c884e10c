"""A real-data example: scikit-learn's bundled handwritten digits (1,797 images, 8x8, one channel, 10 classes).

No download: the images ship inside scikit-learn. This module is also the worked example of bringing your own
data as a callable: `--dataset esper.data.digits:load` imports this function and calls it once per split with
`split`, `n_samples`, `seed` and `data_dir`; any function with that signature returning an `ImageDataset` works.
The host adapts to the data's channels, size and classes (`wiring.fit_task_to_data`).

The split is fixed: a seeded shuffle of all images, the first 1,500 for training, the other 297 held out.
"""

from __future__ import annotations

import numpy as np
import torch

from esper.data.records import DataDirectoryError, ImageDataset, check_split

TRAIN_SIZE = 1500
SPLIT_SEED = 0  # the split never depends on the run's seed: every run sees the same held-out digits


def load(*, split: str, n_samples: int | None, seed: int, data_dir: str | None) -> ImageDataset:
    """One split of the digits, normalized with the training split's mean and std."""
    check_split(split)
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise DataDirectoryError(
            "--dataset esper.data.digits:load needs scikit-learn: pip install scikit-learn (the test extra has it)"
        ) from None
    digits = load_digits()
    images = digits.images.astype(np.float32) / 16.0  # pixel values 0..16
    order = np.random.default_rng(SPLIT_SEED).permutation(len(images))
    train, held_out = order[:TRAIN_SIZE], order[TRAIN_SIZE:]
    mean, std = images[train].mean(), images[train].std()
    chosen = train if split == "train" else held_out
    if n_samples is not None:
        chosen = chosen[:n_samples]
    x = torch.from_numpy((images[chosen] - mean) / std).unsqueeze(1)  # [N, 1, 8, 8]
    y = torch.from_numpy(digits.target[chosen].astype(np.int64))
    return ImageDataset(x.contiguous(), y, num_classes=10, name=f"digits-{split}", augment=False)
