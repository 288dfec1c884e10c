"""Which `Tensor.to(...)` calls count as host syncs: deliberate moves to "cpu", never no-op device moves."""

from __future__ import annotations

import torch

from tripwire.sync import hot_path
from tripwire.sync.counter import SyncCounter


def count_in_region(action: object) -> dict[str, int]:
    with SyncCounter() as counter, hot_path("region"):
        action()  # type: ignore[operator]
    return counter.counts_by_kind("region")


def test_to_cpu_string_counts_on_a_cpu_run() -> None:
    tensor = torch.ones(3)
    assert count_in_region(lambda: tensor.to("cpu")) == {"to_cpu": 1}


def test_non_blocking_to_cpu_string_counts_as_its_own_kind() -> None:
    tensor = torch.ones(3)
    assert count_in_region(lambda: tensor.to("cpu", non_blocking=True)) == {"to_cpu_nonblocking": 1}


def test_move_to_a_device_object_the_tensor_is_on_does_not_count() -> None:
    tensor = torch.ones(3)
    device = torch.device("cpu")
    assert count_in_region(lambda: tensor.to(device, non_blocking=True)) == {}


def test_dtype_conversion_does_not_count() -> None:
    tensor = torch.ones(3)
    assert count_in_region(lambda: tensor.to(torch.float64)) == {}


def test_clip_grad_norm_internals_do_not_count() -> None:
    layer = torch.nn.Linear(4, 2)
    layer(torch.ones(1, 4)).sum().backward()
    assert count_in_region(lambda: torch.nn.utils.clip_grad_norm_(layer.parameters(), 1.0)) == {}


def test_item_still_counts() -> None:
    tensor = torch.ones(1)
    assert count_in_region(lambda: tensor.item()) == {"item": 1}
