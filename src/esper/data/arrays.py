"""Your own images: a NumPy `.npz` archive with train and held-out splits, of any channel count, size and class count.

The archive holds `x_train`, `y_train` and `x_val` (or `x_test`), `y_val` (or `y_test`). Images are
[N, C, H, W], [N, H, W, C] (C of 1, 3 or 4 last) or [N, H, W] (one channel); any integer or float dtype
(uint8 is scaled to [0, 1]). Labels are integers 0..K-1; K is the larger label + 1 over both splits. Every
split is normalized per channel with the *train* split's mean and std. Nothing is unpickled
(`allow_pickle=False`), no augmentation is applied (a flip or crop may not suit your images), and
`--train-samples` / `--val-samples` take the first samples of each split.

Example (scikit-learn's 8x8 digits): `np.savez("digits.npz", x_train=..., y_train=..., x_val=..., y_val=...)`,
then `train ... --dataset npz --data-dir digits.npz`; the host and its classifier adapt to 1 channel, 10 classes.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import torch

from esper.data.records import DataDirectoryError, ImageDataset
from esper.messages import first_line

SPLIT_KEYS = {"train": ("x_train", "y_train"), "val": ("x_val", "y_val"), "test": ("x_test", "y_test")}


def load_npz(path: str, *, split: str, n_samples: int | None, normalize: bool = True) -> ImageDataset:
    """One split of an `.npz` archive as a normalized ImageDataset; DataDirectoryError (one line) otherwise."""
    source = Path(path)
    arrays = _read(source)
    x_train, y_train = _split(arrays, source, "train")
    x, y = (x_train, y_train) if split == "train" else _held_out(arrays, source)
    classes = int(max(y_train.max(), y.max())) + 1
    mean = x_train.mean(axis=(0, 2, 3), keepdims=True) if normalize else 0.0
    std = x_train.std(axis=(0, 2, 3), keepdims=True) + 1e-6 if normalize else 1.0
    if n_samples is not None:
        x, y = x[:n_samples], y[:n_samples]
    images = torch.from_numpy(((x - mean) / std).astype(np.float32))
    return ImageDataset(images, torch.from_numpy(y), num_classes=classes, name=f"{source.stem}-{split}", augment=False)


def _read(source: Path) -> dict[str, np.ndarray]:
    if not source.is_file():
        raise DataDirectoryError(f"--data-dir {source} is not a file: pass the path of an .npz archive")
    try:
        with np.load(source, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as error:
        raise DataDirectoryError(
            f"--data-dir {source} is not a readable .npz archive of plain arrays ({first_line(error)}): write it with "
            "numpy.savez(path, x_train=..., y_train=..., x_val=..., y_val=...)"
        ) from None


def _held_out(arrays: dict[str, np.ndarray], source: Path) -> tuple[np.ndarray, np.ndarray]:
    return _split(arrays, source, "val" if "x_val" in arrays else "test")


def _split(arrays: dict[str, np.ndarray], source: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    x_key, y_key = SPLIT_KEYS[split]
    if x_key not in arrays or y_key not in arrays:
        raise DataDirectoryError(
            f"--data-dir {source} lacks {x_key}/{y_key} (it has {', '.join(sorted(arrays)) or 'nothing'}): "
            "save x_train, y_train and x_val, y_val (or x_test, y_test)"
        )
    return _images(arrays[x_key], source, x_key), _labels(arrays[y_key], source, y_key, len(arrays[x_key]))


def _images(x: np.ndarray, source: Path, key: str) -> np.ndarray:
    if x.dtype.kind not in "uif" or x.ndim not in (3, 4) or len(x) == 0:
        raise DataDirectoryError(
            f"--data-dir {source}: {key} must be a non-empty numeric array [N, C, H, W], [N, H, W, C] or [N, H, W], "
            f"got {x.dtype} {list(x.shape)}"
        )
    scaled = x.astype(np.float32) / (255.0 if x.dtype == np.uint8 else 1.0)
    if scaled.ndim == 3:
        return scaled[:, None]
    if scaled.shape[-1] in (1, 3, 4) and scaled.shape[1] not in (1, 3, 4):
        return scaled.transpose(0, 3, 1, 2).copy()  # channels last
    return scaled


def _labels(y: np.ndarray, source: Path, key: str, count: int) -> np.ndarray:
    if y.dtype.kind not in "ui" or y.shape != (count,) or (count and y.min() < 0):
        raise DataDirectoryError(
            f"--data-dir {source}: {key} must be {count} non-negative integer labels, got {y.dtype} {list(y.shape)}"
        )
    return y.astype(np.int64)
