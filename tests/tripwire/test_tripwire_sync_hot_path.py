"""hot_path costs nothing without a counter; with one, syncs are attributed; CUDA is cross-checked where present."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import _len_torch_dispatch_stack

from tripwire.sync import hooks, hot_path
from tripwire.sync.counter import SyncCounter
from tripwire.sync.regions import _current_regions


def test_hot_path_without_a_counter_pushes_no_region_and_no_torch_mode() -> None:
    with hot_path("train_pass"):
        assert _current_regions() == []
        assert torch._C._len_torch_function_stack() == 0
        assert _len_torch_dispatch_stack() == 0


@pytest.mark.parametrize("kernels", [True, False], ids=["kernels", "dispatch mode"])
def test_counter_installs_modes_only_while_active(kernels: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """With kernels counting implicit syncs no dispatch mode is pushed, except inside inference mode."""
    monkeypatch.setattr(hooks, "use_kernels", kernels and hooks.kernels_available())
    with SyncCounter():
        dispatch = 0 if hooks.use_kernels else 1
        assert torch._C._len_torch_function_stack() == 1 and _len_torch_dispatch_stack() == dispatch
        with torch.inference_mode():
            assert _len_torch_dispatch_stack() == 1
        assert _len_torch_dispatch_stack() == dispatch
    assert torch._C._len_torch_function_stack() == 0 and _len_torch_dispatch_stack() == 0


def test_sync_inside_a_region_is_attributed_to_it_and_its_call_site() -> None:
    value = torch.ones(2)
    with SyncCounter() as counter:
        with hot_path("epoch_transfer"):
            value.sum().item()
        value.tolist()
    assert counter.counts_by_region() == {"<outside>": 1, "epoch_transfer": 1}
    (site,) = counter.sites("epoch_transfer")
    assert site.startswith("tests/tripwire/test_tripwire_sync_hot_path.py:")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only note; this machine has CUDA")
def test_cuda_cross_check_says_why_it_was_skipped_without_cuda() -> None:
    with SyncCounter(cuda_cross_check=True) as counter:
        torch.ones(1).item()
    assert counter.cuda_sync_warnings is None
    assert counter.cross_check_note == "cuda_cross_check skipped: torch.cuda.is_available() is False"


@pytest.mark.gpu
def test_cuda_sync_debug_mode_agrees_with_the_counter_on_item_and_nonzero() -> None:
    values = torch.arange(4.0, device="cuda")
    torch.cuda.synchronize()
    with SyncCounter(cuda_cross_check=True) as counter, hot_path("step"):
        values.sum().item()
        values.nonzero()
    assert counter.counts_by_kind("step") == {"implicit:nonzero": 1, "item": 1}
    assert counter.cuda_sync_warnings is not None and counter.cuda_sync_warnings >= 2, counter.format()


@pytest.mark.gpu
def test_cuda_synchronize_is_counted_though_sync_debug_mode_misses_it() -> None:
    with SyncCounter(cuda_cross_check=True) as counter, hot_path("step"):
        torch.cuda.synchronize()
    assert counter.counts_by_kind("step") == {"cuda_synchronize": 1}
    assert counter.cuda_sync_warnings == 0
