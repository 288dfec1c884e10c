"""The host-bound workload trains on the 8x8 images it claims, and its faithful plain loop does our trainer's work.

A task's host is fitted to the data it loads (`fit_task_to_data`): with the synthetic set, 32x32, `HOST_BOUND_TASK`'s
`image_size=8` was replaced by 32, and every host-cost figure up to stop 60 was taken on 32x32 images. The task loads
its own 8x8 images now; this test fails if the host is fitted to anything else.

`FaithfulPlainLoopWorkload` is the base that splits our host cost into the original's semantics and our own: it must
do the same arithmetic as our trainer's first epoch, which the bare plain loop (no clipping) does not.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import pytest
import torch

from esper.data.datasets import load_task_data
from esper.nissa import TelemetryHub
from esper.simic.training.wiring import fit_task_to_data
from workloads import (
    HOST_BOUND,
    HOST_BOUND_TASK,
    EpochWorkload,
    FaithfulPlainLoopWorkload,
    PlainLoopWorkload,
    host_bound_config,
)


def test_the_host_bound_task_is_fitted_to_8x8_images() -> None:
    config = host_bound_config(1)
    assert config.task == "workloads:HOST_BOUND_TASK" and config.batch_size == HOST_BOUND.batch_size == 4
    splits = [
        load_task_data(HOST_BOUND_TASK.dataset, split=split, n_samples=n, seed=config.seed)
        for split, n in (("train", HOST_BOUND.train_samples), ("val", HOST_BOUND.val_samples))
    ]
    assert [tuple(split.images.shape) for split in splits] == [(1000, 3, 8, 8), (200, 3, 8, 8)]
    fitted = fit_task_to_data(HOST_BOUND_TASK, *splits)
    assert (fitted.image_size, fitted.in_channels) == (8, 3)


def _host_after_one_epoch(kind: type[EpochWorkload] | type[PlainLoopWorkload]) -> dict[str, torch.Tensor]:
    workload = kind(host_bound_config(1), TelemetryHub())
    workload.prepare()
    workload.run()
    return {name: value.clone() for name, value in workload.envs[0].model.host.state_dict().items()}


@pytest.mark.parametrize(("kind", "same"), [(FaithfulPlainLoopWorkload, True), (PlainLoopWorkload, False)])
def test_the_faithful_plain_loop_trains_the_host_to_our_trainer_s_bits(
    kind: type[PlainLoopWorkload], same: bool
) -> None:
    ours, theirs = _host_after_one_epoch(EpochWorkload), _host_after_one_epoch(kind)
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[name], theirs[name]) for name in ours) is same
