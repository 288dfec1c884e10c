"""CIFAR-10 through the real loader from a tiny copy in the real on-disk format (no download, no md5 match);
the copy is written by tests/cifar_files.py (Python 2 pickles, as the official batches are)."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from cifar_files import PER_BATCH, write_tiny_cifar
from cifar_files import labels as _labels
from cifar_files import pixels as _pixels
from esper.data import CIFAR10_MEAN, CIFAR10_STD, DataDirectoryError, load_task_data
from esper.data.cifar import BATCH_FOLDER


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
