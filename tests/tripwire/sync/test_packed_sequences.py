"""A recurrent policy over packed sequences: what a GPU run waits for, counted on a CPU run at the same lines.

`pack_padded_sequence(x, lengths, enforce_sorted=False)` sorts the lengths in host memory and uploads the order to
the input's device (`sorted_indices.to(input.device)`, a blocking copy of pageable memory); `pad_packed_sequence`
reads the inverse order back (`unsorted_indices.cpu()`). In between, the LSTM reads `int(batch_sizes[0])` of a
`PackedSequence`'s batch sizes, which torch keeps in host memory on every device, as it does the lengths
`pad_packed_sequence` returns: no wait. A CPU run counted neither copy (torch's own `.to(input.device)` moves nothing
there) and counted each host read; it now counts the upload and the download, and no read of batch sizes or
lengths.
"""

from __future__ import annotations

import inspect

import pytest
import torch
from sync_counts import counted
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from tripwire.sync import hot_path
from tripwire.sync.counter import SyncCounter

pytestmark = pytest.mark.usefixtures("counting", "explicit_hooks")  # every way of watching

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
LENGTHS = [2, 5, 4]


def _batch() -> tuple[torch.nn.LSTM, torch.Tensor]:
    """An LSTM and a padded batch on the device (built before the counter: the run's device memory)."""
    torch.manual_seed(0)
    return torch.nn.LSTM(3, 4, batch_first=True).to(DEVICE), torch.randn(3, 5, 3).to(DEVICE)


def _recurrent(lstm: torch.nn.LSTM, x: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
    packed = pack_padded_sequence(x, LENGTHS, batch_first=True, enforce_sorted=False)
    out, _ = lstm(packed)
    padded, lengths = pad_packed_sequence(out, batch_first=True)
    return padded, lengths.tolist()  # the lengths: host memory


def test_a_packed_batch_counts_the_order_uploaded_and_read_back() -> None:
    lstm, x = _batch()
    assert counted(lambda: _recurrent(lstm, x)) == {"to_device": 1, "cpu": 1}


def test_a_sorted_batch_moves_no_order() -> None:
    lstm, x = _batch()

    def step() -> None:
        out, _ = lstm(pack_padded_sequence(x, [5, 4, 2], batch_first=True))
        _, lengths = pad_packed_sequence(out, batch_first=True)
        int(lengths.max())

    assert counted(step) == {}


def test_the_upload_is_named_at_the_loops_line() -> None:
    _, x = _batch()
    with SyncCounter() as counter, hot_path("region"):
        line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        pack_padded_sequence(x, LENGTHS, batch_first=True, enforce_sorted=False)
    assert [(event.kind, event.line, event.via) for event in counter.events] == [
        ("to_device", line, "torch/nn/utils/rnn.py:pack_padded_sequence")
    ]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a host batch is a CPU run's own case")
def test_a_host_batch_packed_moves_nothing() -> None:
    """The input built in host memory while the counter runs: its order stays with it, on a GPU run too."""

    def step() -> None:
        x = torch.randn(3, 5, 3)
        pack_padded_sequence(x, LENGTHS, batch_first=True, enforce_sorted=False)

    assert counted(step) == {}


def test_the_sequences_are_torchs_own_again_and_compute_the_same() -> None:
    own = (vars(PackedSequence)["__new__"].__func__.__code__, pad_packed_sequence.__code__)
    lstm, x = _batch()
    plain = _recurrent(lstm, x)
    with SyncCounter(), hot_path("region"):
        recorded = _recurrent(lstm, x)
    assert torch.equal(plain[0], recorded[0]) and plain[1] == recorded[1]
    assert (vars(PackedSequence)["__new__"].__func__.__code__, pad_packed_sequence.__code__) == own


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch's sync detector needs CUDA")
def test_torchs_detector_flags_the_order_copies_and_no_host_read() -> None:
    lstm, x = _batch()
    with SyncCounter(cuda_cross_check=True) as counter:
        _recurrent(lstm, x)
    check = counter.cross_check()
    # the upload waits without torch's detector flagging it (pageable memory); no read of host memory is counted
    assert check is not None and check.ok and set(check.unflagged) <= {"to_device"}, check and check.format()
    assert counter.counts_by_kind() == {"to_device": 1, "cpu": 1}
