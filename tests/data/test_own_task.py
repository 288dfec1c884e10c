"""Your own task (host shape) and the augmentation option."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from esper.leyline import TaskSpec, UnknownTaskError, get_task_spec
from esper.leyline.tasks import TASKS, register_task
from esper.simic.training import wiring
from esper.simic.training.config import TrainingConfig
from esper.simic.training.vectorized import run_training

MY_TASK = """
from esper.leyline import TaskSpec

WIDE = TaskSpec(name="wide_host", base_channels=12, n_blocks=2, description="two blocks, 12 -> 24 channels")
"""


def test_a_task_given_as_module_attribute_shapes_the_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_tasks.py").write_text(MY_TASK, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("my_tasks", None)
    config = TrainingConfig.from_dict(
        {"task": "my_tasks:WIDE", "n_episodes": 1, "n_envs": 1, "max_epochs": 2, "train_samples": 50,
         "val_samples": 25, "batch_size": 25}
    )  # fmt: skip
    result = run_training(config, controller="heuristic")
    classifier = next(v for k, v in result.final_weights.items() if k.endswith("classifier.weight"))
    assert classifier.shape == (10, 24)


def test_register_task_adds_a_name_and_refuses_to_replace_a_built_in() -> None:
    spec = register_task(TaskSpec(name="tiny_host", base_channels=2))
    try:
        assert get_task_spec("tiny_host") is spec
        with pytest.raises(UnknownTaskError, match="task 'cifar_baseline' is built in"):
            register_task(TaskSpec(name="cifar_baseline", base_channels=8))
    finally:
        TASKS.pop("tiny_host")


def test_a_task_that_is_not_a_task_spec_is_refused_in_one_line() -> None:
    with pytest.raises(UnknownTaskError, match=r"--task esper\.leyline:SeedStage is a EnumType"):
        get_task_spec("esper.leyline:SeedStage")


@pytest.mark.parametrize(("flag", "expected"), [(None, False), (True, True), (False, False)])
def test_augmentation_is_an_option(flag: bool | None, expected: bool) -> None:
    config = TrainingConfig.from_dict({"augment": flag, "n_envs": 1, "train_samples": 50, "batch_size": 25})
    task = get_task_spec(config.task)
    source = wiring.batch_source(config, task, "train", [torch.device("cpu")])
    assert source.iterator.augment is expected  # synthetic data: off unless asked for
