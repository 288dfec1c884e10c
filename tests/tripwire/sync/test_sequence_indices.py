"""A device tensor indexed by a Python list or a NumPy array: torch uploads the index inside the subscript.

`b_obs[mb_inds]` (CleanRL's minibatches, `mb_inds` a NumPy array) builds its index with `b_obs`'s options, on its
device, through a blocking `.to()` before `aten::index` runs (torch's `IndicesFromTuple`, `internal_new_from_data`):
a wait on a GPU. Neither run counted it: on a GPU the op's index is a device tensor by then, and on a CPU run the
index is host memory nobody marked. Both count it now (`to_device`, at the line), told by what holds the index
(torch's list of indices alone) at a subscript in the user's code.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch
from loop_modules import load
from sync_counts import counted

from tripwire.common.errors import SyncBudgetExceeded
from tripwire.gates.goldens import GoldenStore
from tripwire.sync import hot_path
from tripwire.sync.counter import SyncCounter

pytestmark = pytest.mark.usefixtures("counting", "explicit_hooks")  # every way of watching

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.parametrize("inference", [False, True])
def test_a_list_or_numpy_index_into_a_device_tensor_is_uploaded(inference: bool) -> None:
    buffer = torch.zeros(16, 3, device=DEVICE)
    minibatch = np.random.default_rng(0).permutation(16)[:4]

    def reads_and_writes() -> None:
        with torch.inference_mode(inference):
            buffer[minibatch]  # a NumPy index
            buffer[[0, 2]]  # a list
            buffer[:, [1, 2]]  # in a later dimension
            buffer[minibatch] = buffer[0].clone()  # an assignment uploads its index too

    assert counted(reads_and_writes) == {"to_device": 4}


@pytest.mark.parametrize("inference", [False, True])
def test_tensor_indices_the_loop_holds_and_host_targets_upload_nothing(inference: bool) -> None:
    buffer = torch.zeros(16, 3, device=DEVICE)
    rows = torch.arange(4, device=DEVICE)

    def no_upload() -> None:
        with torch.inference_mode(inference):
            buffer[rows]  # a device index the loop holds
            buffer[rows + 1]  # one it computes
            host = torch.zeros(8)
            host[[1, 2]]  # a host tensor indexed: its index is built in host memory
            host[np.arange(3)] = 1.0

    assert counted(no_upload) == {}


def test_a_backwards_saved_indices_are_not_an_upload() -> None:
    """The backward of `x[mb_inds]` puts its gradient through the indices autograd saved, held by torch alone as a
    fresh index is; the line is a call, not a subscript: only the forward's upload counts."""
    weights = torch.randn(16, 3, device=DEVICE, requires_grad=True)
    minibatch = np.arange(4)

    def step() -> None:
        loss = (weights[minibatch] * 2).sum()
        loss.backward()

    assert counted(step) == {"to_device": 1}


BEFORE = """
import torch

def update(b_obs, mb_inds):
    return b_obs[torch.as_tensor(mb_inds, device=b_obs.device)].sum()
"""

AFTER = """
def update(b_obs, mb_inds):
    return b_obs[mb_inds].sum()
"""


def run(module: ModuleType) -> SyncCounter:
    b_obs = torch.randn(32, 4, device=DEVICE)
    with SyncCounter() as counter, hot_path("update"):
        for start in range(0, 32, 8):
            module.update(b_obs, np.arange(start, start + 8))
    return counter


def test_a_refactor_that_moves_the_upload_into_the_subscript_keeps_its_count(tmp_path: Path) -> None:
    """`b_obs[torch.as_tensor(mb_inds, device=...)]` uploads on its line (`tensor_to_device`); `b_obs[mb_inds]` uploads
    inside the subscript. Same waits on a GPU: the budget recorded from the first holds the second to four uploads,
    and a fifth, added, is caught."""
    GoldenStore(tmp_path / "baselines", update=True).check_sync_budget("s", run(load(tmp_path, BEFORE)), {})
    after = run(load(tmp_path, AFTER))
    assert after.counts_by_kind("update") == {"to_device": 4}
    extra = AFTER.replace("return b_obs[mb_inds].sum()", "return b_obs[mb_inds].sum() + b_obs[list(mb_inds)].sum()")
    with pytest.raises(SyncBudgetExceeded) as failure:
        GoldenStore(tmp_path / "baselines").check_sync_budget("s", run(load(tmp_path, extra)), {})
    assert "8 syncs, budget 4" in str(failure.value), failure.value


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch's sync detector needs CUDA")
def test_torchs_detector_flags_no_index_upload_tripwire_missed() -> None:
    buffer = torch.zeros(16, 3, device=DEVICE)
    with SyncCounter(cuda_cross_check=True) as counter:
        buffer[np.arange(4)]
        buffer[[0, 2]] = buffer[1].clone()
    check = counter.cross_check()
    assert check is not None and check.ok, check and check.format()
    assert counter.counts_by_kind() == {"to_device": 2}
