"""A tensor handed to a builder with a place: `torch.as_tensor(t, device=...)`, `torch.tensor(t, ...)`,
`torch.asarray(t, ...)`.

torch moves `t` with a blocking `t.to(device)` of its own C++ (`internal_new_from_data`), which no stand-in sees: a
host tensor onto a device is an upload the host waits for, a device tensor onto the host a download. Neither run
counted either. A GPU run now reads the tensors; a CPU run reads where `t` is host memory and whether the call spells
the host, as it does for `.to(...)`; and what comes back is where it landed from then on.
"""

from __future__ import annotations

import pytest
import torch
from sync_counts import counted

from tripwire.sync import hot_path
from tripwire.sync.counter import SyncCounter

pytestmark = [
    pytest.mark.usefixtures("explicit_hooks"),  # stand-ins and the function mode alike
    pytest.mark.filterwarnings("ignore:To copy construct from a tensor:UserWarning"),
]

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def test_a_host_tensor_given_a_device_is_an_upload_once() -> None:
    """On a CPU run what comes back is often `t` itself, device memory from then on: each builder is handed a tensor
    of its own, as `.to(device)`'s tests do (a host tensor uploaded twice is one upload on a CPU run)."""

    def step() -> None:
        for moved in (
            torch.as_tensor(torch.ones(3), device=DEVICE),  # an upload each ...
            torch.tensor(torch.ones(3), device=DEVICE),
            torch.asarray(torch.ones(3), device=DEVICE),
        ):
            moved.to(DEVICE)  # ... after which it is device memory: nothing more moves
            moved.float().to(DEVICE)

    assert counted(step) == {"tensor_to_device": 3}


def test_a_device_tensor_given_the_host_is_a_download() -> None:
    """Each time, as `.cpu()` is: on a CPU run what comes back is the tensor itself, a counted copy to the host, and
    given the host again it is still the device tensor a GPU run copies again. A read chained to the copy is not a
    second wait."""
    on_device = torch.ones(3, device=DEVICE) * 2  # device memory on either run

    def step() -> None:
        torch.as_tensor(on_device, device="cpu")  # a download each
        torch.tensor(on_device, device="cpu")
        torch.asarray(on_device, device=torch.device("cpu"))
        torch.as_tensor(on_device, device="cpu").sum().item()  # the download, then a read of host memory
        torch.as_tensor(on_device, device=DEVICE)  # where it is: nothing moves
        torch.tensor(on_device, device=DEVICE)
        torch.asarray(on_device, device=DEVICE)

    assert counted(step) == {"to_cpu": 4}


def test_nothing_moves_without_a_place_and_a_host_copy_stays_host_memory() -> None:
    on_device = torch.ones(3, device=DEVICE) * 2

    def step() -> None:
        torch.as_tensor(on_device)  # each stays on the device
        torch.tensor(on_device)
        torch.asarray(on_device)
        for rows in (
            torch.as_tensor(torch.arange(3), dtype=torch.float32),  # a host copy of host memory: host memory ...
            torch.tensor(torch.arange(3)),
            torch.asarray(torch.arange(3), copy=True),
            torch.tensor(torch.arange(3), device="cpu"),
        ):
            rows.sum().item()  # ... read with no wait
            rows.to(DEVICE)  # ... and uploaded as it is on a GPU

    assert counted(step) == {"to_device": 4}


def test_a_default_device_moves_a_host_tensor_built_outside_it() -> None:
    """`with torch.device(device)`: torch's handler gives `as_tensor` the device, so a host tensor built before is
    uploaded; one built inside is device memory already (on a CPU run, the default device is the one a GPU run
    sets there)."""

    def step() -> None:
        rows = torch.ones(3)
        with torch.device(DEVICE):
            torch.as_tensor(rows)
            torch.as_tensor(torch.zeros(2))

    assert counted(step) == {"tensor_to_device": 1}


def test_the_move_is_at_the_loops_line() -> None:
    with SyncCounter() as counter, hot_path("region"):
        torch.as_tensor(torch.ones(2), device=DEVICE)
    [event] = counter.events
    assert event.kind == "tensor_to_device" and event.text == "torch.as_tensor(torch.ones(2), device=DEVICE)"


def test_the_builders_return_what_they_return_unwatched() -> None:
    source = torch.arange(4, dtype=torch.float32)

    def build() -> list[torch.Tensor]:
        return [
            *(torch.as_tensor(source, device=DEVICE), torch.as_tensor(source, dtype=torch.float64)),
            *(torch.as_tensor(source), torch.tensor(source, device=DEVICE), torch.tensor(source)),
            *(torch.asarray(source, device=DEVICE), torch.asarray(source), torch.asarray(source, copy=True)),
        ]

    plain = build()
    watched: list[torch.Tensor] = []
    counted(lambda: watched.extend(build()))
    for before, after in zip(plain, watched, strict=True):
        assert (before.device, before.dtype, before.tolist()) == (after.device, after.dtype, after.tolist())
        assert (before.data_ptr() == source.data_ptr()) == (after.data_ptr() == source.data_ptr())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch's sync detector needs CUDA")
def test_torchs_detector_flags_no_builder_move_tripwire_missed() -> None:
    on_device = torch.ones(3, device=DEVICE)
    with SyncCounter(cuda_cross_check=True) as counter:
        torch.as_tensor(torch.ones(3), device=DEVICE)
        torch.tensor(on_device, device="cpu")
    check = counter.cross_check()
    assert check is not None and check.ok, check and check.format()
    assert counter.counts_by_kind() == {"tensor_to_device": 1, "to_cpu": 1}
