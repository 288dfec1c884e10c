"""Real data without a download: scikit-learn's digits through the `package.module:function` loader form."""

from __future__ import annotations

import pytest

from esper.data.datasets import load_task_data
from esper.data.records import DataDirectoryError
from esper.simic.training.config import ConfigError, TrainingConfig
from esper.simic.training.vectorized import run_training

pytest.importorskip("sklearn", reason="scikit-learn is in the test extra")


def test_the_digits_load_as_one_channel_8x8_ten_class_splits() -> None:
    train = load_task_data("esper.data.digits:load", split="train", n_samples=None, seed=3, data_dir=None)
    val = load_task_data("esper.data.digits:load", split="val", n_samples=100, seed=3, data_dir=None)
    assert list(train.images.shape) == [1500, 1, 8, 8] and list(val.images.shape) == [100, 1, 8, 8]
    assert train.num_classes == 10 and not train.augment


def test_the_host_learns_the_digits_well_above_chance() -> None:
    config = TrainingConfig.from_dict(
        {
            "dataset": "esper.data.digits:load",
            "n_episodes": 1,
            "n_envs": 1,
            "max_epochs": 6,
            "train_samples": 1500,
            "val_samples": 297,
            "batch_size": 50,
            "task": "cifar_baseline",
        }
    )
    result = run_training(config, controller="heuristic")
    accuracy = result.rounds[0].mean_final_accuracy
    print(f"digits held-out accuracy after 6 epochs: {accuracy:.1f} %")
    assert accuracy > 60.0  # chance is 10 %


def test_a_loader_that_cannot_be_imported_or_is_malformed_is_one_line() -> None:
    with pytest.raises(DataDirectoryError, match=r"cannot import 'nothing' from 'esper\.data\.digits'"):
        load_task_data("esper.data.digits:nothing", split="train", n_samples=None, seed=0, data_dir=None)
    with pytest.raises(ConfigError, match=r"package\.module:function, got 'not a loader'"):
        TrainingConfig.from_dict({"dataset": "not a loader"})
