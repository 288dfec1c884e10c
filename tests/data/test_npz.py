"""Your own images from an .npz archive: any channels, size and classes; the host adapts; bad archives are one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from esper.data.datasets import load_task_data
from esper.data.records import DataDirectoryError
from esper.simic.training.config import TrainingConfig
from esper.simic.training.vectorized import run_training


def quadrants(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """8x8 one-channel images, 4 classes: a bright quadrant per class."""
    labels = rng.integers(0, 4, n)
    images = rng.normal(0.0, 0.3, (n, 8, 8)).astype(np.float32)
    for i, label in enumerate(labels):
        row, col = divmod(int(label), 2)
        images[i, row * 4 : row * 4 + 4, col * 4 : col * 4 + 4] += 1.0
    return images, labels


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    (x_train, y_train), (x_val, y_val) = quadrants(200, rng), quadrants(50, rng)
    path = tmp_path / "quadrants.npz"
    np.savez(path, x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val)
    return path


def test_a_one_channel_8x8_four_class_archive_trains_and_the_host_adapts(archive: Path) -> None:
    config = TrainingConfig.from_dict(
        {
            "dataset": "npz",
            "data_dir": str(archive),
            "n_episodes": 1,
            "n_envs": 1,
            "max_epochs": 4,
            "train_samples": 200,
            "val_samples": 50,
            "batch_size": 25,
        }
    )
    result = run_training(config, controller="heuristic")
    classifier = next(v for k, v in result.final_weights.items() if k.endswith("classifier.weight"))
    first_conv = next(v for k, v in result.final_weights.items() if v.dim() == 4)
    assert classifier.shape[0] == 4 and first_conv.shape[1] == 1
    assert result.rounds[0].mean_final_accuracy > 50.0  # well above chance (25 %): the host learns the quadrants


def test_channels_last_uint8_images_load_as_normalized_chw(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (30, 16, 16, 3), dtype=np.uint8)
    path = tmp_path / "rgb.npz"
    np.savez(path, x_train=x, y_train=np.arange(30) % 3, x_test=x[:10], y_test=np.arange(10) % 3)
    train = load_task_data("npz", split="train", n_samples=None, seed=0, data_dir=str(path))
    val = load_task_data("npz", split="val", n_samples=5, seed=0, data_dir=str(path))
    assert list(train.images.shape) == [30, 3, 16, 16] and list(val.images.shape) == [5, 3, 16, 16]
    assert train.num_classes == 3 and not train.augment
    assert torch.allclose(train.images.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-4)


@pytest.mark.parametrize(
    ("arrays", "needle"),
    [
        ({"x_train": np.array([object()] * 3, dtype=object), "y_train": np.zeros(3, dtype=np.int64)}, "plain arrays"),
        ({"x_train": np.zeros((3, 8, 8), np.float32)}, "lacks x_train/y_train"),
        ({"x_train": np.zeros((3, 8, 8), np.float32), "y_train": np.zeros(3, np.float32)}, "integer labels"),
        ({"x_train": np.zeros((3,), np.float32), "y_train": np.zeros(3, np.int64)}, "numeric array [N, C, H, W]"),
    ],
)
def test_a_bad_archive_is_refused_in_one_line(tmp_path: Path, arrays: dict[str, np.ndarray], needle: str) -> None:
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    with pytest.raises(DataDirectoryError, match=r"--data-dir .*bad\.npz") as caught:
        load_task_data("npz", split="train", n_samples=None, seed=0, data_dir=str(path))
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_npz_without_a_path_is_refused_in_one_line() -> None:
    with pytest.raises(DataDirectoryError, match=r"pass --data-dir PATH\.npz"):
        load_task_data("npz", split="train", n_samples=None, seed=0, data_dir=None)
