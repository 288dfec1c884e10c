"""No reference escapes, and uploads that block are counted.

A synchronize function or a collective referenced before the counter started (`from torch.distributed import
barrier` at a module's top, `sync = torch.cuda.synchronize` at import) is counted like one looked up at the call.
A host-to-device copy that blocks the host (`torch.tensor(rows, device=device)`, a `.to(device)` or `copy_` of a
host-built tensor without `non_blocking`) is counted on a CPU run, by reading the call and by which tensors were
built in host memory; the pinned, non-blocking copy it replaces is not.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.distributed import all_reduce as early_all_reduce
from torch.distributed import barrier as early_barrier

from tripwire.sync import hot_path
from tripwire.sync.counter import SyncCounter

pytestmark = pytest.mark.usefixtures("explicit_hooks")  # stand-ins and the function mode alike

EARLY_SYNCHRONIZE = torch.cuda.synchronize  # taken at import, before any counter patched anything
EARLY_EMPTY_CACHE = torch.cuda.empty_cache
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def count_in_region(action: Callable[[], object]) -> dict[str, int]:
    with SyncCounter() as counter, hot_path("region"):
        action()
    return counter.counts_by_kind("region")


@pytest.fixture
def one_rank_group(tmp_path: Path) -> Iterator[None]:
    if not dist.is_available():
        pytest.skip("this torch build has no torch.distributed")
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_collectives_imported_by_name_at_the_top_are_counted(one_rank_group: None) -> None:
    def step() -> None:
        early_barrier()
        early_all_reduce(torch.ones(2))

    assert count_in_region(step) == {"collective:barrier": 1, "collective:all_reduce": 1}


def test_a_collective_called_on_the_process_group_itself_is_counted(one_rank_group: None) -> None:
    group = dist.group.WORLD
    assert group is not None
    assert count_in_region(lambda: group.barrier().wait()) == {"collective:barrier": 1}


def test_a_synchronize_taken_by_reference_at_import_is_counted() -> None:
    def step() -> None:
        # without a GPU the call raises after it was counted (the count is of the call, as on a GPU): a
        # RuntimeError from a CUDA build, an AssertionError from a CPU-only one ("not compiled with CUDA")
        no_gpu = contextlib.suppress(RuntimeError, AssertionError)
        with no_gpu if not torch.cuda.is_available() else contextlib.nullcontext():
            EARLY_SYNCHRONIZE()

    assert count_in_region(step) == {"cuda_synchronize": 1}
    assert torch.cuda.synchronize is EARLY_SYNCHRONIZE  # the function object itself, restored when counting stopped
    assert torch.cuda.synchronize.__code__.co_name == "synchronize"


def test_emptying_the_allocators_cache_is_a_wait_on_every_device() -> None:
    """`torch.cuda.empty_cache()` waits for the device's outstanding work before it frees the cached blocks (the
    original trainer's own comments call it a synchronous flush and keep it out of the loop). A no-op on a CPU run,
    counted there as the wait the same line makes on a GPU, by reference too; the functions are put back after."""

    def step() -> None:
        scratch = torch.ones(1 << 20, device=DEVICE) * 2  # a block for the cache to hold on a GPU
        del scratch
        torch.cuda.empty_cache()
        EARLY_EMPTY_CACHE()
        try:
            torch.accelerator.empty_cache()
        except RuntimeError:  # a CPU-only build of torch has no accelerator to ask; on a GPU the line waits
            assert not torch.accelerator.is_available()

    assert count_in_region(step) == {"cuda_empty_cache": 2, "accelerator_empty_cache": 1}
    assert torch.cuda.empty_cache is EARLY_EMPTY_CACHE and torch.cuda.empty_cache.__code__.co_name == "empty_cache"


def test_a_list_uploaded_with_a_device_target_is_one_blocking_copy() -> None:
    rows = [0.5, 0.25]
    assert count_in_region(lambda: torch.tensor(rows, dtype=torch.float32, device=DEVICE)) == {"tensor_to_device": 1}
    assert count_in_region(lambda: torch.tensor(rows, dtype=torch.float32)) == {}  # stays on the host


def test_a_host_built_tensor_moved_without_non_blocking_is_a_blocking_copy() -> None:
    def step() -> None:
        table = torch.tensor([0.5, 0.25])
        table.to(DEVICE)  # built above, moved here: the provenance, not the line, says it is host memory
        torch.tensor([1, 2]).float().to(DEVICE)
        rows = torch.zeros(3)
        rows[1:].to(DEVICE)

    assert count_in_region(step) == {"to_device": 3}


def test_a_tensor_built_under_an_inner_counter_still_carries_to_its_views() -> None:
    """A counter that stops while another runs ends no recording: what it marked is still host memory, and a view of
    it too."""
    with SyncCounter():  # the recording: it runs on
        with SyncCounter():
            kept = torch.zeros(3)  # built in host memory while the first counter ran, alive after it
        assert count_in_region(lambda: kept.view(-1).to(DEVICE)) == {"to_device": 1}


def test_a_recording_forgets_the_tensors_it_marked_when_it_ends() -> None:
    """Which tensors were host memory is the recording's: the next one knows only what it sees, as the first did. A
    mark left behind hid a read on a GPU run: `obs` built in host memory in one recording, moved to the device between
    recordings (a CUDA tensor on a GPU, the same object on a CPU run), read in the next."""
    with SyncCounter():
        obs = torch.zeros(3)
    obs = obs.to(DEVICE)
    assert count_in_region(lambda: obs.tolist()) == {"tolist": 1}


def test_a_tensor_moved_to_the_device_is_a_device_tensor_from_then_on() -> None:
    buffer = torch.empty(2, device=DEVICE)

    def step() -> None:
        rewards = torch.tensor([1.0, 2.0]).to(DEVICE)  # the upload, counted once ...
        buffer.copy_(rewards)  # ... and this is a device-to-device copy (on a CPU run, the same tensor object)

    assert count_in_region(step) == {"to_device": 1}


def test_the_non_blocking_copy_of_a_host_tensor_is_not_counted() -> None:
    def step() -> None:
        table = torch.tensor([0.5, 0.25])
        if DEVICE.type == "cuda":
            table = table.pin_memory()
        table.to(DEVICE, non_blocking=True)

    assert count_in_region(step) == {}


def test_a_tensor_computed_on_the_device_is_not_an_upload() -> None:
    layer = torch.nn.Linear(2, 2).to(DEVICE)
    inputs = torch.ones(1, 2, device=DEVICE)
    assert count_in_region(lambda: layer(inputs).to(DEVICE)) == {}


def test_copy_into_a_device_buffer_from_host_data_counts_unless_non_blocking() -> None:
    buffer = torch.empty(2, device=DEVICE)

    def blocking() -> None:
        buffer.copy_(torch.tensor([1.0, 2.0]))

    def non_blocking() -> None:
        source = torch.tensor([1.0, 2.0])
        buffer.copy_(source.pin_memory() if DEVICE.type == "cuda" else source, non_blocking=True)

    assert count_in_region(blocking) == {"copy_to_device": 1}
    assert count_in_region(non_blocking) == {}


def test_a_sync_inside_a_comprehension_is_keyed_by_its_function() -> None:
    def gather(values: list[torch.Tensor]) -> list[float]:
        return [value.item() for value in values]

    with SyncCounter() as counter, hot_path("region"):
        gather([torch.ones((), device=DEVICE), torch.zeros((), device=DEVICE)])
    functions = {event.function for event in counter.events}
    # Python 3.12 inlines comprehensions (PEP 709); 3.11 runs them as `<listcomp>`: one key for both
    assert functions == {"test_a_sync_inside_a_comprehension_is_keyed_by_its_function.<locals>.gather"}


def test_a_stack_or_cat_is_host_built_only_when_every_part_is() -> None:
    """`torch.stack`/`torch.cat` of tensors the counter never saw built (made before it started, as a loaded or
    received tensor is) is not marked host memory; of host-built parts it is. Checked against torch's own functions,
    not what `torch.stack` names while the stand-ins are in place."""
    unseen = [torch.ones(2), torch.zeros(2)]

    def step() -> None:
        torch.stack(unseen).to(DEVICE)
        torch.cat(unseen).to(DEVICE)

    def built_here() -> None:
        parts = [torch.ones(2), torch.zeros(2)]
        torch.stack(parts).to(DEVICE)
        torch.cat(parts).to(DEVICE)

    assert count_in_region(step) == ({"to_device": 2} if DEVICE.type != "cpu" else {})
    assert count_in_region(built_here) == {"to_device": 2}


def test_a_non_blocking_upload_from_pageable_memory_counts_only_past_the_drivers_staging() -> None:
    """Measured on an H200: a `non_blocking=True` upload of 1 MiB of pageable memory returned with a kernel still
    running, one of 16 MiB waited for it (docs/measurements.md). A blocking one waits at any size."""
    from tripwire.sync.copies import STAGED_BYTES

    fits, past = STAGED_BYTES // 4, STAGED_BYTES // 4 + 1  # float32 elements
    assert count_in_region(lambda: torch.zeros(fits).to(DEVICE, non_blocking=True)) == {}
    assert count_in_region(lambda: torch.zeros(past).to(DEVICE, non_blocking=True)) == {"to_device": 1}
    assert count_in_region(lambda: torch.zeros(fits).to(DEVICE)) == {"to_device": 1}
