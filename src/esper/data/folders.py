"""Your own images as a folder tree, read with torchvision's `ImageFolder`: `DIR/train/<class>/*.png` and
`DIR/val/<class>/*.png` (or `test/`), one sub-folder per class, class names sorted as torchvision sorts them.

Images are converted to RGB and resized to the size of the first training image (all must match it after
conversion, as a batch needs one shape), scaled to [0, 1] and, unless `--no-normalize`, normalized per channel with
the train split's mean and std. Nothing is augmented unless `--augment` is given. The whole split is read into
memory once, like every other source.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from esper.data.records import DataDirectoryError, ImageDataset
from esper.messages import first_line


def load_image_folder(root: str, *, split: str, n_samples: int | None, normalize: bool = True) -> ImageDataset:
    from torchvision.datasets import ImageFolder  # torchvision is imported only when a folder is read

    base = Path(root)
    held_out = "val" if (base / "val").is_dir() else "test"
    folders = {"train": base / "train", "val": base / held_out, "test": base / held_out}
    train = _read(ImageFolder, folders["train"])
    if split == "train":
        images, labels = train[0], train[1]
    else:
        images, labels, _ = _read(ImageFolder, folders[split], classes=train[2])
    x = torch.from_numpy(images)
    if normalize:
        mean = train[0].mean(axis=(0, 2, 3), keepdims=True)
        std = train[0].std(axis=(0, 2, 3), keepdims=True) + 1e-6
        x = torch.from_numpy(((images - mean) / std).astype(np.float32))
    if n_samples is not None:
        x, labels = x[:n_samples], labels[:n_samples]
    y = torch.from_numpy(labels)
    return ImageDataset(x.contiguous(), y, num_classes=len(train[2]), name=f"{base.name}-{split}", augment=False)


def _read(
    image_folder: type, folder: Path, classes: list[str] | None = None
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    if not folder.is_dir():
        raise DataDirectoryError(
            f"--data-dir: {folder} is missing: lay your images out as DIR/train/<class>/*.png and DIR/val/<class>/*.png"
        )
    try:
        dataset = image_folder(str(folder))
    except (FileNotFoundError, OSError) as error:
        raise DataDirectoryError(f"--data-dir {folder}: {first_line(error)}") from None
    if classes is not None and dataset.classes != classes:
        raise DataDirectoryError(
            f"--data-dir {folder} has classes {dataset.classes}, the train folder {classes}: use the same class folders"
        )
    arrays, labels = [], []
    shape = None
    for path, label in dataset.samples:
        try:
            image = np.asarray(dataset.loader(path), dtype=np.float32) / 255.0  # PIL RGB, [H, W, 3]
        except OSError as error:
            raise DataDirectoryError(f"--data-dir: {path} is not a readable image ({error})") from None
        shape = shape or image.shape
        if image.shape != shape:
            raise DataDirectoryError(f"--data-dir: {path} is {image.shape[1]}x{image.shape[0]}, the first image "
                                     f"{shape[1]}x{shape[0]}: resize your images to one size")  # fmt: skip
        arrays.append(image.transpose(2, 0, 1))
        labels.append(label)
    if not arrays:
        raise DataDirectoryError(f"--data-dir {folder} holds no images")
    return np.stack(arrays), np.asarray(labels, dtype=np.int64), list(dataset.classes)
