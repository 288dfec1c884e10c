"""Your own image files through torchvision's ImageFolder, written here in the real on-disk layout (PNG files)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from esper.data.datasets import load_task_data
from esper.data.records import DataDirectoryError
from esper.simic.training.config import TrainingConfig
from esper.simic.training.vectorized import run_training


def write_folder(root: Path, per_class: int = 12, size: int = 12) -> Path:
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for label, name in enumerate(("left", "right")):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(per_class):
                pixels = rng.integers(0, 60, (size, size, 3), dtype=np.uint8)
                half = slice(0, size // 2) if label == 0 else slice(size // 2, size)
                pixels[:, half] += 150  # the bright half tells the class
                Image.fromarray(pixels).save(folder / f"{i}.png")
    return root


def test_an_image_folder_loads_as_chw_splits_with_its_class_folders(tmp_path: Path) -> None:
    root = write_folder(tmp_path / "shapes")
    train = load_task_data("imagefolder", split="train", n_samples=None, seed=0, data_dir=str(root))
    raw = load_task_data("imagefolder", split="val", n_samples=5, seed=0, data_dir=str(root), normalize=False)
    assert list(train.images.shape) == [24, 3, 12, 12] and train.num_classes == 2
    assert list(raw.images.shape) == [5, 3, 12, 12] and 0.0 <= float(raw.images.min()) <= float(raw.images.max()) <= 1.0
    assert abs(float(train.images.mean())) < 1e-4  # normalized with the train split's statistics


def test_a_host_trains_on_an_image_folder_well_above_chance(tmp_path: Path) -> None:
    root = write_folder(tmp_path / "shapes", per_class=40)
    config = TrainingConfig.from_dict(
        {"dataset": "imagefolder", "data_dir": str(root), "n_episodes": 1, "n_envs": 1, "max_epochs": 5,
         "train_samples": 80, "val_samples": 80, "batch_size": 20}
    )  # fmt: skip
    result = run_training(config, controller="heuristic")
    assert result.rounds[0].mean_final_accuracy > 75.0  # chance is 50 %


def test_images_of_different_sizes_are_refused_in_one_line(tmp_path: Path) -> None:
    root = write_folder(tmp_path / "shapes", per_class=2)
    Image.fromarray(np.zeros((7, 9, 3), dtype=np.uint8)).save(root / "train" / "left" / "odd.png")
    with pytest.raises(DataDirectoryError, match=r"odd\.png is 9x7, the first image 12x12: resize"):
        load_task_data("imagefolder", split="train", n_samples=None, seed=0, data_dir=str(root))
