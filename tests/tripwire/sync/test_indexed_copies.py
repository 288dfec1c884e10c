"""`dst[i] = src` copies: torch's C++ makes `dst[i].copy_(src)`, which no Python stand-in sees.

On a GPU, host data assigned into a device tensor (`buffer[step] = torch.as_tensor(reward)`) is an upload that
blocks the host, as `buffer[step].copy_(...)` is, and device data assigned into a host buffer is a download that
waits for the device. tripwire counted neither, on a CPU run or a GPU: a refactor from `torch.as_tensor(reward,
device=device)` (counted, `tensor_to_device`) to the assignment of a host tensor lowered the count while the GPU
kept its wait. They are counted now at the `aten::copy_` the assignment makes (a kernel at the autograd keys, or the
dispatch mode), by `copies.indexed_copy_kind`: on a CPU run, by which tensors were built in host memory. A 0-d host
tensor assigned into a larger view is a fill, nothing copied; a Python `.copy_` is classified by its stand-in alone.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

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


def test_host_data_assigned_into_a_device_tensor_is_a_blocking_upload() -> None:
    buffer = torch.zeros(4, 3, device=DEVICE)

    def rows() -> None:
        buffer[1] = torch.ones(3)  # a row
        buffer[2:4] = torch.ones(2, 3)  # a slice
        buffer[0, 2] = torch.tensor(5.0)  # one element: a 0-d view, copied as the row is

    assert counted(rows) == {"copy_to_device": 3}


def test_a_0d_host_tensor_assigned_into_a_larger_view_is_a_fill_not_a_copy() -> None:
    buffer = torch.zeros(4, 3, device=DEVICE)

    def fills() -> None:
        buffer[1] = torch.tensor(2.0)  # torch fills the row with the value it reads from host memory
        buffer[2:4] = 0.5  # a number: a fill on the device

    assert counted(fills) == {}


def test_an_environments_reset_drawn_on_the_host_and_assigned_is_an_upload() -> None:
    """ElegantRL's `PointChasingVecEnv` resets one environment with `self.p0s[i] = torch.normal(0, 1, size=(2,))`:
    drawn in host memory, then copied into the device buffer, an upload that blocks the host per environment. Its
    `torch.zeros(2)` on the next line was counted and the draw was not (`normal`, like `logspace`, `scalar_tensor`,
    `empty_strided`, `tril_indices` and `triu_indices`, was no host factory to tripwire). `normal` of tensors is
    where they are: of a device mean it is a device draw, of a host one a host draw."""
    buffer = torch.zeros(6, 2, device=DEVICE)
    mean = torch.zeros(2, device=DEVICE)

    def resets() -> None:
        buffer[0] = torch.normal(0.0, 1.0, size=(2,))
        buffer[1] = torch.normal(torch.zeros(2), 1.0)  # a host mean: a host draw
        buffer[2] = torch.normal(mean, 1.0)  # a device mean: a device draw, nothing copied
        buffer[3] = torch.normal(0.0, 1.0, size=(2,), device=DEVICE)
        buffer[4] = torch.scalar_tensor(2.0).expand(2)
        buffer[5] = torch.logspace(0, 1, 2)

    assert counted(resets) == {"copy_to_device": 4}


def test_a_device_tensor_copied_to_the_host_by_an_earlier_statement_is_still_the_devices() -> None:
    """torch-ac steps its environments with `env.step(action.cpu().numpy())` and then stores `self.actions[i] =
    action`: on a GPU a copy between device tensors, no wait. On a CPU run `.cpu()` returns `action` itself, and the
    note that it was copied to the host made every later copy from it an upload (512 false `copy_to_device` in 4
    updates of 4 environments x 128 frames), every number written into it a fill of host memory, and its index
    results host memory. A copy to the host is host memory to a copy only in the statement that makes it (a round
    trip, `buffer[i] = x.cpu()`, uploads on a GPU); a save of it keeps the wider rule (test_saves_and_loads.py)."""
    buffer = torch.zeros(3, 4, device=DEVICE, dtype=torch.int)
    logits = torch.zeros(4, device=DEVICE)

    def step() -> None:
        action = torch.distributions.Categorical(logits=logits, validate_args=False).sample((4,))
        action.cpu().numpy()  # to the environments
        buffer[0] = action  # device to device
        action[0] = 2  # a number into a device element: uploaded first
        action[1:3].sum().item()  # an index of the device tensor: a device read
        buffer[1] = action.cpu()  # a round trip: down, then up

    assert counted(step) == {"cpu": 2, "copy_to_device": 2, "item": 1}


def test_device_data_assigned_into_a_device_tensor_is_not_counted() -> None:
    buffer = torch.zeros(4, 3, device=DEVICE)
    values = torch.randn(3, device=DEVICE)

    def on_device() -> None:
        buffer[1] = values * 2
        buffer[2] = buffer[3]

    assert counted(on_device) == {}


def test_device_data_assigned_into_a_host_buffer_is_a_download() -> None:
    values = torch.randn(3, device=DEVICE)

    def downloads() -> None:
        host = torch.zeros(4, 3)
        host[1] = values * 2  # computed on the device: the host waits for it
        host[2] = torch.ones(3)  # host to host
        host[3] = (values * 3).cpu()  # the copy is `.cpu()`'s, counted there; the assignment copies host memory

    assert counted(downloads) == {"copy_to_cpu": 1, "cpu": 1}


def test_a_python_copy_is_counted_once_by_its_stand_in_and_one_past_it_by_the_kernel() -> None:
    buffer = torch.zeros(3, device=DEVICE)

    def copies() -> None:
        buffer.copy_(torch.ones(3))  # the stand-in's, from the line: not again at its `aten::copy_`
        torch.zeros(3).copy_(torch.ones(3))  # host to host: the stand-in says none, and the kernel agrees
        torch.Tensor.copy_(buffer, torch.ones(3))  # through the class, past the stand-in: the kernel counts it

    assert counted(copies) == {"copy_to_device": 2}


def test_inside_inference_mode_too() -> None:
    buffer = torch.zeros(4, 3, device=DEVICE)

    def rollout() -> None:
        with torch.inference_mode():
            buffer[1] = torch.ones(3)

    assert counted(rollout) == {"copy_to_device": 1}


def test_the_count_is_at_the_assignment_line() -> None:
    buffer = torch.zeros(2, device=DEVICE)
    with SyncCounter() as counter, hot_path("region"):
        buffer[0:2] = torch.ones(2)
    line = test_the_count_is_at_the_assignment_line.__code__.co_firstlineno + 3
    assert [(event.kind, event.site.rsplit(":", 1)[-1]) for event in counter.events] == [("copy_to_device", str(line))]


def test_a_0d_host_value_put_through_tensor_indices_is_uploaded_first() -> None:
    """`buffer[idx] = torch.tensor(0.0)` with a tensor index is an `index_put_`, which moves a 0-d value in host
    memory to the buffer's device before it writes (`value.to(self.device())`); through a boolean mask the same
    value is a fill read on the host; a device value uploads nothing."""
    buffer = torch.zeros(5, device=DEVICE)
    rows = torch.tensor([0, 2], device=DEVICE)

    def puts() -> None:
        buffer[rows] = torch.tensor(1.0)  # the upload
        buffer[buffer > 0] = torch.tensor(2.0)  # a mask and a host value: `masked_fill_`
        buffer[rows] = buffer[1].clone()

    assert counted(puts) == {"to_device": 1}


@pytest.mark.parametrize("inference", [False, True])
def test_a_number_into_one_device_element_or_through_tensor_indices_is_a_blocking_upload(inference: bool) -> None:
    """torch makes a Python number a 0-d tensor in host memory when the target is on an accelerator
    (`valueToTensor`), then copies it into a one-element view (`memcpy_and_sync`), or moves it to the device first
    through tensor indices (`index_put_`'s `value.to(self.device())`); `lr.copy_(lrnow)` copies a wrapped number the
    same way. Each waits for the stream on a GPU (pytorch/pytorch#186482, #186486), and a CPU run counts them where
    the target is not host memory. Into a larger view a number is a fill, through a mask a `masked_fill_`: no wait."""
    buffer = torch.zeros(5, device=DEVICE)
    rows = torch.tensor([0, 2], device=DEVICE)
    lr = torch.tensor(3e-4, device=DEVICE)

    def numbers() -> None:
        with torch.inference_mode(inference):
            buffer[1] = 2.5  # one element
            buffer[rows] = 0  # through tensor indices: the upload before the put
            lr.copy_(1e-4)  # LeanRL's learning-rate anneal into a capturable optimizer
            torch.Tensor.copy_(lr, 2e-4)  # past the stand-in
            buffer[1:3] = 0.5  # a fill
            buffer[buffer > 1] = 1.0  # `masked_fill_`
            lr.copy_(5e-5, non_blocking=True)  # a few staged bytes: nothing waits

    assert counted(numbers) == {"copy_to_device": 3, "to_device": 1}


@pytest.mark.parametrize("inference", [False, True])
def test_the_loops_own_values_are_not_taken_for_numbers(inference: bool) -> None:
    """A number is told from a tensor the loop assigns by what holds it (only torch's call): a 0-d device value the
    loop holds, a temporary it computes, or a one-element view, lands on the device without an upload; numbers into
    host memory stay there."""
    buffer = torch.zeros(5, device=DEVICE)
    rows = torch.tensor([0, 2], device=DEVICE)
    value = torch.tensor(0.5, device=DEVICE)
    total = torch.zeros((), device=DEVICE)
    held = [total, total, total]  # `total` has more references than `value`, as a number's tensor than its view

    def values() -> None:
        with torch.inference_mode(inference):
            host = torch.zeros(3)
            held[0][...] = value  # the tensor itself, not a view: a 0-d device tensor into a 0-d device tensor
            buffer[1] = value
            buffer[2] = value * 2
            buffer[3] = buffer[0:1]  # a one-element view, which torch views again as 0-d
            buffer[rows] = value
            buffer[rows] = value.sum()
            host[0] = 1.5
            host[torch.tensor([1, 2])] = 0.5
            host.copy_(2.0)

    assert counted(values) == {}


def test_an_index_put_that_uploads_its_value_and_its_indices_waits_twice() -> None:
    """`index_put_` moves a 0-d value in host memory to the target's device (`value.to(self.device())`), then each
    index held elsewhere (`make_info`): two blocking copies on a GPU, where tripwire counted the first it found. A
    list or NumPy index is built on the device before the op (one upload) and a number's value is made in host
    memory (the second); a device value, or a mask torch fills through, adds none."""
    import numpy as np

    buffer = torch.zeros(5, device=DEVICE)

    def puts() -> None:
        buffer[[0, 2]] = 0.5  # two
        buffer[np.array([1, 3])] = 1.5  # two
        buffer[[1, 3]] = buffer[4].clone()  # a device value: the index alone
        buffer[[True, False, True, False, False]] = 2.5  # a mask uploaded, then filled: one

    assert counted(puts) == {"to_device": 6}


def test_tensors_built_inside_inference_mode_are_told_by_their_storage() -> None:
    """legged_gym's environments step inside rsl_rl's `torch.inference_mode` rollout, so their state is rebuilt there
    (`self.vel = 0.9 * self.vel + ...`) and reset by index (`self.vel[env_ids] = 0.0`): a number through tensor
    indices into a device tensor, an upload on a GPU. Such tensors are inference tensors, whose views keep no
    `_base`, and a CPU run counted nothing into them; it tells where one is by the storage it shares now: host
    memory built there (and its views) takes numbers without a wait, device memory waits."""
    ids = torch.tensor([0, 2], device=DEVICE)

    def rollout() -> None:
        with torch.inference_mode():
            vel = torch.zeros(5, 2, device=DEVICE)
            vel = 0.9 * vel + 1.0  # computed inside inference mode: an inference tensor on the device
            vel[ids] = 0.0  # through tensor indices: uploaded before the put
            vel[1, 0] = 2.5  # one element of it: copied in with a stream sync
            vel[3][ids[:1]] = 1.0  # a row of it (a view with no `_base`), through tensor indices
            _ = vel[[1, 3]]  # a list index: built on the device, a blocking upload
            lr = torch.zeros((), device=DEVICE) + 1.0
            lr.copy_(1e-4)  # a number copied into a 0-d device tensor
            host = torch.zeros(5, 2)  # host memory, built inside inference mode
            host[torch.tensor([1, 3])] = 0.5  # into host memory: made there, nothing waits
            host[1, 1] = 2.5
            host[2][torch.tensor([0])] = 1.5  # a view of host memory
            _ = host[[0, 4]]

    assert counted(rollout) == {"to_device": 3, "copy_to_device": 2}


BEFORE = """
import torch

def step(buffer, t, reward):
    buffer[t] = torch.as_tensor(reward, device=buffer.device)
"""

AFTER = """
import torch

def step(buffer, t, reward):
    buffer[t] = torch.as_tensor(reward)
"""


def run(module: ModuleType) -> SyncCounter:
    buffer = torch.zeros(3, 2, device=DEVICE)
    with SyncCounter() as counter, hot_path("rollout"):
        for t in range(3):
            module.step(buffer, t, [1.0, 2.0])
    return counter


def test_a_refactor_that_moves_the_upload_into_the_assignment_keeps_its_count(tmp_path: Path) -> None:
    """`torch.as_tensor(reward, device=...)` uploads on its line (`tensor_to_device`); assigning the host tensor
    uploads in the assignment. Same waits on a GPU, so the budget recorded from the first still holds the second to
    three uploads a rollout, and a fourth, added, is caught."""
    GoldenStore(tmp_path / "baselines", update=True).check_sync_budget("s", run(load(tmp_path, BEFORE)), {})
    after = run(load(tmp_path, AFTER))
    assert after.counts_by_kind("rollout") == {"copy_to_device": 3}
    extra = AFTER + "    buffer[0] = torch.as_tensor(reward)\n"
    with pytest.raises(SyncBudgetExceeded) as failure:
        GoldenStore(tmp_path / "baselines").check_sync_budget("s", run(load(tmp_path, extra)), {})
    assert "6 syncs, budget 3" in str(failure.value), failure.value


@pytest.mark.parametrize("inference", [False, True])
def test_a_graphs_copy_between_0d_device_tensors_is_not_taken_for_a_number(inference: bool) -> None:
    """A compiled graph (aot_eager) updates a BatchNorm's step count with `aten.copy_(num_batches_tracked, add)`:
    two 0-d tensors, the destination held long (more references than the fresh source, as a number's tensor has
    fewer than its destination), both on the device. Only an assignment's copy is a number's."""
    norm = torch.nn.BatchNorm1d(3).to(DEVICE)
    steps = norm.num_batches_tracked
    assert steps is not None

    def graph_epilogue() -> None:
        with torch.inference_mode(inference):
            add = torch.ops.aten.add.Tensor(steps, 1)
            torch.ops.aten.copy_.default(steps, add)

    assert counted(graph_epilogue) == {}
    assert int(steps) == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch's sync detector needs CUDA")
def test_torchs_detector_flags_no_assignment_tripwire_missed() -> None:
    buffer = torch.zeros(4, 3, device=DEVICE)
    rows = torch.tensor([0, 2], device=DEVICE)
    lr = torch.tensor(3e-4, device=DEVICE)
    with SyncCounter(cuda_cross_check=True) as counter:
        buffer[1] = torch.ones(3)
        buffer[0, 2] = torch.tensor(5.0)
        host = torch.zeros(4, 3)
        host[1] = buffer[2] * 2
        buffer[0, 1] = 2.5  # a number into one element
        buffer[rows] = 0.0  # a number through tensor indices
        buffer[[1, 3]] = 0.5  # a number through a list: its value's upload, then its index's
        lr.copy_(1e-4)
        buffer[3] = torch.normal(0.0, 1.0, size=(3,))  # drawn on the host (ElegantRL's reset)
        action = buffer[0] * 2
        action.cpu().numpy()
        buffer[2] = action  # after its copy to the host, on another line: device to device (torch-ac)
        returns = buffer * 1
        returns = returns.cpu()  # stored back: host memory, whose reads wait for nothing (ElegantRL's evaluator)
        returns[1].sum().item()
    check = counter.cross_check()
    assert check is not None and check.ok, check and check.format()
    assert counter.counts_by_kind() == {"copy_to_device": 5, "copy_to_cpu": 1, "to_device": 3, "cpu": 2}


def test_a_number_assigned_into_one_element_of_a_host_tensor_is_not_a_download() -> None:
    """`losses[k] = loss.item()` (nanoGPT's evaluation): torch makes a 0-d tensor of the number where `losses` is and
    copies it into the element, host memory into host memory on a GPU. The `.item()` is the wait. Assigning the
    0-d tensor itself (`losses[k] = loss`) is the download, the same line's wait moved into the assignment."""
    loss = torch.randn((), device=DEVICE) * 2

    def numbers() -> None:
        losses = torch.zeros(3)
        losses[0] = loss.item()
        losses[1] = 2.5
        losses[2] = loss

    assert counted(numbers) == {"item": 1, "copy_to_cpu": 1}


@pytest.mark.parametrize("inference", [False, True])
def test_a_number_copied_into_a_tensor_runs_as_without_tripwire(inference: bool) -> None:
    """`t.copy_(2.5)` (LeanRL's `optimizer.param_groups[0]["lr"].copy_(lrnow)`): torch hands a Python kernel the
    number for `src`, and the op's own kernel refused it, so the loop failed at tripwire's kernel. Each number lands
    with the bits it lands with unwatched, in every dtype, and each copy into a device tensor counts as the upload it
    is on a GPU (one made inside inference mode too: an inference tensor, whose place a CPU run tells by its
    storage)."""
    numbers: list[bool | int | float | complex] = [True, 7, -(2**40) - 3, 0.1, 1e-30, 3.0e38, float("nan"), 1 + 2j]
    dtypes = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64, torch.bool]

    def fill(into: list[torch.Tensor]) -> None:
        with torch.inference_mode(inference):
            for dtype in dtypes:
                for number in numbers:
                    if isinstance(number, complex):
                        continue
                    target = torch.zeros(3, dtype=dtype, device=DEVICE)
                    target.copy_(number)
                    into.append(target)
            target = torch.zeros(2, dtype=torch.complex64, device=DEVICE)
            torch.Tensor.copy_(target, 1 + 2j)  # past the stand-in: the kernel alone
            into.append(target)

    plain: list[torch.Tensor] = []
    fill(plain)
    watched: list[torch.Tensor] = []
    copies = len(dtypes) * sum(not isinstance(number, complex) for number in numbers) + 1
    assert counted(lambda: fill(watched)) == {"copy_to_device": copies}
    assert len(watched) == len(plain) == copies
    for got, expected in zip(watched, plain, strict=True):
        assert got.dtype == expected.dtype and torch.equal(got.view(torch.uint8), expected.view(torch.uint8))


def test_what_was_read_of_the_loops_code_is_dropped_with_the_recording() -> None:
    """Which instructions are subscripts is kept per code object of the loop, holding it: dropped when the last counter
    stops, as the caller lookup's caches are."""
    from tripwire.sync import state

    buffer = torch.zeros(3, device=DEVICE)
    with SyncCounter(), hot_path("region"):
        buffer[0] = 2.5
        assert state._STATE.subscripts
    assert not state._STATE.subscripts
