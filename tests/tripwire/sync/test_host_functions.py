"""A loop's host bookkeeping spelled with torch's functions: `torch.where(done, 0.0, returns)`, `torch.sum(x)`,
`torch.clamp(x, 0, 1)`, `torch.maximum(a, b)`, `torch.logical_or(terminated, truncated)`; and with indexing and the
data-dependent ops: `returns[done]`, `returns[idx]`, `torch.nonzero(done)`, `torch.unique(actions)`.

Of host tensors alone, each computes in host memory on a GPU run too: a read of its result waits for nothing, and a
`.to(device)` of it is an upload. Only the methods and operators were followed (`x.sum()`, `a + b`), so a CPU run
counted each read of a function's result, which a GPU run does not wait on, and missed its upload, which a GPU run
waits on. The functions are followed as the methods are: the result is host memory where every tensor it took is.
An index of a host tensor is host memory whatever made its index (torch refuses an index on another device than the
target's but the host), and so is a data-dependent op of host tensors alone; both are followed from the kernels (or
the dispatch mode) that watch those ops.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable

import numpy as np
import pytest
import torch
from sync_counts import counted

from tripwire.sync import explicit, hot_path
from tripwire.sync.counter import SyncCounter

pytestmark = pytest.mark.usefixtures("explicit_hooks")  # stand-ins and the function mode alike

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")

# Each takes host (or device) tensors: `x` floats, `done` bools; gives one tensor to read
COMPUTED: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "where": lambda x, done: torch.where(done, 0.0, x),
    "sum": lambda x, done: torch.sum(x),
    "mean": lambda x, done: torch.mean(x),
    "clamp": lambda x, done: torch.clamp(x, 0.0, 1.5),
    "maximum": lambda x, done: torch.maximum(x, x * 2),
    "abs": lambda x, done: torch.abs(x),
    "add": lambda x, done: torch.add(x, 1),
    "mul": lambda x, done: torch.mul(x, x),
    "cumsum": lambda x, done: torch.cumsum(x, 0),
    "logical_or": lambda x, done: torch.logical_or(done, done),
    "logical_not": lambda x, done: torch.logical_not(done),
    "max along a dim (values)": lambda x, done: torch.max(x.view(2, 2), dim=1).values,
    "max along a dim (indices)": lambda x, done: torch.max(x.view(2, 2), dim=1)[1],
    "where of a condition alone": lambda x, done: torch.where(done)[0],
    # what a loop does to pick, order, fill and reshape its bookkeeping (a replay buffer's priorities, returns)
    "gather": lambda x, done: x.gather(0, done.long()),
    "index_select": lambda x, done: torch.index_select(x, 0, done.long()),
    "take_along_dim": lambda x, done: torch.take_along_dim(x, done.long(), 0),
    "sort (values)": lambda x, done: x.sort(descending=True).values,
    "argsort": lambda x, done: torch.argsort(x),
    "topk (indices)": lambda x, done: x.topk(2).indices,
    "median": lambda x, done: x.median(),
    "masked_fill": lambda x, done: x.masked_fill(done, 0.0),
    "scatter_add": lambda x, done: x.scatter_add(0, done.long(), x),
    "repeat": lambda x, done: x.repeat(2),
    "flip": lambda x, done: torch.flip(x, (0,)),
    "roll": lambda x, done: x.roll(1),
    "lerp": lambda x, done: torch.lerp(x, x * 2, 0.5),
    "clamp_min, rsqrt": lambda x, done: x.clamp_min(1.0).rsqrt(),
    "cumprod": lambda x, done: torch.cumprod(x, 0),
    "isfinite": lambda x, done: x.isfinite(),
    "where as a method": lambda x, done: x.where(done, 0.0),
    "logical_or as a method": lambda x, done: done.logical_or(done),
    "type to a dtype": lambda x, done: x.type(torch.float64),
    "new_full": lambda x, done: x.new_full((4,), 2.0),
    # ... and what it draws from it, or finds in it (a sum tree's search, a distribution's checks)
    "multinomial": lambda x, done: torch.multinomial(x, 2),
    "bernoulli": lambda x, done: torch.bernoulli(x / 4),
    "searchsorted": lambda x, done: torch.searchsorted(torch.cumsum(x, 0), x),
    "bucketize": lambda x, done: torch.bucketize(x, torch.cumsum(x, 0)),
    "isin": lambda x, done: torch.isin(x, x * 2),
    "flatten of a transpose (a copy)": lambda x, done: torch.flatten(x.view(2, 2).t()),
    "clone": lambda x, done: torch.clone(x),
    "index_put": lambda x, done: x.index_put((done.long(),), x[0]),
    "cummax (values)": lambda x, done: x.cummax(0).values,
    "logsumexp": lambda x, done: torch.logsumexp(x, 0),
    "isclose": lambda x, done: torch.isclose(x, x * 2),
    "std_mean (std)": lambda x, done: torch.std_mean(x)[0],
    "var_mean (mean)": lambda x, done: torch.var_mean(x)[1],
}


def _host() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([0.5, 1.0, 2.0, 3.0]), torch.tensor([True, False, False, True])


@pytest.mark.parametrize("compute", COMPUTED.values(), ids=COMPUTED.keys())
def test_a_function_of_host_tensors_is_host_memory_read_free_and_uploaded(
    compute: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> None:
    def step() -> None:
        x, done = _host()
        result = compute(x, done)
        result.sum().item()  # host memory: no wait on a GPU run
        float(result.float().mean())
        result.to(DEVICE)  # an upload, as on a GPU

    assert counted(step) == {"to_device": 1}


@pytest.mark.parametrize("compute", COMPUTED.values(), ids=COMPUTED.keys())
def test_a_function_of_a_device_tensor_is_device_memory(
    compute: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> None:
    """A device tensor among its tensors puts the result on the device (built before the counter: the run's device
    memory on a CPU run as on a GPU): its read waits, and a move to the device moves nothing."""
    x_device = (torch.tensor([0.5, 1.0, 2.0, 3.0]) * 1).to(DEVICE)
    done_device = torch.tensor([True, False, False, True]).to(DEVICE)

    def step() -> None:
        compute(x_device, done_device).sum().item()
        compute(x_device, done_device).to(DEVICE)

    # a condition alone is `nonzero` of it, which waits on the device each time
    alone = compute is COMPUTED["where of a condition alone"]
    assert counted(step) == ({"item": 1, "implicit:nonzero": 2} if alone else {"item": 1})


def test_a_new_tensor_is_where_its_device_says_else_where_its_tensor_is() -> None:
    """`x.new_zeros(n)` builds where `x` is, unless its `device=` says where: a device by name (on a CPU run the same
    CPU as the host, read from the line, as `torch.zeros_like`'s) is the device's, `device="cpu"` the host's."""
    device = DEVICE

    def step() -> None:
        x, _ = _host()
        x.new_zeros(4).sum().item()  # host memory: no wait
        x.new_ones(4, device="cpu").sum().item()  # the host: no wait
        built = x.new_empty(4, device=device).fill_(1.0)  # the device's: a read waits, a move moves nothing
        built.sum().item()
        built.to(DEVICE)
        x.new_full((4,), 2.0).to(DEVICE)  # host memory: an upload

    assert counted(step) == {"item": 1, "to_device": 1}


def test_a_distribution_over_host_memory_validates_and_draws_there() -> None:
    """`Categorical(probs=host_probs)`: its argument checks (`torch._is_all_true` of what the constraints compute) and
    its draws are host memory: no read waits, and a move of a draw to the device is an upload. Over device
    probabilities each check is a read that waits, as on a GPU. (Its `log_prob` is not followed: it broadcasts with
    `torch.broadcast_tensors`, a Python function, which cannot be watched: `explicit._PYTHON_FUNCTIONS`.)"""

    def step(probs: torch.Tensor, action: torch.Tensor) -> None:
        dist = torch.distributions.Categorical(probs=probs)
        dist.sample((2,)).to(DEVICE)
        dist._validate_sample(action)
        dist.probs.sum().item()

    def on_host() -> None:
        x, done = _host()  # built while the counter runs: host memory
        step(x, done.long())

    assert counted(on_host) == {"to_device": 1}
    x, done = _host()
    on_device = (x * 1).to(DEVICE), done.long().to(DEVICE)
    assert counted(lambda: step(*on_device)) == {"bool": 2, "item": 1}


def test_a_host_condition_choosing_from_a_device_tensor_is_device_memory() -> None:
    on_device = (torch.ones(4) * 2).to(DEVICE)

    def step() -> None:
        _, done = _host()
        torch.where(done, on_device, 0.0).sum().item()  # the device's: a wait
        torch.where(done, 1.0, 0.0).sum().item()  # numbers and a host condition: host memory

    assert counted(step) == {"item": 1}


def _seeded(compute: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    torch.manual_seed(0)  # the draws (`multinomial`, `bernoulli`) too
    return compute(*_host())


def test_the_functions_compute_what_they_compute_unwatched() -> None:
    plain = [_seeded(compute) for compute in COMPUTED.values()]
    with SyncCounter(), hot_path("region"):
        recorded = [_seeded(compute) for compute in COMPUTED.values()]
    for name, mine, theirs in zip(COMPUTED, recorded, plain):
        assert torch.equal(mine, theirs) and mine.dtype == theirs.dtype, name


def test_the_functions_are_torchs_own_again_after_a_recording() -> None:
    own = {name: getattr(torch, name) for name in explicit._COMPUTING_FUNCTIONS}
    with SyncCounter(), hot_path("region"):
        watched = [name for name in own if getattr(torch, name) is not own[name]]
    assert watched == list(own) if explicit.use_patches else watched == []
    assert all(getattr(torch, name) is function for name, function in own.items())


def test_a_one_element_spread_warns_at_the_loops_line() -> None:
    """`torch.std(x)` of one element warns from C++ (no degrees of freedom left): at the loop's line, as unwatched."""

    def spread() -> list[tuple[str, int]]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            x = torch.ones(1)
            torch.std(x)
            torch.var(x)
            torch.std_mean(x)
            torch.var_mean(x)
        return [(w.filename, w.lineno) for w in caught]

    plain = spread()
    assert len(plain) == 4 and all(filename == __file__ for filename, _ in plain), plain
    with SyncCounter(), hot_path("region"):
        assert spread() == plain


def test_a_compiled_function_of_them_compiles_as_unwatched() -> None:
    """dynamo traces through the stand-ins in `torch` to torch's own functions: under a recording the same one graph,
    no break, and the same values."""
    dynamo = pytest.importorskip("torch._dynamo")

    def bookkeeping(x: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        kept = torch.where(done, 0.0, x)
        return torch.sum(torch.clamp(kept, 0.0, 1.0) + torch.maximum(kept, x)) + torch.logical_not(done).float().mean()

    def compiled(recorded: bool) -> tuple[list[torch.Tensor], dict[str, int], dict[str, int]]:
        dynamo.reset()
        dynamo.utils.counters.clear()
        step = torch.compile(bookkeeping, backend="eager")
        with SyncCounter() if recorded else contextlib.nullcontext(), hot_path("region"):
            values = [step(*_host()) for _ in range(3)]
        return values, dict(dynamo.utils.counters["stats"]), dict(dynamo.utils.counters["graph_break"])

    plain, recorded = compiled(False), compiled(True)
    assert recorded[1:] == plain[1:] and plain[1]["unique_graphs"] == 1 and not plain[2], (plain[1:], recorded[1:])
    assert all(torch.equal(mine, theirs) for mine, theirs in zip(recorded[0], plain[0]))


def test_a_compiled_distribution_compiles_under_a_recording() -> None:
    """A distribution's `log_prob` broadcasts with `torch.broadcast_tensors`, a function torch writes in Python, which
    dynamo inlines and guards by its `__dict__`: a stand-in in its place failed the guard on its first call under a
    recording ("Guard failed on the same frame it was created": LeanRL's `Normal` under inductor). Only builtins are
    watched in `torch` (`explicit._PYTHON_FUNCTIONS`)."""
    dynamo = pytest.importorskip("torch._dynamo")

    def log_prob(mean: torch.Tensor, std: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.distributions.Normal(mean, std, validate_args=False).log_prob(x).sum()

    dynamo.reset()
    step = torch.compile(log_prob, backend="eager")
    mean, std, x = torch.zeros(3), torch.ones(3), torch.linspace(-1.0, 1.0, 3)
    with SyncCounter(), hot_path("region"):
        values = [step(mean, std, x) for _ in range(2)]
    assert all(torch.equal(value, log_prob(mean, std, x)) for value in values)
    assert not explicit._PYTHON_FUNCTIONS and "broadcast_tensors" not in explicit._WATCHED_FUNCTIONS


# Each takes host (or device) tensors: `x` floats, `done` bools, `idx` integers; gives one tensor to read
INDEXED: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "by a mask": lambda x, done, idx: x[done],
    "by a tensor index": lambda x, done, idx: x[idx],
    "by a list": lambda x, done, idx: x[[0, 2]],
    "by a NumPy array": lambda x, done, idx: x[np.array([0, 2])],
    "nonzero": lambda x, done, idx: torch.nonzero(done),
    "nonzero as a method": lambda x, done, idx: done.nonzero(),
    "unique": lambda x, done, idx: torch.unique(idx),
    "masked_select": lambda x, done, idx: torch.masked_select(x, done),
}


@pytest.mark.usefixtures("counting")  # the kernels over the data-dependent ops, and the dispatch mode
@pytest.mark.parametrize("compute", INDEXED.values(), ids=INDEXED.keys())
def test_an_index_of_host_memory_is_host_memory_read_free_and_uploaded(
    compute: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
) -> None:
    def step() -> None:
        x, done = _host()
        result = compute(x, done, torch.tensor([0, 2]))
        result.sum().item()  # host memory: no wait on a GPU run
        result.to(DEVICE)  # an upload, as on a GPU

    assert counted(step) == {"to_device": 1}


@pytest.mark.usefixtures("counting")
@pytest.mark.parametrize("compute", INDEXED.values(), ids=INDEXED.keys())
def test_an_index_of_device_memory_is_device_memory(
    compute: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
) -> None:
    """A device tensor indexed (by a mask, a device index, a list), or a data-dependent op of device tensors: the
    result is on the device, its read waits, its move moves nothing; the op's own waits are counted as before."""
    x_device = (torch.tensor([0.5, 1.0, 2.0, 3.0]) * 1).to(DEVICE)
    done_device = torch.tensor([True, False, False, True]).to(DEVICE)
    idx_device = torch.tensor([0, 2]).to(DEVICE)

    def step() -> None:
        result = compute(x_device, done_device, idx_device)
        result.sum().item()
        result.to(DEVICE)

    counts = counted(step)
    assert counts.pop("item") == 1 and all(kind.startswith(("implicit:", "to_device")) for kind in counts), counts


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch's sync detector needs CUDA")
def test_torchs_detector_flags_none_of_the_host_reads_left_out() -> None:
    """On a GPU: torch's own sync detector agrees that reading these host results waits for nothing (the device
    cross-check fails on a line torch flags that tripwire left out), and the one read of device memory is counted."""
    on_device = torch.ones(4, device=DEVICE)
    with SyncCounter(cuda_cross_check=True) as counter:
        x, done = _host()
        for compute in COMPUTED.values():
            compute(x, done).sum().item()
        for index in INDEXED.values():
            index(x, done, torch.tensor([0, 2])).sum().item()
        torch.where(done.to(DEVICE), on_device, 0.0).sum().item()
    check = counter.cross_check()
    assert check is not None and check.ok, check and check.format()
    assert counter.counts_by_kind() == {"item": 1, "to_device": 1}
