"""A tiny CIFAR-10 folder in the official on-disk format, shared by the loader tests and the hostile-file tests.

The official batches are Python 2 pickles: their keys and the numpy buffers are Python 2 `str`, which Python 3
reads as b"data"/b"labels" with `encoding="bytes"` and as "data"/"labels" with `encoding="latin1"` (what
torchvision uses). `Py2StrPickler` writes bytes with the Python 2 string opcodes, so the fixture files have
exactly that property; a plain Python 3 pickle of b"data" would not load under torchvision at all.
"""

from __future__ import annotations

import pickle
import struct
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from esper.data.cifar import BATCH_FOLDER

PER_BATCH = 6
TRAIN_FILES = [f"data_batch_{i}" for i in range(1, 6)]
NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def pixels(n: int, offset: int) -> np.ndarray:
    """Row-major CIFAR layout: 1024 red, 1024 green, 1024 blue values per image."""
    return np.random.default_rng(offset).integers(0, 256, size=(n, 3072), dtype=np.uint8)


def labels(n: int, offset: int) -> list[int]:
    return [(offset + i) % 10 for i in range(n)]


class Py2StrPickler(pickle._Pickler):
    """Protocol-2 pickler that writes `bytes` as Python 2 `str` (SHORT_BINSTRING / BINSTRING), as CIFAR's files do."""

    dispatch: ClassVar[dict[type, Any]] = dict(pickle._Pickler.dispatch)  # type: ignore[attr-defined]

    def save_py2_str(self, obj: bytes) -> None:
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_py2_str


def dump_py2(path: Path, obj: Any) -> None:
    with path.open("wb") as handle:
        Py2StrPickler(handle, protocol=2).dump(obj)


def dump_batch(path: Path, data: np.ndarray, batch_labels: list[int]) -> None:
    dump_py2(path, {b"batch_label": b"fixture", b"labels": batch_labels, b"data": data, b"filenames": []})


def write_tiny_cifar(root: Path) -> Path:
    """Five train batches, the test batch and the meta file, PER_BATCH images each, under root/BATCH_FOLDER."""
    folder = root / BATCH_FOLDER
    folder.mkdir(parents=True)
    for index, name in enumerate(TRAIN_FILES):
        dump_batch(folder / name, pixels(PER_BATCH, index), labels(PER_BATCH, index))
    dump_batch(folder / "test_batch", pixels(PER_BATCH, 99), labels(PER_BATCH, 99))
    dump_py2(folder / "batches.meta", {b"label_names": [n.encode() for n in NAMES], b"num_vis": 3072})
    return root


def write_tiny_image_folder(root: Path, train: int = 24, val: int = 6, classes: int = 4) -> Path:
    """An image folder as `--dataset imagefolder` reads it, root/train/<class>/<n>.png and root/val/<class>/<n>.png:
    32x32 RGB PNGs (lossless, so every read gives the same pixels) from the same seeded pixels as the CIFAR copy."""
    from PIL import Image

    for split, count, offset in (("train", train, 0), ("val", val, 7)):
        images = pixels(count, offset).reshape(count, 3, 32, 32).transpose(0, 2, 3, 1)
        for index, (image, label) in enumerate(zip(images, labels(count, offset), strict=True)):
            folder = root / split / f"class{label % classes}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.ascontiguousarray(image), "RGB").save(folder / f"{index}.png")
    return root
