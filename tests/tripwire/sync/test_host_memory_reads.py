"""A read of a tensor in host memory waits for nothing, on a GPU run too: it is not counted.

A GPU loop keeps some tensors in host memory: indices drawn without `device=` (`for i in torch.randint(n, (b,))`),
an optimizer's step counters (torch keeps them there unless the optimizer is `capturable` or `fused`), buffers
built with `device="cpu"`. Reading one (`.item()`, `int(t)`, `t.tolist()`, an index) waits for no device. The
counter counted each such read, on a CPU run and on a GPU alike: 752 of nanoGPT's 976 syncs and 3,360 of SB3 SAC's
6,048 were reads that a GPU run makes without waiting. It now follows which tensors were built in host memory
(`tripwire.sync.copies.host_born`), the same tensors on a CPU run and on a GPU, and does not count a read of one,
nor a data-dependent op (`nonzero`, `unique`) whose inputs are all such tensors. Every test below also shows the
same read of a tensor built on the run's device counted: the rule moves no device read out of the count.
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from loop_modules import load
from sync_counts import counted, cpu_run

from tripwire.sync import explicit, hot_path, state
from tripwire.sync.budget import SyncBudget, check_budget
from tripwire.sync.counter import SyncCounter

pytestmark = pytest.mark.usefixtures("explicit_hooks")  # stand-ins and the function mode alike

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def reads(tensor: torch.Tensor) -> None:
    """Every read the counter watches, once each."""
    tensor[0].item()
    tensor.tolist()
    tensor.cpu()
    np.asarray(tensor.cpu())
    bool(tensor[0])
    float(tensor[0])
    int(tensor[0])
    [1, 2, 3][tensor[0].long()]
    format(tensor[0], ".1f")
    assert 7.0 not in tensor


READS = {"item": 1, "tolist": 1, "cpu": 2, "bool": 1, "float": 1, "int": 1, "index": 1, "format": 1, "contains": 1}


@pytest.mark.parametrize(
    "build",
    [
        lambda: torch.zeros(3),
        lambda: torch.tensor([0.0, 1.0, 2.0]),
        lambda: torch.from_numpy(np.zeros(3)),
        lambda: torch.arange(3.0).float().view(3).contiguous(),  # a host tensor's place-keeping results
        lambda: torch.tensor(np.zeros(3)).to(torch.float32),  # a dtype's `.to`
        lambda: torch.zeros(3, device="cpu"),  # the host, by name: there on a GPU run too
        lambda: torch.zeros(3, device=torch.device("cpu")),
        lambda: torch.cat([torch.zeros(1), torch.ones(2)]),  # of host tensors alone
    ],
    ids=["zeros", "tensor", "from_numpy", "kept-place", "to(dtype)", "device='cpu'", "device(cpu)", "cat"],
)
def test_a_read_of_a_tensor_built_in_host_memory_is_not_counted(
    build: Callable[[], torch.Tensor], request: pytest.FixtureRequest
) -> None:
    if "function mode-from_numpy" in request.node.name:  # torch hands a function mode no `from_numpy` call
        counts = counted(lambda: reads(build()))
        assert {kind: counts[kind] for kind in READS} == READS, counts
        return
    assert counted(lambda: reads(build())) == {}


@pytest.mark.parametrize(
    "build",
    [
        lambda: torch.zeros(3, device=DEVICE),  # the run's device: on a GPU run, device memory
        lambda: torch.zeros(3).to(DEVICE),  # moved there (an upload, counted as one)
        lambda: torch.zeros(3, dtype=torch.float64).to(DEVICE, torch.float32),  # moved there and cast
        lambda: torch.as_tensor(torch.zeros(3, device=DEVICE)),  # the device tensor itself
        lambda: torch.tensor([0.0, 1.0, 2.0], device=DEVICE),  # an upload
        lambda: torch.zeros(3) + torch.zeros(3, device=DEVICE),  # an op's result: not followed, counted
    ],
    ids=["device=DEVICE", "moved", "moved and cast", "as_tensor(device)", "tensor(device=)", "an op's result"],
)
def test_the_same_reads_of_a_device_tensor_are_each_counted(build: Callable[[], torch.Tensor]) -> None:
    counts = counted(lambda: reads(build()))
    assert {kind: counts[kind] for kind in READS} == READS, counts


def test_indices_drawn_on_the_host_and_read_one_at_a_time_are_not_counted() -> None:
    """nanoGPT's `get_batch`: `ix = torch.randint(len(data) - block, (batch,))`, then `data[i : i + block]` and
    `data[i + 1 : i + 1 + block]` for each `i in ix`, index reads of a row of host memory and of an operator's results
    of it: none is counted (564 of nanoGPT's 623 syncs were `i + block` and its kin, read on a GPU run without a
    wait). Over indices drawn on the device, every read of each row counts."""
    data = list(range(100))

    def batch(device: torch.device | None) -> None:
        ix = torch.randint(90, (8,)) if device is None else torch.randint(90, (8,), device=device)
        [data[i : i + 4] for i in ix]
        [data[i + 1 : 1 + i + 4] for i in ix]

    assert counted(lambda: batch(None)) == {}
    assert counted(lambda: batch(DEVICE)) == {"index": 32}


def operators(a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
    """Every operator the counter follows, of `a` and `b` (and of numbers), as a loop writes them."""
    ints = (a * 4).long()
    return [
        *(a + b, a - b, a * b, a / b, a // b, a % b, a**b, -a, +a, abs(a), a < b, a <= b, a > b, a >= b, a == b),
        *(a != b, 1 + a, 1 - a, 2 * a, 1 / (a + 1), 7 // (a + 1), 7 % (a + 1), 2**a, ints & 1, 1 & ints, ints | 2),
        *(2 | ints, ints ^ 3, 3 ^ ints, ~ints, ints << 1, 1 << ints, ints >> 1, 64 >> ints),
    ]


OPERATORS = 34


def test_an_operators_result_of_host_tensors_alone_is_host_memory() -> None:
    """`i + block`, `(step + 1) % n`, `i < n`: an operator's result is where its tensors are. Of host tensors (and
    numbers) alone it is host memory, there on a GPU run too, and its reads are not counted; with a tensor of the
    run's device among them (a 0-d host tensor and a device tensor give a device tensor) they are, each read once."""

    def read(a: Callable[[], torch.Tensor], b: Callable[[], torch.Tensor]) -> None:
        for result in operators(a(), b()):
            result[0].item()

    def host() -> torch.Tensor:
        return torch.tensor([0.5, 1.5])

    def other() -> torch.Tensor:
        return torch.tensor([2.0, 3.0])

    def device() -> torch.Tensor:
        return torch.tensor([2.0, 3.0], device=DEVICE)

    assert len(operators(host(), other())) == OPERATORS
    assert counted(lambda: read(host, other)) == {}
    uploads = {"tensor_to_device": 1}
    assert counted(lambda: read(lambda: device() - 1.5, other)) == {"item": OPERATORS, **uploads}
    mixed = counted(lambda: read(host, device))
    assert mixed == {"item": 13, **uploads}, mixed  # the 13 operators of `a` and `b` both: the rest are of `a` alone
    assert counted(lambda: [(torch.tensor(2.0) * device())[0].item(), (device() * torch.tensor(2.0))[0].item()]) == {
        "item": 2,
        "tensor_to_device": 2,
    }


def test_a_helpers_device_parameter_is_read_where_it_was_passed() -> None:
    def build(device: torch.device) -> torch.Tensor:
        return torch.zeros(3, device=device)

    cpu_device = torch.device("cpu")
    assert counted(lambda: build(torch.device("cpu"))[0].item()) == {}
    assert counted(lambda: torch.zeros(3, device=cpu_device)[0].item()) == {}  # named for the host
    assert counted(lambda: build(DEVICE)[0].item()) == {"item": 1}


@pytest.fixture
def default_device_restored() -> Iterator[None]:
    yield
    torch.set_default_device(None)


def test_a_factory_under_a_default_device_builds_there(default_device_restored: None) -> None:
    """`with torch.device(device)` and `torch.set_default_device(device)` send a factory without `device=` to the
    device on a GPU run: its result is not host memory, whatever it is on this run."""

    def under_context() -> None:
        with torch.device(DEVICE):
            torch.zeros(3)[0].item()

    def under_default() -> None:
        torch.set_default_device(DEVICE)
        torch.zeros(3)[0].item()

    assert counted(under_context) == {"item": 1}
    assert counted(under_default) == {"item": 1}


def test_host_data_built_under_a_default_device_is_an_upload(default_device_restored: None) -> None:
    """`torch.tensor(data)` without `device=` under a default device copies host data there while the host waits:
    BatchNorm's `torch.tensor(0)` step counter, built in `with torch.device("cuda")`, was 3 syncs of a_baseline that
    torch's detector flagged on the H200 and tripwire missed (2026-12-04). Counted on this run as on a GPU; not
    under `meta`, nor for empty data (nothing is copied: `torch.get_default_device()` builds `torch.tensor([])`)."""

    def batch_norm_under_context() -> None:
        with torch.device(DEVICE):
            torch.nn.BatchNorm2d(4)

    def under_default() -> None:
        torch.set_default_device(DEVICE)
        torch.as_tensor(np.arange(3.0))
        torch.tensor([])
        torch.get_default_device()
        torch.zeros(3)  # a factory: built there, nothing copied

    def under_meta() -> None:
        with torch.device(DEVICE), torch.device("meta"):
            torch.nn.BatchNorm2d(4)

    assert counted(lambda: torch.nn.BatchNorm2d(4)) == {}  # no default device: built in host memory
    assert counted(batch_norm_under_context) == {"tensor_to_device": 1}
    assert counted(under_meta) == {}
    assert counted(under_default) == {"tensor_to_device": 1}


@pytest.mark.parametrize("foreach", [False, True])
def test_adams_step_counters_are_host_memory_read_without_a_wait(foreach: bool) -> None:
    """torch keeps a non-capturable optimizer's step counters in host memory and reads each with `.item()` at every
    step. Built while the counter runs, they are known to be host memory, and not counted. Built before it started
    (an optimizer that stepped before the recording), they are not known to be, and their reads are counted, named
    inside torch: a CPU run cannot tell where a tensor built before it watched lives."""
    param = torch.nn.Parameter(torch.ones(3, device=DEVICE))

    def steps(optimizer: torch.optim.Optimizer) -> None:
        for _ in range(3):
            param.sum().backward()
            optimizer.step()

    assert counted(lambda: steps(torch.optim.Adam([param], foreach=foreach))) == {}
    earlier = torch.optim.Adam([param], foreach=foreach)
    steps(earlier)  # its step counter is built here, outside the counter
    with SyncCounter() as counter, hot_path("step"):
        steps(earlier)
    assert counter.counts_by_kind("step") == {"item": 3 * (2 if foreach else 1)}  # foreach reads each one twice
    assert {event.via for event in counter.events} == {"torch/optim/optimizer.py:_get_value"}


def test_a_data_dependent_op_on_host_tensors_alone_is_not_counted() -> None:
    def ops(device: torch.device | None) -> None:
        values = torch.tensor([0.0, 1.0, 2.0]) if device is None else torch.tensor([0.0, 1.0, 2.0], device=device)
        torch.nonzero(values), torch.unique(values), torch.repeat_interleave(values.long())

    assert counted(lambda: ops(None)) == {}
    expected = {"implicit:nonzero": 1, "implicit:_unique2": 1, "implicit:repeat_interleave": 2}
    assert counted(lambda: ops(DEVICE)) == {"tensor_to_device": 1, **expected}

    def masked() -> None:  # one input on the device is enough: the mask is read there
        torch.zeros(3)[torch.ones(3, device=DEVICE) > 0]

    assert counted(masked) == {"implicit:index(mask)": 1}


def test_a_host_tensor_cast_by_to_is_still_uploaded_when_it_moves() -> None:
    """`torch.tensor(obs).to(torch.float32).to(device)`: the cast stays in host memory, so the move is an upload."""
    assert counted(lambda: torch.tensor(np.zeros(3)).to(torch.float32).to(DEVICE)) == {"to_device": 1}


def test_a_device_held_in_a_string_is_a_device() -> None:
    """`device = "cuda" if torch.cuda.is_available() else "cpu"`: on a CPU run the name holds "cpu", on a GPU run the
    device. A host tensor moved there is an upload and a device tensor from then on; `.to("cpu")` is the host."""
    device = "cuda" if torch.cuda.is_available() else "cpu"

    def move() -> None:
        moved = torch.zeros(3).to(device)
        moved[0].item()
        torch.zeros(3).to("cpu")[0].item()  # the host, spelled: nothing moves, nothing waits

    assert counted(move) == {"to_device": 1, "item": 1}


def test_a_copy_into_host_memory_counts_when_its_source_is_on_the_device() -> None:
    """A buffer built in host memory receiving device data is a device-to-host copy on a GPU run, whatever its name;
    receiving host data it is a copy within host memory."""

    def fill() -> None:
        rows = torch.zeros(3)
        rows.copy_(torch.ones(3, device=DEVICE))
        rows.copy_(torch.ones(3))

    assert counted(fill) == {"copy_to_cpu": 1}


def test_a_move_to_a_tensor_in_host_memory_counts_when_its_source_is_on_the_device() -> None:
    """`x.to(other)` takes `other`'s place and dtype: with `other` built in host memory, device data moved there is a
    device-to-host copy on a GPU run, whatever the names; host data moved there moves nothing."""
    device_data = torch.ones(3, device=DEVICE) * 2

    def move() -> None:
        template = torch.zeros(1)
        device_data.to(template)
        torch.ones(3).to(template)

    assert counted(move) == {"to_cpu": 1}


LOOP = """
import torch


def sample(data, device):
    ix = torch.randint(len(data), (8,)){device}
    return [data[i] for i in ix]
"""


def test_indices_moved_to_the_device_fail_the_budget_at_their_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hazard: a refactor moves the indices to the device. Each read now waits for it; the budget recorded with
    host indices fails, naming the line."""

    def run(device_part: str) -> SyncCounter:
        (tmp_path / "sampler.py").write_text(LOOP.format(device=device_part), encoding="utf-8")
        sys.modules.pop("sampler", None)
        monkeypatch.syspath_prepend(str(tmp_path))
        module = importlib.import_module("sampler")
        with SyncCounter(root=tmp_path) as counter, hot_path("sample"):
            module.sample(list(range(64)), DEVICE)
        return counter

    clean = run("")
    budget = SyncBudget(regions=clean.counts_by_region(), sites=clean.site_keys_by_region())
    assert clean.total == 0 and check_budget(run(""), budget).ok
    report = check_budget(run(".to(device)"), budget)
    assert not report.ok
    text = report.format()
    assert "NEW sampler.py:6 in sample  ×1  [to_device×1]" in text, text
    assert "NEW sampler.py:7 in sample  ×8  [index×8]" in text, text


def test_a_host_copy_of_an_inference_tensor_is_counted_without_a_fault() -> None:
    """An inference tensor keeps no version counter, and reading it raises: tripwire's note of a counted copy to the
    host read it, so `values_tensor.cpu().tolist()` under `torch.inference_mode` (the original esper-lite's rollout,
    recorded with examples/esper-lite/cli_training_loop.py) failed the loop inside tripwire. Each copy counts once, as
    outside inference mode, and a save of the copy writes host memory on a GPU run too."""
    with torch.inference_mode():
        values = torch.arange(4.0, device=DEVICE) * 2

    with SyncCounter() as counter, hot_path("rollout"), torch.inference_mode():
        values.cpu().tolist()
        moved = values.to("cpu")
        host = torch.zeros(4)
        host.copy_(values)
        torch.save({"moved": moved}, io.BytesIO())
    assert counter.counts_by_kind("rollout") == {"cpu": 1, "to_cpu": 1, "copy_to_cpu": 1}


def test_a_read_of_the_host_copy_just_made_is_not_a_second_sync() -> None:
    """`x.cpu().tolist()` waits once on a GPU, at `.cpu()`; the H200 flagged one sync on each such line where tripwire
    counted two (our trainer's `packed.cpu().tolist()`, 5 in a_baseline). On a CPU run `.cpu()` returns the tensor
    itself, so the copy cannot be marked: a read called straight on the copy's result, nothing called between (read
    from the bytecode), is not counted, here and on a GPU alike. Anything else on the copy's tensor still counts."""
    x = torch.arange(4.0, device=DEVICE)
    step = torch.ones(())

    def chained() -> None:
        x.cpu().tolist()
        x.detach().cpu().numpy()
        float(x[0].cpu())
        np.asarray(x.cpu())
        x.cpu().to("cpu").tolist()
        # host methods of the copy between it and the read: each gives a host tensor, which waits for nothing
        x.cpu().float().tolist()
        x.cpu().detach().numpy()
        x.cpu().view(2, 2).squeeze().T.numpy()
        (x > 1).cpu().sum().item()
        float(x.cpu().mean())
        with warnings.catch_warnings():  # NumPy 2 asks `__array__` twice (with `copy=`, refused, then without)
            warnings.simplefilter("ignore", DeprecationWarning)
            np.array(x.cpu())  # one read

    def not_chained() -> None:
        copy = x.cpu()
        copy.tolist()  # another statement, by the name the copy is kept under: host memory on a GPU too
        x.cpu().add(step).sum().item()  # a tensor from before the counter passed (the device's): counted
        x.cpu().cumsum(0).tolist()  # the copy's own math: host memory, on a CPU run as on a GPU
        x.cpu(), x.tolist()  # the device tensor read again

    assert counted(chained) == {"cpu": 11}
    assert counted(not_chained) == {"cpu": 4, "tolist": 1, "item": 1}


def test_on_an_accelerator_a_copy_to_the_host_is_host_memory_under_any_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU `x.cpu()` is a CPU tensor of its own: its reads wait for nothing, whatever name holds it. The GPU run
    counted them unless chained to the copy (`copy = x.cpu(); copy.tolist()`, ElegantRL's `returns = returns.cpu()`
    and its reads), where the CPU run of the same loop may not. Here the run is taken for an accelerator's; the copy
    is this CPU's tensor itself, which the branch marks as it would a GPU run's distinct copy."""
    x = torch.arange(4.0)  # before the counter: not marked, taken for a device tensor
    monkeypatch.setattr(explicit, "accelerator_in_use", lambda: True)

    def copied() -> None:
        copy = x.cpu()
        copy.tolist()
        copy[1:].sum().item()

    assert counted(copied) == {"cpu": 1}


class _Holder:
    def __init__(self, tensor: torch.Tensor) -> None:
        self.values = tensor


def test_a_host_copy_stored_back_under_its_own_name_is_host_memory(copies: str) -> None:
    """`returns = returns.cpu()` and then reads of `returns`, one element at a time (ElegantRL's evaluator: a
    `torch.where`, a `tolist()` and an `.item()` per environment). On a GPU the reads are of the copy, host memory,
    and wait for nothing; on a CPU run the copy is the device tensor itself, and every read was counted (384 false
    syncs in 4 evaluations of 32 environments). A copy stored back by its statement under the name its receiver was
    read from (a local, an attribute, through a chain of methods and an index) is host memory from then on: its reads
    are not counted and its move to the device is an upload, and so are its views, and the views of its elements when
    it is a view itself. A copy kept under another name is not marked for good (the device tensor may still be read by
    its own name): its reads by that name are not counted (`copies.keep`), the device tensor's by its own are. What is
    left where the copy is the tensor itself (one that requires a gradient, `copies == "itself"`): a device tensor
    still held elsewhere (a caller's name, the base of the view copied) is the copy on a CPU run, so its reads are
    taken for the copy's; a GPU run's cross-check by site (`nox -s gpu`) shows such a read."""
    returns = torch.arange(8.0, device=DEVICE).view(4, 2)
    dones = torch.tensor([0, 1, 0, 1], device=DEVICE)
    other = torch.arange(4.0, device=DEVICE)
    holder = _Holder(torch.arange(3.0, device=DEVICE))

    def rebound() -> None:
        nonlocal returns, dones
        returns = returns.cpu()
        dones = dones.to("cpu")
        for i in range(2):
            ends = torch.where(dones.eq(1))[0] + 1  # a data-dependent op of host memory alone
            for end in ends.tolist():
                returns[:end, i].sum().item()
        holder.values = holder.values[1:].detach().cpu()
        float(holder.values[0])
        holder.values.to(DEVICE)  # host memory back to the device: an upload

    def not_rebound() -> None:
        nonlocal other
        copy = other.cpu()
        copy[0].item()  # kept under another name, read by it: host memory on a GPU
        other[0].item()  # on a CPU run the same tensor, read by the device tensor's own name: a device read on a GPU
        moved = holder.values.to(DEVICE)  # the rebound copy moved: device memory from then on (on CPU, itself)
        moved[0].item()
        kept = other
        other = other.cpu().numpy()  # the name holds an array: the device tensor is still `kept`
        kept[0].item()

    assert counted(rebound) == {"cpu": 2, "to_cpu": 1, "to_device": 1}
    assert counted(not_rebound) == {"cpu": 2, "item": 3}


@pytest.fixture(params=["own", "itself"], ids=["copy of its own", "copy is the tensor"])
def copies(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A CPU run's `.cpu()` gives a tensor of its own where it can (`explicit.host_alias`); where it cannot (a tensor
    that requires a gradient, a parameter, a subclass), it is the device tensor itself, and the rules that read the
    loop's lines (lent, kept, stored back) decide. Each test using this runs both ways, with the same counts."""
    if request.param == "itself":
        monkeypatch.setattr(explicit, "host_alias", lambda tensor: None)
    return str(request.param)


class _SumTree:
    """ElegantRL's prioritized replay tree (`elegantrl/train/replay_buffer.py`, `SumTree.update_ids`), cut down:
    priorities in host memory, written at the leaves it is given and summed up level by level."""

    def __init__(self, leaves: int) -> None:
        self.leaves = leaves
        self.tree = torch.zeros(2 * leaves - 1)  # host memory, on a GPU run too

    def update_ids(self, data_ids: torch.Tensor, prob: torch.Tensor | float = 10.0) -> None:
        l_ids = data_ids + self.leaves - 1
        self.tree[l_ids] = prob
        for _ in range(2):
            p_ids = ((l_ids - 1) // 2).unique()  # data-dependent: a sync of device indices, none of host ones
            l_ids = p_ids * 2 + 1
            self.tree[p_ids] = self.tree[l_ids] + self.tree[l_ids + 1]
            l_ids = p_ids


def _shown(actions: torch.Tensor) -> list[int]:
    """ElegantRL's trainer prints its discrete actions' counts: `action_to_str(_action_ary=actions.data.cpu())`."""
    _values, counts = np.unique(actions, return_counts=True)
    return [int(count) for count in counts] + actions.long().tolist()


def test_a_host_copy_passed_straight_to_a_call_is_host_memory_inside_it(copies: str) -> None:
    """`sum_tree.update_ids(data_ids.cpu())` (ElegantRL's prioritized replay, once per environment's tree) and
    `action_to_str(_action_ary=actions.data.cpu())` (its trainer, every update of a discrete agent): on a GPU the
    callee gets a CPU tensor of its own, and its reads, indices and `unique` wait for nothing. On a CPU run `.cpu()`
    returns the device tensor itself, and each was counted (8 `unique`, an `.item()`, a NumPy read, uploads of the
    priorities). A copy passed straight to a call (an argument, positional or by keyword, the call over one line or
    several: `spelling.passes_on`) is host memory to the code that call runs, and to no one else: the caller still
    holds the device tensor, read or copied again by its own name. What is left: inside the call, a read of the same
    device tensor by another path (an attribute of the caller's) is taken for the copy's; a GPU run's cross-check by
    site (`nox -s gpu`) shows such a read."""
    ids = torch.arange(4, device=DEVICE)
    prob = torch.rand(8, device=DEVICE)
    actions = torch.tensor([0.0, 1.0, 1.0, 2.0], device=DEVICE)

    def passed() -> None:
        trees = [_SumTree(8), _SumTree(8)]
        for tree in trees:  # each pass copies again: 2 `.cpu()`
            tree.update_ids(data_ids=ids.cpu(), prob=10.0)
        for i in range(2):  # 4 `.cpu()`, the priorities among them
            trees[0].update_ids(ids[i : i + 2].cpu(), prob[i : i + 2].cpu())
        trees[1].update_ids(
            ids[2:].cpu(),
            prob=prob[:2].cpu(),
        )  # 2 `.cpu()`, over four lines
        _shown(actions.data.cpu())  # 1 `.cpu()`
        # fmt: off
        _shown(
            actions.data
            .cpu()
        )  # a chain over lines (its instruction starts at `.cpu()`): 1 `.cpu()`
        # fmt: on
        ids.tolist()  # the caller's device tensor, read after the call: a device read on a GPU

    def listed(values: torch.Tensor) -> list[int]:
        return values.long().tolist()

    def not_passed() -> None:
        copy = actions.cpu()  # kept under a name: on a CPU run `actions` itself, which a later line may read
        listed(copy)  # passed by that name: a host read on a GPU (`copies.keep`)
        listed(actions)  # the device tensor passed: a device read

    assert counted(passed) == {"cpu": 10, "tolist": 1}
    assert counted(not_passed) == {"cpu": 1, "tolist": 1}


def test_a_host_copy_kept_under_a_name_is_host_memory_where_that_name_reads_it(copies: str) -> None:
    """The original trainer's validation copies each env's counts to the host once and then reads each copy:
    `accums_cpu = [accum.cpu() for accum in accums]`, then `accums_cpu[i].tolist()` (vectorized.py, "Batch GPU→CPU
    transfer before iterating"). On a GPU only the copies wait. On a CPU run `.cpu()` returns the device tensor
    itself, so every read was counted too: the refactor that moves reads off the device counted worse than the loop it
    replaced. A copy kept under a local name (bound, unpacked, or in a list or dict bound to it, over as many lines as
    the statement takes: `spelling.keeps`) is host memory where its function reads it by that name, or passes it so to
    a function of the user's, and the device tensor where a line reads it by a name it was copied from. A line that
    spells both is read as the device's. What is left: another name bound to the copy (`longs = copy.long()`, the
    tensor itself when it is long already) reads the device tensor on a CPU run, as do reads after the function
    returns it; a GPU run's cross-check by site (`nox -s gpu`) shows them."""
    accums = [torch.arange(3, device=DEVICE) + i for i in range(4)]
    x = torch.arange(4, device=DEVICE)
    y = torch.arange(4.0, device=DEVICE)

    def listed(values: torch.Tensor) -> list[int]:
        return values.long().tolist()

    def validated() -> None:
        # fmt: off
        accums_cpu = [
            accum.cpu() for accum in accums
        ]  # 4 `.cpu()`, the statement over three lines
        # fmt: on
        for i in range(4):
            sum(accums_cpu[i].tolist())  # host memory on a GPU
        [copied.tolist() for copied in accums_cpu]  # over the kept list: host memory on every Python declared
        [accum.tolist() for accum in accums[:1]]  # over the device's: 1 device read
        accums[0].tolist()  # the device tensor by its own name: a device read
        first, second = x.cpu(), y.cpu()  # 2 `.cpu()`
        first.tolist()
        second[0].item()
        pair = (x.cpu(), y.cpu())  # 2 `.cpu()`, `x` kept by a second name
        pair[0].tolist()
        listed(first)  # passed by its name: the callee reads host memory
        listed(x)  # the device tensor passed: a device read
        _ = first.long()  # `x` is long: on a CPU run `x` itself, not marked for good by this
        x.tolist()  # a device read
        y[second.long()].tolist()  # the line names `y` too: read as the device's, as the GPU's indexed result is
        stats = torch.stack([y, y]).cpu()  # 1 `.cpu()`: `torch` names a module, not a tensor it was copied from
        torch.sum(stats).item()

    assert counted(validated) == {"cpu": 9, "tolist": 5}


def test_a_host_copy_stored_back_in_its_slot_is_host_memory(copies: str) -> None:
    """Sample Factory's inference worker moves each policy output to the host in place, `for key, output_value in
    policy_outputs.items(): policy_outputs[key] = output_value.to(device)` (`device = "cpu"`), then reads them as one
    array, `torch.cat(...).numpy()`: 320 reads in 10 updates that wait for nothing on a GPU, counted by a CPU run,
    where the copies are the device tensors. A copy stored back in the slot it was read from (`d[k] = d[k].cpu()`, or
    a loop over `d.items()` or `enumerate(d)` storing `d[k] = v.cpu()`), or a comprehension of copies stored back under
    the name it iterates (`items = [t.cpu() for t in items]`, ElegantRL's worker), is host memory from then on."""
    x = torch.arange(4, device=DEVICE)
    y = torch.arange(4.0, device=DEVICE)

    def stored_back() -> None:
        outputs = {"actions": x.clone(), "values": y.clone()}
        for key, output_value in outputs.items():
            outputs[key] = output_value.to("cpu")  # 2 `to_cpu`
        torch.cat([outputs[name].float() for name in ("actions", "values")]).numpy()
        rows = [y + 1, y + 2]
        for i, row in enumerate(rows):
            rows[i] = row.cpu()  # 2 `.cpu()`
        rows[1][0].item()
        state = {"h": y * 2}
        state["h"] = state["h"].cpu()  # 1 `.cpu()`
        state["h"].tolist()
        items = [y + 3, y + 4]
        items = [t.cpu() for t in items if t.numel()]  # 2 `.cpu()`
        items[1].tolist()

    def not_stored_back() -> None:
        outputs = {"values": y * 3}
        others = {"values": y * 4}
        for key, value in outputs.items():
            others[key] = value.cpu()  # another dict's slot: `outputs` still holds the device tensor
        outputs["values"].tolist()  # a device read
        items = [y + 5]
        copies = [t.cpu() for t in items if t.numel()]  # under another name: kept, not stored back
        copies[0].tolist()  # the copy by its name: host memory
        items[0].tolist()  # a device read

    assert counted(stored_back) == {"to_cpu": 2, "cpu": 5}
    assert counted(not_stored_back) == {"cpu": 2, "tolist": 2}


REBOUND = """
import torch


class Box:
    pass


def step(x, other):
    box = Box()
    box.x = x
    {statement}
    return {read}
"""


@pytest.mark.parametrize("grad", [False, True], ids=["plain", "requires grad"])
@pytest.mark.parametrize(
    ("statement", "read", "marked"),
    [
        ("x = x.cpu()  # a comment after it", "x", True),
        ("x: torch.Tensor = x.cpu()", "x", True),
        ('x = x.to("cpu", non_blocking=False)', "x", True),
        ("box.x = box.x.float().cpu()", "box.x", True),
        ("x = x.cpu().clone()", "x", False),  # the name holds what came after the copy
        ("x = y = x.cpu()", "x", False),  # two names
        ("x, y = x.cpu(), x", "x", False),  # a tuple
        ("box.x = other.cpu()", "box.x", False),  # another tensor's copy under the name
        ("y = x.cpu(); x = y", "x", False),  # two statements on the line
    ],
)
def test_which_statements_store_a_copy_back_under_its_name(
    statement: str, read: str, marked: bool, grad: bool, tmp_path: Path
) -> None:
    """A copy of a tensor that needs no gradient is a tensor of its own on a CPU run too (`explicit.host_alias`):
    host memory whatever holds it, as on a GPU. The `.cpu()` of one that requires a gradient is the tensor itself on
    a CPU run, its autograd history kept: there the stored-back rule reads the one statement on the copy's line
    (`spelling.rebinds`): one target, the same name or attribute as the receiver's chain starts from, and the copy
    itself as the value."""
    loop = load(tmp_path, REBOUND.format(statement=statement, read=read))
    x = torch.arange(3.0, device=DEVICE, requires_grad=grad)
    other = torch.arange(3.0, device=DEVICE, requires_grad=grad)
    with SyncCounter() as counter:
        loop.step(x, other)[0].item()
    host = marked or not grad or DEVICE.type != "cpu"  # on a GPU every copy is a CPU tensor of its own
    assert counter.counts_by_kind().get("item", 0) == (0 if host else 1)


def test_a_functions_bytecode_is_read_once_however_many_copies_and_reads_it_pairs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whether a read follows a copy is read from the bytecode between the two, once per pair of places. A loop
    written at a script's top level is one code object of thousands of instructions, and each of its reads after a
    copy is a pair: CleanRL's `ppo.py` read its module's bytecode five times a recording, 77 ms of a 0.9 s loop.
    Its instructions are now read once per code object and counter, whatever the number of pairs."""
    x = torch.arange(4.0, device=DEVICE)
    listed: list[object] = []
    lister = state.dis.get_instructions
    monkeypatch.setattr(state.dis, "get_instructions", lambda code: listed.append(code) or lister(code))

    def pairs() -> None:
        for _ in range(3):
            x.cpu().tolist()  # a copy and its read
            x.cpu()
            x.tolist()  # a read after the copy above: another pair, not chained
            x.cpu()
            x[0].item()  # and a third

    assert counted(pairs) == {"cpu": 9, "tolist": 3, "item": 3}
    assert listed == [pairs.__code__]


def test_a_read_the_original_refuses_at_its_arguments_is_not_counted() -> None:
    """`np.array(t)` under NumPy 2 calls torch's `__array__(self, dtype=None)` with `copy=`, which raises before it
    reads anything, then calls it again without: one read, counted once (it was counted twice)."""
    x = torch.arange(4.0, device=DEVICE)

    def read() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # NumPy's note that `__array__` takes no `copy=`
            np.array(x.cpu().numpy()), np.array(x.detach().cpu())
            if DEVICE.type == "cpu":
                np.array(x)  # a device tensor has no NumPy array: on a GPU this raises

    assert counted(read) == ({"cpu": 2, "numpy": 1} if DEVICE.type == "cpu" else {"cpu": 2})


TORCH_LIKE = """
def chained(x):
    return x.detach().cpu().numpy()


def apart(x):
    copy = x.cpu()
    return copy.tolist()
"""


def test_a_read_of_the_copy_torchs_own_code_just_made_is_not_a_second_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CleanRL's `writer.add_scalar("losses/td_loss", loss, global_step)` hands tensorboard a device tensor, which
    reads it as `x.detach().cpu().numpy()` in its own frame: a GPU waits once. The chain was read in the loop's frame
    only, where both calls are one call of the loop's, and counted `cpu` and `numpy`. Now it is read in the frame
    that made both calls too; two statements there still count twice, as in the loop's own frame (a copy torch's own
    code makes is given back as torch gives it, never a tensor of tripwire's making: `explicit.host_alias`)."""
    from torch.utils.tensorboard import SummaryWriter

    loss = (torch.arange(4.0, device=DEVICE) * 2).mean()
    writer = SummaryWriter(str(tmp_path / "runs"))
    try:
        assert counted(lambda: writer.add_scalar("losses/td_loss", loss, 0)) == {"cpu": 1}
    finally:
        writer.close()
    folder = tmp_path / "torch_like"  # a module taken for torch's own code, as the counter sees torch's
    folder.mkdir()
    (folder / "helpers.py").write_text(TORCH_LIKE, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("torch_like_helpers", folder / "helpers.py")
    assert spec is not None and spec.loader is not None
    helpers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helpers)
    original = state.skip_prefixes_for
    monkeypatch.setattr(state, "skip_prefixes_for", lambda torch_file: (*original(torch_file), f"{folder}{os.sep}"))
    assert counted(lambda: helpers.chained(loss)) == {"cpu": 1}
    assert counted(lambda: helpers.apart(loss)) == {"cpu": 1, "tolist": 1}


# `x.cpu().view(2, 2).squeeze(dim=0).T.numpy()` between the copy's call and the read's, as each Python compiles it
_BETWEEN = {
    "3.11": "LOAD_METHOD view, LOAD_CONST 2, LOAD_CONST 2, PRECALL 2, CALL 2, LOAD_METHOD squeeze, LOAD_CONST 0, "
    "KW_NAMES dim, PRECALL 1, CALL 1, LOAD_ATTR T, LOAD_METHOD numpy, PRECALL 0",
    "3.12": "LOAD_ATTR view, LOAD_CONST 2, LOAD_CONST 2, CALL 2, LOAD_ATTR squeeze, LOAD_CONST 0, KW_NAMES dim, "
    "CALL 1, LOAD_ATTR T, LOAD_ATTR numpy",
    "3.13": "LOAD_ATTR view, LOAD_CONST 2, LOAD_CONST 2, CALL 2, LOAD_ATTR squeeze, LOAD_CONST 0, LOAD_CONST dim, "
    "CALL_KW 1, LOAD_ATTR T, LOAD_ATTR numpy",
}


@pytest.mark.parametrize("version", sorted(_BETWEEN))
def test_host_methods_between_a_copy_and_its_read_are_read_from_every_pythons_bytecode(version: str) -> None:
    """The rule reads the bytecode between the two calls, which each Python spells its own way (the device image
    runs 3.12, CI 3.11): host methods with constants pass on each; a variable passed, or another method, does not."""
    rows = [tuple(row.split(" ")) for row in _BETWEEN[version].split(", ")]
    between = [(2 * index, name, value) for index, (name, value) in enumerate(rows)]
    assert state._only_lookups_and_host_methods(between)
    with_variable = [(at, "LOAD_FAST", "device") if value == "2" else (at, name, value) for at, name, value in between]
    assert not state._only_lookups_and_host_methods(with_variable)
    renamed = [(at, name, "cumsum" if value == "squeeze" else value) for at, name, value in between]
    assert not state._only_lookups_and_host_methods(renamed)


def test_every_operator_reaches_a_function_mode_as_a_followed_call() -> None:
    """The function mode (the earlier way of watching) is handed `a + b` as `Tensor.add`, `2 / a` as
    `Tensor.__rdiv__`: each operator's call, in the running torch, is one the counter follows in both ways."""
    from torch.overrides import TorchFunctionMode

    from tripwire.sync import explicit

    handed: list[object] = []

    class Probe(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            handed.append(func)
            return func(*args, **(kwargs or {}))

    a, b = torch.tensor([0.5, 1.5]), torch.tensor([2.0, 3.0])
    for index in range(OPERATORS):
        handed.clear()
        with Probe():
            operators(a, b)[index]
        assert handed and handed[-1] in explicit._COMPUTES, (index, handed)


@pytest.mark.parametrize("like", ["zeros_like", "ones_like", "empty_like", "rand_like", "randn_like"])
def test_a_factory_like_a_host_tensor_builds_in_host_memory_unless_its_device_says(like: str) -> None:
    """`torch.zeros_like(x)` builds where `x` is (a default device does not apply), or where its `device=` says:
    like a host tensor it is host memory, its reads not counted and its move to the device an upload; like a device
    tensor, or given the run's device, it is device memory."""

    def build(*args: object, **kwargs: object) -> torch.Tensor:
        return getattr(torch, like)(*args, **kwargs)  # looked up in the call, as `torch.zeros_like(x)` is

    def read_and_move(made: torch.Tensor) -> None:
        made[0].item()
        made.to(DEVICE)

    assert counted(lambda: read_and_move(build(torch.zeros(3)))) == {"to_device": 1}
    assert counted(lambda: read_and_move(torch.zeros_like(torch.zeros(3), device="cpu"))) == {"to_device": 1}
    assert counted(lambda: read_and_move(build(torch.zeros(3), device=DEVICE))) == {"item": 1}
    assert counted(lambda: read_and_move(build(torch.zeros(3, device=DEVICE)))) == {"item": 1}
    assert counted(lambda: read_and_move(torch.full_like(torch.zeros(3), 2.0))) == {"to_device": 1}
    assert counted(lambda: read_and_move(torch.randint_like(torch.zeros(3), 5))) == {"to_device": 1}


def test_a_permutation_drawn_without_a_device_is_host_memory() -> None:
    """`perm = torch.randperm(n)`, then `int(perm[i])` or `perm.to(device)`: the permutation is drawn in host memory,
    on a GPU run too (its reads wait for nothing, its move to the device is an upload); with `device=` it is not."""
    assert counted(lambda: (int(torch.randperm(5)[0]), torch.randperm(5).to(DEVICE))) == {"to_device": 1}
    assert counted(lambda: (int(torch.randperm(5, device=DEVICE)[0]), torch.randperm(5, device=DEVICE).to(DEVICE))) == {
        "int": 1
    }


def test_a_reduction_of_host_bookkeeping_is_host_memory() -> None:
    """`returns.mean().item()`, `if done.any():`, `steps.sum()` over tensors a loop keeps in host memory: a reduction or
    elementwise function of host tensors alone is host memory on a GPU run too, its read waits for nothing (both
    results of one along a dimension, `scores.max(dim=1)`). The same of a device tensor, or with a device tensor passed
    to it (`clamp(min=...)`), is each read once."""

    def bookkeeping(device: torch.device | None) -> None:
        returns = torch.zeros(4) if device is None else torch.zeros(4, device=device)
        done = returns > 1.0
        returns.mean().item(), returns.sum().item(), returns.max().item(), returns.argmax().item()
        bool(done.any()), bool(done.all()), returns.cumsum(0)[0].item(), returns.exp().clamp(0.0, 2.0)[0].item()
        returns.std().item(), returns.round().sign()[0].item(), int(done.count_nonzero())
        best, where = returns.view(2, 2).max(dim=1)  # along a dimension: both results where the input is
        best[0].item(), int(where[1]), returns.min(0).indices.item()

    assert counted(lambda: bookkeeping(None)) == {}
    assert counted(lambda: bookkeeping(DEVICE)) == {"item": 10, "bool": 2, "int": 2}
    bound = torch.tensor(0.5, device=DEVICE)
    assert counted(lambda: torch.zeros(4).clamp(min=bound)[0].item()) == {"item": 1}


def test_a_followed_operator_raises_no_audit_event() -> None:
    """`id()` raises an audit event (`builtins.id`): keyed by it, every operator a counter follows called the loop's
    audit hooks, and in the eager part of a compiled function dynamo compiled the hook's frame, a frame the loop does
    not have (`test_watching_changes_neither_what_dynamo_compiles_nor_where` failed after a test had installed one).
    Run in a child: an audit hook cannot be removed."""
    import subprocess
    import sys

    code = (
        "import sys, torch\n"
        "from tripwire.sync.counter import SyncCounter\n"
        "seen, armed = [], [False]\n"
        "sys.addaudithook(lambda event, args: seen.append(event) if armed[0] else None)\n"
        "with SyncCounter():\n"
        "    x = torch.ones(3)\n"
        "    y = x + 1\n"
        "    armed[0] = True\n"
        "    z = (y + 1, x.sum(), y < 2, x.view(3))\n"
        "    armed[0] = False\n"
        "print(sorted(set(seen)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


class _Bag:
    pass


def _fetched(x: torch.Tensor) -> torch.Tensor:
    return x.cpu()


def test_a_copy_to_the_host_is_host_memory_wherever_the_loop_takes_it(copies: str) -> None:
    """On a GPU a copy to the host is a CPU tensor of its own, whose reads wait for nothing however the loop reaches
    it: iterated, zipped, held in an attribute, returned from a helper, cast under another name, split. On a CPU run
    `.cpu()` returns the tensor itself; the rules that read the loop's lines followed it under a local name only, and
    each read below was counted. A CPU run's copy of a tensor that needs no gradient is now a tensor of its own over
    the same memory (`explicit.host_alias`), marked as host memory as a GPU run's copy is: the counts below are a
    GPU run's. With the copy the tensor itself (`copies == "itself"`) the same loop counts the reads too."""
    x = torch.arange(4, device=DEVICE)
    y = torch.arange(4.0, device=DEVICE)
    holder = _Bag()

    def taken_everywhere() -> None:
        for v in x.cpu():  # 1 `.cpu()`, iterated: each element a view of the copy
            v.item()
        for i, w in enumerate(y.cpu()):  # 1
            float(w) + i
        for a, b in zip(x.cpu(), y.cpu()):  # 2
            a.item() + b.item()
        holder.stats = y.cpu()  # 1, held in an attribute
        holder.stats[0].item()
        returned = _fetched(y)  # 1, returned from a helper
        returned[1].item()
        longs = x.cpu()  # 1
        same = longs.long()  # another name for it (`x` is long already: on a CPU run the same tensor)
        same.tolist()
        first, _second = y.cpu().split(2)  # 1
        first.tolist()
        x.tolist()  # the device tensor by its own name: a device read
        y[0].item()  # and another

    expected = {"cpu": 8, "tolist": 1, "item": 1}
    if copies == "itself" and DEVICE.type == "cpu":
        assert counted(taken_everywhere) == {"cpu": 8, "tolist": 3, "item": 15, "float": 4}
    else:
        assert counted(taken_everywhere) == expected


def test_a_cpu_runs_copy_of_its_own_shares_the_tensors_memory_and_nothing_else_changes() -> None:
    """The copy of its own (`explicit.host_alias`) is `x.detach()`: the same storage and version counter, so a write
    through either is seen by both, as the CPU run without tripwire sees it. Where such a tensor would behave
    otherwise, `.cpu()` gives the tensor itself, as without tripwire: one that requires a gradient (its history and
    `.grad` are its own), a parameter, a subclass, one with Python attributes, an inference tensor, a call inside
    `torch.inference_mode`; and a copy torch's own code makes (`Module.cpu()` of a module's buffers keeps them).
    Outside a counter nothing is replaced."""
    cpu_run()
    x = torch.arange(4.0)
    graded = torch.arange(4.0, requires_grad=True)
    parameter = torch.nn.Parameter(torch.arange(4.0), requires_grad=False)
    tagged = torch.arange(4.0)
    tagged.tag = "mine"  # type: ignore[attr-defined]
    with torch.inference_mode():
        inferred = torch.arange(4.0)
    kept: dict[str, torch.Tensor] = {}
    norm = torch.nn.BatchNorm1d(4)
    buffers = dict(norm.named_buffers())
    with SyncCounter() as counter:
        norm.cpu()
        assert all(buffer is buffers[name] for name, buffer in norm.named_buffers())
        kept["x"] = copy = x.cpu()
        assert copy is not x and type(copy) is torch.Tensor
        assert copy.data_ptr() == x.data_ptr() and not copy.requires_grad and copy._base is None
        copy.add_(1.0)  # written through the copy: the tensor sees it, as without tripwire
        assert x.tolist() == [1.0, 2.0, 3.0, 4.0] and x._version == copy._version
        x.mul_(2.0)  # and the other way
        assert copy.tolist() == [2.0, 4.0, 6.0, 8.0]
        assert x.to("cpu") is not x and x.detach().cpu() is not x
        assert graded.cpu() is graded and parameter.cpu() is parameter and tagged.cpu() is tagged
        assert inferred.cpu() is inferred
        with torch.inference_mode():
            assert x.cpu() is x
    assert counter.counts_by_kind() == {"cpu": 12, "to_cpu": 1, "tolist": 1}  # the module: 2 parameters, 3 buffers
    with SyncCounter():  # `torch.func`'s transforms see the tensor they track, as without tripwire
        assert torch.func.grad(lambda t: (t.cpu() ** 2).sum())(x).tolist() == [4.0, 8.0, 12.0, 16.0]
        assert torch.vmap(lambda t: t.cpu() * 2)(torch.ones(2, 3)).tolist() == [[2.0] * 3] * 2
    assert x.cpu() is x  # no counter: torch's own `.cpu()`
    (graded * kept["x"]).sum().backward()  # the copy in the graph: a gradient for the tensor that needs one
    assert graded.grad is not None and graded.grad.tolist() == [2.0, 4.0, 6.0, 8.0]


def test_a_loop_that_needs_the_tensor_itself_can_have_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """`TRIPWIRE_HOST_COPIES=same`: every copy is the tensor torch gives back, as before the copy of its own, and
    the rules that read the loop's lines decide (a copy held in an attribute is the device tensor to its reads)."""
    cpu_run()
    x = torch.arange(4.0)
    holder = _Bag()
    copies: list[bool] = []

    def held() -> None:
        holder.copy = x.cpu()
        copies.append(holder.copy is x)
        holder.copy[0].item()

    assert counted(held) == {"cpu": 1}
    monkeypatch.setenv(explicit.HOST_COPIES_VARIABLE, "same")
    assert counted(held) == {"cpu": 1, "item": 1}
    assert copies == [False, True]
