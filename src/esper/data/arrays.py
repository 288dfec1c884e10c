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
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import torch

from esper.data.records import MAX_CLASSES, DataCheckError, DataDirectoryError, ImageDataset
from esper.messages import escape, first_line

SPLIT_KEYS = {"train": ("x_train", "y_train"), "val": ("x_val", "y_val"), "test": ("x_test", "y_test")}
KNOWN_KEYS = tuple(key for pair in SPLIT_KEYS.values() for key in pair)
# The largest array one member may declare (its .npy header's shape x itemsize, and its uncompressed size in the zip
# directory), checked before anything is read: a zip bomb or a header declaring 10**12 images is refused, not allocated.
NPZ_MEMBER_LIMIT_BYTES = 4 * 2**30


def load_npz(path: str, *, split: str, n_samples: int | None, normalize: bool = True) -> ImageDataset:
    """One split of an `.npz` archive as a normalized ImageDataset; DataDirectoryError (one line) otherwise."""
    source = Path(path)
    arrays = _read(source)
    x_train, y_train = _split(arrays, source, "train")
    x, y = (x_train, y_train) if split == "train" else _held_out(arrays, source)
    if x.shape[1:] != x_train.shape[1:]:
        held = "x_val" if "x_val" in arrays else "x_test"
        raise DataCheckError(
            f"--data-dir {_shown(source)}: {held} images are {_chw(x)} (C x H x W), x_train's {_chw(x_train)}: "
            "save both splits with the same channels and size"
        )
    classes = int(max(y_train.max(), y.max())) + 1
    mean = x_train.mean(axis=(0, 2, 3), keepdims=True) if normalize else 0.0
    std = x_train.std(axis=(0, 2, 3), keepdims=True) + 1e-6 if normalize else 1.0
    if n_samples is not None:
        x, y = x[:n_samples], y[:n_samples]
    images = torch.from_numpy(((x - mean) / std).astype(np.float32))
    return ImageDataset(images, torch.from_numpy(y), num_classes=classes, name=f"{source.stem}-{split}", augment=False)


def _shown(source: Path) -> str:
    return escape(str(source))


def _chw(x: np.ndarray) -> str:
    return "x".join(str(n) for n in x.shape[1:])


def _read(source: Path) -> dict[str, np.ndarray]:
    """The split arrays of the archive (members other than KNOWN_KEYS are ignored), each bounded before it is read."""
    if not source.is_file():
        raise DataDirectoryError(f"--data-dir {_shown(source)} is not a file: pass the path of an .npz archive")
    try:
        members = _checked_members(source)
        with np.load(source, allow_pickle=False) as archive:
            arrays = {key: archive[key] for key in members}
    except DataDirectoryError:
        raise
    except RuntimeError as error:  # zipfile's "File ... is encrypted, password required for extraction"
        raise DataDirectoryError(
            f"--data-dir {_shown(source)} holds an encrypted member ({first_line(error, 200)}): numpy cannot read "
            "it; write the archive again with numpy.savez"
        ) from None
    except (OSError, ValueError, zipfile.BadZipFile, zlib.error, EOFError, KeyError, NotImplementedError) as error:
        raise DataDirectoryError(
            f"--data-dir {_shown(source)} is not a readable .npz archive of plain arrays ({first_line(error, 200)}): "
            "write it with numpy.savez(path, x_train=..., y_train=..., x_val=..., y_val=...)"
        ) from None
    for key, array in arrays.items():
        if not isinstance(array, np.ndarray):
            raise DataDirectoryError(f"--data-dir {_shown(source)}: {key} is not an array: save it with numpy.savez")
    return arrays


def _checked_members(source: Path) -> list[str]:
    """The KNOWN_KEYS members present, after checking each one's zip and .npy header sizes against the limit."""
    present = []
    for key, (declared, _, dtype) in _member_headers(source).items():
        if dtype is not None and dtype.hasobject:
            raise DataDirectoryError(
                f"--data-dir {_shown(source)}: {key} holds Python objects ({dtype}), not plain arrays: "
                "save numeric arrays"
            )
        if declared > NPZ_MEMBER_LIMIT_BYTES:
            raise DataCheckError(
                f"--data-dir {_shown(source)}: member {key}.npy declares {declared} bytes, over the limit of "
                f"{NPZ_MEMBER_LIMIT_BYTES} bytes (NPZ_MEMBER_LIMIT_BYTES): save fewer or smaller images"
            )
        present.append(key)
    return present


def _member_headers(source: Path) -> dict[str, tuple[int, tuple[int, ...], np.dtype[Any] | None]]:
    """Each KNOWN_KEYS member's (bytes it declares, shape, dtype), read from the zip directory and the .npy header
    only; a member whose zip size is already over the limit is not opened (shape () and dtype None)."""
    headers: dict[str, tuple[int, tuple[int, ...], np.dtype[Any] | None]] = {}
    with zipfile.ZipFile(source) as archive:
        infos = {info.filename: info for info in archive.infolist()}
        for key in KNOWN_KEYS:
            info = infos.get(f"{key}.npy")
            if info is None:
                continue
            if info.file_size > NPZ_MEMBER_LIMIT_BYTES:
                headers[key] = (info.file_size, (), None)
                continue
            with archive.open(info) as member:
                version = np.lib.format.read_magic(member)
                if version == (1, 0):
                    shape, _, dtype = np.lib.format.read_array_header_1_0(member)
                elif version == (2, 0):
                    shape, _, dtype = np.lib.format.read_array_header_2_0(member)
                else:
                    raise ValueError(f"{key}: .npy format version {version} is not supported")
            declared = max(info.file_size, int(np.prod(shape, dtype=object)) * dtype.itemsize)
            headers[key] = (declared, tuple(shape), dtype)
    return headers


def loading_footprint(path: str, n_samples: dict[str, int]) -> int | None:
    """A lower bound, in bytes, of the memory loading this archive for a run takes, from its headers alone: every
    member as read (each split's load reads them all), plus the train images twice more as float32 (scaled, then
    normalized) while a split converts, or, when larger, the float32 images both splits keep (`n_samples` per
    split: the first that many). None when the headers cannot be read (loading then says why)."""
    try:
        headers = _member_headers(Path(path))
    except (OSError, ValueError, zipfile.BadZipFile, zlib.error, EOFError, KeyError, NotImplementedError, RuntimeError):
        return None
    if any(dtype is None or declared > NPZ_MEMBER_LIMIT_BYTES for declared, _, dtype in headers.values()):
        return None  # over the member limit: loading refuses it, naming the member
    read = sum(declared for declared, _, _ in headers.values())

    def images(key: str, keep: int | None = None) -> int:
        shape = headers[key][1] if key in headers else ()
        if not shape:
            return 0
        rows = shape[0] if keep is None else min(shape[0], keep)
        return 4 * rows * int(np.prod(shape[1:], dtype=object))

    held = "x_val" if "x_val" in headers else "x_test"
    converting = read + 2 * images("x_train")
    kept = images("x_train", n_samples.get("train")) + images(held, n_samples.get("val"))
    return max(converting, kept)


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
    if x.dtype.kind not in "uif" or x.ndim not in (3, 4) or min(x.shape) == 0:
        raise DataDirectoryError(
            f"--data-dir {_shown(source)}: {key} must be a numeric array [N, C, H, W], [N, H, W, C] or [N, H, W] "
            f"with every dimension at least 1, got {x.dtype} {list(x.shape)}"
        )
    if x.dtype.kind == "f" and not np.isfinite(x).all():
        raise DataCheckError(
            f"--data-dir {_shown(source)}: {key} holds {int((~np.isfinite(x)).sum())} NaN or infinite values: "
            "replace them (e.g. numpy.nan_to_num) or drop those samples"
        )
    with np.errstate(over="ignore"):
        scaled = x.astype(np.float32) / (255.0 if x.dtype == np.uint8 else 1.0)
    if not np.isfinite(scaled).all():
        raise DataCheckError(
            f"--data-dir {_shown(source)}: {key} holds values beyond float32's range: scale your images to [0, 1]"
        )
    if scaled.ndim == 3:
        return scaled[:, None]
    if scaled.shape[-1] in (1, 3, 4) and scaled.shape[1] not in (1, 3, 4):
        return scaled.transpose(0, 3, 1, 2).copy()  # channels last
    return scaled


def _labels(y: np.ndarray, source: Path, key: str, count: int) -> np.ndarray:
    if y.dtype.kind not in "ui" or y.shape != (count,) or (count and y.min() < 0):
        raise DataDirectoryError(
            f"--data-dir {_shown(source)}: {key} must be {count} non-negative integer labels, "
            f"got {y.dtype} {list(y.shape)}"
        )
    if count and int(y.max()) >= MAX_CLASSES:
        raise DataCheckError(
            f"--data-dir {_shown(source)}: {key} holds label {int(y.max())}: labels must be integers 0..K-1 with K at "
            f"most {MAX_CLASSES} (MAX_CLASSES); renumber your classes"
        )
    return y.astype(np.int64)
