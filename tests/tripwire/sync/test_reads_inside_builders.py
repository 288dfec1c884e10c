"""A list of device scalars made into a tensor reads every scalar: one wait each on a GPU, then the upload.

skrl's KL-adaptive scheduler keeps one 0-d KL tensor a mini-batch and calls `torch.tensor(kl_divergences,
device=self.device)` once an epoch: on a GPU torch reads the 32 elements to the host one at a time (32 waits), then
uploads the list. The counter counted that call as one upload and none of its reads, while the same list built on
the host (`device="cpu"`) counted every read. Counted by the stand-ins on the conversions torch calls for each
element (`__float__`, `__index__`), as the loop's own reads; an element built in host memory is read without a wait.
The function mode (`explicit.use_patches = False`, the earlier design, kept for call-by-call comparisons) handles a
call with every mode off and sees no read inside a builder: these tests run with the stand-ins only.
"""

from __future__ import annotations

import torch

from tripwire.sync import hot_path
from tripwire.sync.counter import SyncCounter

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def count_in_region(build: object) -> dict[str, int]:
    assert callable(build)
    with SyncCounter() as counter, hot_path("region"):
        build()
    return counter.counts_by_kind("region")


def scalars(count: int) -> list[torch.Tensor]:
    layer = torch.nn.Linear(3, 1).to(DEVICE)
    inputs = torch.ones(4, 3, device=DEVICE)
    with torch.no_grad():
        return [layer(inputs * step).mean() for step in range(count)]


def test_a_list_of_device_scalars_uploaded_is_a_read_each_then_one_copy() -> None:
    values = scalars(5)
    assert count_in_region(lambda: torch.tensor(values, device=DEVICE)) == {"float": 5, "tensor_to_device": 1}
    assert count_in_region(lambda: torch.as_tensor(values, device=DEVICE)) == {"float": 5, "tensor_to_device": 1}
    nested = [values[:2], values[2:4]]
    assert count_in_region(lambda: torch.tensor(nested, device=DEVICE)) == {"float": 4, "tensor_to_device": 1}


def test_integer_and_boolean_scalars_are_read_through_their_index() -> None:
    flags = [value > 0 for value in scalars(3)]
    assert count_in_region(lambda: torch.tensor(flags, device=DEVICE)) == {"index": 3, "tensor_to_device": 1}
    counts = [flag.long() for flag in flags]
    assert count_in_region(lambda: torch.tensor(counts, device=DEVICE)) == {"index": 3, "tensor_to_device": 1}


def test_the_same_list_kept_on_the_host_is_the_reads_alone() -> None:
    values = scalars(3)
    assert count_in_region(lambda: torch.tensor(values, device="cpu")) == {"float": 3}
    assert count_in_region(lambda: torch.tensor(values)) == {"float": 3}


def test_scalars_built_in_host_memory_are_read_without_a_wait() -> None:
    def build() -> None:
        torch.tensor([torch.tensor(0.5), torch.ones(())], device=DEVICE)

    assert count_in_region(build) == {"tensor_to_device": 1}


def test_the_values_are_torchs_own() -> None:
    values = scalars(4)
    with SyncCounter():
        inside = torch.tensor(values, device=DEVICE)
    assert torch.equal(inside, torch.tensor(values, device=DEVICE))
