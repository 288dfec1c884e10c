"""CIFAR-10 through the real loader from a tiny copy in the real on-disk format (no download, no md5 match).

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
import pytest
import torch

from esper.data import CIFAR10_MEAN, CIFAR10_STD, DataDirectoryError, load_task_data
from esper.data.cifar import BATCH_FOLDER

PER_BATCH = 6
TRAIN_FILES = [f"data_batch_{i}" for i in range(1, 6)]


def _pixels(n: int, offset: int) -> np.ndarray:
    """Row-major CIFAR layout: 1024 red, 1024 green, 1024 blue values per image."""
    rng = np.random.default_rng(offset)
    return rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)


def _labels(n: int, offset: int) -> list[int]:
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


def _dump_py2(path: Path, obj: Any) -> None:
    with path.open("wb") as handle:
        Py2StrPickler(handle, protocol=2).dump(obj)


def _dump(path: Path, data: np.ndarray, labels: list[int]) -> None:
    _dump_py2(path, {b"batch_label": b"fixture", b"labels": labels, b"data": data, b"filenames": []})


def write_tiny_cifar(root: Path) -> Path:
    folder = root / BATCH_FOLDER
    folder.mkdir(parents=True)
    for index, name in enumerate(TRAIN_FILES):
        _dump(folder / name, _pixels(PER_BATCH, index), _labels(PER_BATCH, index))
    _dump(folder / "test_batch", _pixels(PER_BATCH, 99), _labels(PER_BATCH, 99))
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    _dump_py2(folder / "batches.meta", {b"label_names": [n.encode() for n in names], b"num_vis": 3072})
    return root


@pytest.fixture
def cifar_dir(tmp_path: Path) -> Path:
    return write_tiny_cifar(tmp_path / "data")


def test_fixture_batches_read_as_bytes_keys_with_uint8_rows(cifar_dir: Path) -> None:
    """The fixture is in the documented format: b"data" uint8 [N, 3072] and b"labels" under encoding="bytes"."""
    with (cifar_dir / BATCH_FOLDER / "data_batch_1").open("rb") as handle:
        batch = pickle.load(handle, encoding="bytes")
    assert batch[b"data"].dtype == np.uint8
    assert batch[b"data"].shape == (PER_BATCH, 3072)
    assert batch[b"labels"] == _labels(PER_BATCH, 0)


def test_train_split_reads_all_five_batches(cifar_dir: Path) -> None:
    data = load_task_data("cifar10", split="train", n_samples=None, seed=0, data_dir=str(cifar_dir))
    assert data.images.shape == (5 * PER_BATCH, 3, 32, 32)
    assert data.images.dtype == torch.float32
    assert data.augment


def test_test_split_reads_test_batch(cifar_dir: Path) -> None:
    data = load_task_data("cifar10", split="val", n_samples=None, seed=0, data_dir=str(cifar_dir))
    assert len(data) == PER_BATCH
    assert data.labels.tolist() == _labels(PER_BATCH, 99)
    assert not data.augment


def test_labels_follow_the_batches_in_order(cifar_dir: Path) -> None:
    data = load_task_data("cifar10", split="train", n_samples=None, seed=0, data_dir=str(cifar_dir))
    expected = [label for index in range(5) for label in _labels(PER_BATCH, index)]
    assert data.labels.tolist() == expected
    assert data.labels.dtype == torch.int64


def test_pixels_are_normalized_with_the_cifar_statistics(cifar_dir: Path) -> None:
    data = load_task_data("cifar10", split="train", n_samples=None, seed=0, data_dir=str(cifar_dir))
    raw = torch.from_numpy(_pixels(PER_BATCH, 0)[0].astype(np.float32)).view(3, 32, 32) / 255.0
    mean = torch.tensor(CIFAR10_MEAN).view(3, 1, 1)
    std = torch.tensor(CIFAR10_STD).view(3, 1, 1)
    torch.testing.assert_close(data.images[0], (raw - mean) / std, rtol=1e-6, atol=1e-6)


def test_n_samples_keeps_the_first_samples(cifar_dir: Path) -> None:
    data = load_task_data("cifar10", split="train", n_samples=8, seed=0, data_dir=str(cifar_dir))
    assert len(data) == 8
    assert data.labels.tolist() == _labels(PER_BATCH, 0) + _labels(2, 1)


def test_a_missing_directory_is_a_one_line_error_naming_data_dir(tmp_path: Path) -> None:
    with pytest.raises(DataDirectoryError) as info:
        load_task_data("cifar10", split="train", n_samples=None, seed=0, data_dir=str(tmp_path / "nowhere"))
    assert "--data-dir" in str(info.value)
    assert "\n" not in str(info.value)


def test_no_data_dir_at_all_is_an_error_naming_data_dir() -> None:
    with pytest.raises(DataDirectoryError, match="--data-dir"):
        load_task_data("cifar10", split="train", n_samples=None, seed=0)


def test_a_missing_batch_file_is_a_one_line_error(cifar_dir: Path) -> None:
    (cifar_dir / BATCH_FOLDER / "data_batch_3").unlink()
    with pytest.raises(DataDirectoryError) as info:
        load_task_data("cifar10", split="train", n_samples=None, seed=0, data_dir=str(cifar_dir))
    assert "--data-dir" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_file_that_is_not_a_pickle_is_a_one_line_error(cifar_dir: Path) -> None:
    (cifar_dir / BATCH_FOLDER / "test_batch").write_bytes(b"not a pickle")
    with pytest.raises(DataDirectoryError, match="incomplete or unreadable"):
        load_task_data("cifar10", split="test", n_samples=None, seed=0, data_dir=str(cifar_dir))
