"""Your own images as a folder tree, read with torchvision's `ImageFolder`: `DIR/train/<class>/*.png` and
`DIR/val/<class>/*.png` (or `test/`), one sub-folder per class, class names sorted as torchvision sorts them.

Images are converted to RGB and resized to the size of the first training image (all must match it after
conversion, as a batch needs one shape), scaled to [0, 1] and, unless `--no-normalize`, normalized per channel with
the train split's mean and std. Nothing is augmented unless `--augment` is given. The whole split is read into
memory once, like every other source.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from esper.data.records import DataCheckError, DataDirectoryError, ImageDataset
from esper.host_memory import gib, memory_left
from esper.messages import escape, first_line

# The most pixels (width x height) one image may have; a larger one is refused before it is decoded (a 48 kB PNG
# can declare 20000x20000 pixels, 1.2 GB as RGB bytes and 4.8 GB as float32).
MAX_IMAGE_PIXELS = 4096 * 4096


def load_image_folder(root: str, *, split: str, n_samples: int | None, normalize: bool = True) -> ImageDataset:
    from torchvision.datasets import ImageFolder  # torchvision is imported only when a folder is read

    base = Path(root)
    held_out = "val" if (base / "val").is_dir() else "test"
    folders = {"train": base / "train", "val": base / held_out, "test": base / held_out}
    train_files = _scan(ImageFolder, folders["train"])
    split_files = train_files if split == "train" else _scan(ImageFolder, folders[split], classes=train_files.classes)
    _check_decoding_fits(base, split, train_files.samples, split_files.samples)
    train = _decode(train_files)
    if split == "train":
        images, labels = train[0], train[1]
    else:
        images, labels, _ = _decode(split_files)
    x = torch.from_numpy(images)
    if normalize:
        mean = train[0].mean(axis=(0, 2, 3), keepdims=True)
        std = train[0].std(axis=(0, 2, 3), keepdims=True) + 1e-6
        x = torch.from_numpy(((images - mean) / std).astype(np.float32))
    if n_samples is not None:
        x, labels = x[:n_samples], labels[:n_samples]
    y = torch.from_numpy(labels)
    return ImageDataset(x.contiguous(), y, num_classes=len(train[2]), name=f"{base.name}-{split}", augment=False)


def _scan(image_folder: type, folder: Path, classes: list[str] | None = None) -> Any:
    """torchvision's ImageFolder over `folder` (files listed, nothing decoded), its classes checked against the
    train split's."""
    if not folder.is_dir():
        raise DataDirectoryError(
            f"--data-dir: {escape(str(folder))} is missing: lay your images out as DIR/train/<class>/*.png and "
            "DIR/val/<class>/*.png"
        )
    _refuse_symlink_loops(folder)
    try:
        dataset = image_folder(str(folder), loader=_load_rgb)
    except (FileNotFoundError, OSError) as error:
        raise DataDirectoryError(f"--data-dir {escape(str(folder))}: {first_line(error, 200)}") from None
    if classes is not None and dataset.classes != classes:
        raise DataDirectoryError(
            f"--data-dir {folder} has classes {dataset.classes}, the train folder {classes}: use the same class folders"
        )
    return dataset


def _check_decoding_fits(base: Path, split: str, train: list[tuple[str, int]], held: list[tuple[str, int]]) -> None:
    """Refuse, before decoding, a split whose images cannot fit: every image as float32 RGB at the first image's
    size (read from its header), held twice while they are stacked, for the train split (always read: it gives the
    normalization) and then the held-out split beside it. A lower bound: normalizing makes further copies."""
    from PIL import Image

    if not train:
        return  # no images: _decode says so
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            with Image.open(train[0][0]) as first:
                width, height = first.size
        except (OSError, ValueError, Image.DecompressionBombError):
            return  # unreadable: decoding names the file
    if width * height > MAX_IMAGE_PIXELS:
        return  # decoding refuses it by its pixel limit, naming the file
    image = 4 * 3 * width * height
    need = image * (2 * len(train) if split == "train" else len(train) + 2 * len(held))
    have, limited = memory_left()
    if have is not None and need > have:
        why = " under this process's address-space limit (ulimit -v)" if limited else ""
        raise DataCheckError(
            f"--data-dir {escape(str(base))}: decoding the {split} split needs at least {gib(need)} ({len(train)} "
            f"train{'' if split == 'train' else f' and {len(held)} {split}'} images of {width}x{height} as float32, "
            f"held twice while stacked; a lower-bound estimate) but {gib(have)} is available{why}: use fewer or "
            "smaller images"
        )


def _decode(dataset: Any) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Every image of a scanned folder as float32 RGB [N, 3, H, W] in [0, 1], its labels, its classes."""
    folder = dataset.root
    arrays, labels = [], []
    shape = None
    for path, label in dataset.samples:
        image = np.asarray(dataset.loader(path), dtype=np.float32) / 255.0  # PIL RGB, [H, W, 3]
        shape = shape or image.shape
        if image.shape != shape:
            raise DataDirectoryError(
                f"--data-dir: {escape(path)} is {image.shape[1]}x{image.shape[0]}, the first image "
                f"{shape[1]}x{shape[0]}: resize your images to one size"
            )
        arrays.append(image.transpose(2, 0, 1))
        labels.append(label)
    if not arrays:
        raise DataDirectoryError(f"--data-dir {escape(str(folder))} holds no images")
    return np.stack(arrays), np.asarray(labels, dtype=np.int64), list(dataset.classes)


def _load_rgb(path: str) -> object:
    """One image file as a PIL RGB image; its size is checked against MAX_IMAGE_PIXELS before it is decoded, and any
    decoder failure (a corrupt or truncated file) is a one-line DataDirectoryError naming the file."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # our own, lower, limit applies below
            with Image.open(path) as image:
                width, height = image.size
                if width * height > MAX_IMAGE_PIXELS:
                    raise DataCheckError(
                        f"--data-dir: {escape(path)} is {width}x{height} pixels, over the limit of {MAX_IMAGE_PIXELS} "
                        "pixels (MAX_IMAGE_PIXELS): resize it"
                    )
                return image.convert("RGB")
    except DataDirectoryError:
        raise
    except Image.DecompressionBombError as error:  # over twice PIL's own limit: PIL refuses before our check
        raise DataCheckError(
            f"--data-dir: {escape(path)} is over the limit of {MAX_IMAGE_PIXELS} pixels (MAX_IMAGE_PIXELS; PIL says: "
            f"{first_line(error, 120)}): resize it"
        ) from None
    except Exception as error:  # PIL's decoders raise OSError, SyntaxError, ValueError, struct.error, ... on bad files
        raise DataDirectoryError(
            f"--data-dir: {escape(path)} is not a readable image ({type(error).__name__}: {first_line(error, 160)}): "
            "replace or remove it"
        ) from None


def _refuse_symlink_loops(folder: Path) -> None:
    """The rule for symlinks: a symlinked folder is followed (as torchvision does), but one that leads back to a folder
    already on its own path (a loop, which torchvision would read again and again) is refused, naming the link."""
    for current, subfolders, _ in os.walk(folder, followlinks=True):
        here = os.path.realpath(current)
        for name in subfolders:
            link = os.path.join(current, name)
            target = os.path.realpath(link)
            if os.path.islink(link) and (here == target or here.startswith(target.rstrip(os.sep) + os.sep)):
                raise DataDirectoryError(
                    f"--data-dir: {escape(link)} is a symlink loop (it leads back to {escape(target)}): remove the "
                    "link or point it outside the data folder"
                )
