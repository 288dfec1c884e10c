"""With gpu_preload=True the per-env batch size reaches both shared iterators and every env batch (CPU run)."""

from __future__ import annotations

import pytest
import torch

from esper.leyline import get_task_spec
from esper.simic.training import wiring
from esper.simic.training.config import ConfigError, TrainingConfig


@pytest.fixture
def preload_config() -> TrainingConfig:
    return TrainingConfig.from_dict(
        {"n_envs": 2, "batch_size": 123, "train_samples": 246, "val_samples": 123, "gpu_preload": True}
    )


def test_both_iterators_get_the_per_env_batch_size(preload_config: TrainingConfig) -> None:
    task = get_task_spec(preload_config.task)
    devices = [torch.device("cpu")]

    train = wiring.batch_source(preload_config, task, "train", devices).iterator
    val = wiring.batch_source(preload_config, task, "val", devices).iterator

    assert (train.batch_size_per_env, val.batch_size_per_env) == (123, 123)
    assert train.gpu_preload and val.gpu_preload


def test_every_env_is_served_batches_of_the_per_env_size(preload_config: TrainingConfig) -> None:
    task = get_task_spec(preload_config.task)
    source = wiring.batch_source(preload_config, task, "train", [torch.device("cpu")])

    steps = list(source(0, 1))

    assert len(steps) == 2
    assert all(len(step) == 2 for step in steps)
    assert {tuple(x.shape[:1]) + tuple(y.shape) for step in steps for x, y in step} == {(123, 123)}


def test_preloaded_and_host_iterators_serve_the_same_samples(preload_config: TrainingConfig) -> None:
    task = get_task_spec(preload_config.task)
    preloaded = wiring.batch_source(preload_config, task, "val", [torch.device("cpu")])
    host_config = TrainingConfig.from_dict({**vars(preload_config), "gpu_preload": False})
    host = wiring.batch_source(host_config, task, "val", [torch.device("cpu")])

    a = [y for step in preloaded(0, 1) for _, y in step]
    b = [y for step in host(0, 1) for _, y in step]

    assert all(torch.equal(p, q) for p, q in zip(a, b)) and len(a) == len(b) == 2


def test_a_batch_larger_than_the_training_samples_is_refused_before_any_data_is_built() -> None:
    with pytest.raises(ConfigError, match="--batch-size 123 is larger than --train-samples 100"):
        TrainingConfig.from_dict({"n_envs": 2, "batch_size": 123, "train_samples": 100, "gpu_preload": True})
