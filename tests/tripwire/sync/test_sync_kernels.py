"""Implicit syncs counted by kernels over the data-dependent ops (`implicit.ImplicitKernels`) are the syncs the dispatch
mode counts (`implicit.ImplicitSyncMode`): the same kinds at the same lines, call by call, in every autograd state."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import ClassVar

import pytest
import torch

from tripwire.sync import explicit, implicit
from tripwire.sync.counter import SyncCounter
from tripwire.sync.regions import carried

pytestmark = pytest.mark.skipif(not implicit.kernels_available(), reason="torch.library.get_kernel needs torch 2.9+")


@pytest.fixture
def both(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Callable[[], None]], list[tuple[str, str]]]]:
    """Run a body under each way of counting and return the kernels' events after checking the mode's match them."""

    def run(body: Callable[[], None], *, threads: bool = True) -> list[tuple[str, str]]:
        seen = {}
        for use_kernels in (True, False):
            monkeypatch.setattr(implicit, "use_kernels", use_kernels)
            with SyncCounter(threads=threads) as counter:
                body()
            seen[use_kernels] = [(event.kind, event.site.rsplit(":", 1)[-1]) for event in counter.events]
        assert seen[True] == seen[False]
        return seen[True]

    yield run


def _line() -> str:
    import inspect

    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return str(frame.f_back.f_lineno + 1)


def test_top_level_data_dependent_ops_are_counted_once(both: Callable[..., list[tuple[str, str]]]) -> None:
    x = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)
    lines: dict[str, str] = {}

    def body() -> None:
        # the index's own nonzero is inside its kernel: not counted again; its backward puts the gradient through the
        # mask (`_index_put_impl_` with accumulation), which on a GPU turns the mask into indices again and waits
        lines["mask"] = _line()
        x[x > 0].sum().backward()
        lines["ops"] = _line()
        torch.nonzero(x), torch.allclose(x, x), torch.unique(x), torch.repeat_interleave(x.detach().long())
        lines["item"] = _line()
        x.sum().item()

    events = both(body)
    assert events == [
        ("implicit:index(mask)", lines["mask"]),
        ("implicit:index_put(mask)", lines["mask"]),
        ("implicit:nonzero", lines["ops"]),
        ("implicit:allclose", lines["ops"]),
        ("implicit:_unique2", lines["ops"]),
        ("implicit:repeat_interleave", lines["ops"]),  # its total, then its check that no repeat is negative
        ("implicit:repeat_interleave", lines["ops"]),
        ("item", lines["item"]),
    ]


def test_histc_over_its_inputs_own_range_is_counted_by_both(both: Callable[..., list[tuple[str, str]]]) -> None:
    """`torch.histc` with the default range (`min == max`) reads its input's minimum and maximum to the host on a
    device, untagged: it was counted nowhere. Given a range it reads nothing; host data built in the recording reads
    host memory on a GPU run too; inside inference mode the dispatch mode counts it."""
    x = torch.randn(8, device="cuda" if torch.cuda.is_available() else "cpu")  # built before the recording
    lines: dict[str, str] = {}

    def body() -> None:
        lines["default"] = _line()
        torch.histc(x), x.histc(bins=5), torch.histc(x, 10, 0.0, 0.0)
        torch.histc(x, 10, -1.0, 1.0), torch.histc(torch.randn(4))  # a range given; host data
        with torch.inference_mode():
            lines["inference"] = _line()
            torch.histc(x)

    # two reads each: the minimum, then the maximum
    assert both(body) == [("implicit:histc", lines["default"])] * 6 + [("implicit:histc", lines["inference"])] * 2


def _encoder() -> torch.nn.TransformerEncoder:
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
    return torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=True)


def test_a_padding_mask_made_a_nested_tensor_counts_the_reads_a_gpu_makes(
    both: Callable[..., list[tuple[str, str]]],
) -> None:
    """A `TransformerEncoder` run outside autograd with a padding mask takes torch's fast path, on a CPU as on a GPU:
    it checks the mask is left-aligned (`_nested_tensor_from_mask_left_aligned`: one read of its lengths on a device),
    then converts the input to a nested tensor (`_nested_tensor_from_mask(..., mask_check=False)`: the lengths copied
    to the host, one read). Untagged, both were counted nowhere: a CPU run of a transformer policy's rollout reported
    none of the two waits a GPU makes at every forward. Called directly, the conversion checks the mask too (two
    reads); in training, with autograd on, the encoder takes the padded path and reads nothing."""
    encoder = _encoder().eval()
    inputs = torch.randn(3, 5, 8)
    mask = torch.tensor([[False] * 5, [False] * 3 + [True] * 2, [False] * 4 + [True]])
    lines: dict[str, str] = {}

    def body() -> None:
        with torch.no_grad():
            lines["eval"] = _line()
            encoder(inputs, src_key_padding_mask=mask)
            lines["direct"] = _line()
            torch._nested_tensor_from_mask(inputs, mask.logical_not())
            encoder(inputs)  # no mask: nothing to read
        with torch.inference_mode():
            lines["inference"] = _line()
            encoder(inputs, src_key_padding_mask=mask)
        encoder.train()
        encoder(inputs, src_key_padding_mask=mask)  # autograd on: the padded path
        encoder.eval()

    once = [("implicit:nested_mask_check", "{}"), ("implicit:nested_from_mask", "{}")]
    events = both(body, threads=False)
    assert events == [
        *[(kind, line.format(lines["eval"])) for kind, line in once],
        ("implicit:nested_from_mask", lines["direct"]),  # its lengths, then its own check
        ("implicit:nested_from_mask", lines["direct"]),
        *[(kind, line.format(lines["inference"])) for kind, line in once],
    ]


def test_a_device_scalar_an_ops_kernel_reads_is_counted(both: Callable[..., list[tuple[str, str]]]) -> None:
    """`masked_fill` and `index_fill` given a 0-d tensor value read it with `value.item()` inside their kernels (on
    CUDA too: `masked_fill__cuda` calls itself with `value.item()`), a wait where the value is on a device: a logit
    mask filled with a buffer (`logits.masked_fill(~legal, self.floor)`), or with a reduction (`x.max()`); so do
    `linspace` and `logspace` of their tensor endpoints, factories that reach their backend kernel alone. Untagged,
    the reads were counted nowhere. A number reads nothing, nor does a value built in host memory."""
    x = torch.randn(6)
    floor = x.min()  # built before the recording: where the run's tensors are
    legal, rows = x > 0, torch.tensor([0, 2])
    lines: dict[str, str] = {}

    def body() -> None:
        lines["fills"] = _line()
        x.masked_fill(~legal, floor), x.clone().masked_fill_(legal, x.max()), x.index_fill(0, rows, floor)
        lines["in place"] = _line()
        x.clone().index_fill_(0, rows, floor)
        x.masked_fill(legal, 0.0), x.index_fill(0, rows, -1.0)  # numbers
        x.masked_fill(legal, torch.tensor(-1e8))  # host memory on a GPU run too
        lines["endpoints"] = _line()
        torch.linspace(floor, x.max(), 5), torch.logspace(0.0, floor, 3)  # both endpoints, then one
        torch.linspace(0.0, 1.0, 5), torch.linspace(torch.tensor(0.0), torch.tensor(1.0), 5)  # numbers; host memory
        with torch.inference_mode():
            lines["inference"] = _line()
            x.masked_fill(~legal, floor)

    events = both(body)
    assert events == [("implicit:scalar_argument", lines["fills"])] * 3 + [
        ("implicit:scalar_argument", lines["in place"]),
        *[("implicit:scalar_argument", lines["endpoints"])] * 3,
        ("implicit:scalar_argument", lines["inference"]),
    ]


def test_bincount_and_repeat_interleave_count_each_read_a_gpu_makes(
    both: Callable[..., list[tuple[str, str]]],
) -> None:
    """On a device `bincount` reads its input's minimum (`.cpu()`; not for uint8) and maximum (`.item()`), and
    `repeat_interleave` its total and its check that no repeat is negative (two `.item()`s): one count per wait, as
    the device's sync warnings count them. An empty input returns before reading; an `output_size` skips both reads."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    ints = torch.tensor([1, 2, 2], device=device).clone()  # built before the recording: device data on a GPU run
    small, empty = ints.to(torch.uint8), ints[:0]
    lines: dict[str, str] = {}

    def body() -> None:
        lines["bincount"] = _line()
        torch.bincount(ints), torch.bincount(ints, minlength=8)
        lines["uint8"] = _line()
        torch.bincount(small), torch.bincount(empty)
        lines["repeat"] = _line()
        torch.repeat_interleave(ints), torch.repeat_interleave(ints, output_size=5), torch.repeat_interleave(empty)
        with torch.inference_mode():
            lines["inference"] = _line()
            torch.bincount(ints), torch.repeat_interleave(ints)

    assert both(body) == (
        [("implicit:bincount", lines["bincount"])] * 4
        + [("implicit:bincount", lines["uint8"])]
        + [("implicit:repeat_interleave", lines["repeat"])] * 2
        + [("implicit:bincount", lines["inference"])] * 2
        + [("implicit:repeat_interleave", lines["inference"])] * 2
    )


def test_reads_of_host_memory_on_a_gpu_too_are_not_counted(both: Callable[..., list[tuple[str, str]]]) -> None:
    """`torch.quantile` checks that `q` lies in [0, 1] only when its input is on a CPU (`self.device().is_cpu()`: an
    `.all()` read through `equal`), to spare a GPU the wait: a CPU run counted `implicit:equal` a call that a GPU run
    never makes. `tensor_split` given its number of sections as a 0-d tensor reads it with `.item()`, from a tensor
    torch requires in host memory: a CPU run counted `implicit:_local_scalar_dense` a call. Counted whole, as a GPU
    runs them: nothing; the same under the dispatch mode. The counter still sees every other read."""
    values = torch.randn(16, device="cuda" if torch.cuda.is_available() else "cpu")
    q, points, sections = torch.tensor([0.1, 0.9], device=values.device), torch.tensor([2, 5]), torch.tensor(3)
    lines: dict[str, str] = {}

    def body() -> None:
        torch.quantile(values, 0.5), torch.nanquantile(values, q)
        values.quantile(0.25, dim=0, keepdim=True), values.tensor_split(points), values.tensor_split(sections)
        lines["equal"] = _line()
        torch.equal(values, values)

    assert both(body) == [("implicit:equal", lines["equal"])]


def test_one_hot_counts_the_read_a_gpu_makes_not_its_cpu_kernels_checks(
    both: Callable[..., list[tuple[str, str]]],
) -> None:
    """`F.one_hot` decomposes above the backends; on a CPU its kernel checks the classes' range with two reads, which
    were counted (`implicit:_local_scalar_dense` twice a call), where its CUDA kernel reads the maximum once, and only
    without `num_classes`. Counted whole, as a GPU reads; host data built in the recording reads nothing."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    classes = torch.tensor([0, 3, 1], device=device).clone()
    lines: dict[str, str] = {}

    def body() -> None:
        lines["auto"] = _line()
        torch.nn.functional.one_hot(classes)
        torch.nn.functional.one_hot(classes, 4), torch.nn.functional.one_hot(torch.tensor([1, 2]))
        with torch.inference_mode():
            lines["inference"] = _line()
            torch.nn.functional.one_hot(classes)

    assert both(body) == [("implicit:one_hot", lines["auto"]), ("implicit:one_hot", lines["inference"])]


def test_an_ops_own_reads_inside_its_kernel_are_not_counted(both: Callable[..., list[tuple[str, str]]]) -> None:
    """A CPU `var` and CPU fused Adam read scalars inside their kernels: not a sync on a GPU, so not counted."""
    x = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)
    x.grad = torch.ones(3)
    optimizer = torch.optim.Adam([x], fused=True)

    def body() -> None:
        x.var(correction=0)
        optimizer.step()
        x.detach()[torch.tensor([0, 1])]  # integer indices: no mask, nothing data-dependent

    assert both(body) == []


def test_an_assignment_through_a_boolean_mask_counts_unless_torch_fills(
    both: Callable[..., list[tuple[str, str]]],
) -> None:
    """`t[mask] = values` is `index_put_`, untagged: on a GPU its kernel turns the mask into indices with `nonzero`
    and waits, unless torch runs it as `masked_fill_` (one mask, one value in host memory, no accumulation:
    `t[mask] = 0.0`, the logits masked with `-inf`). Counted at its line, kernels and mode alike, including inside
    inference mode and out of place. A value of one element on the device (`t[mask] = x.mean()`) is not a fill: a CPU
    run took every such value for the host memory it is there, and counted it on a GPU only."""
    x = torch.tensor([0.0, 1.0, 2.0])
    values = torch.tensor([3.0, 4.0, 5.0])
    lines: dict[str, str] = {}

    def body() -> None:
        y = x.clone()
        lines["put"] = _line()
        y[x >= 0] = values
        y[x > 0] = 0.0  # a fill
        y[x > 0] = float("-inf")  # a fill
        y[x > 0] = torch.tensor(-1.0)  # a fill: built in host memory, where it is on a GPU run too
        lines["device value"] = _line()
        y[x > 0] = x.mean()  # one element on the device: not a fill
        y[torch.tensor([0, 2])] = values[:2]  # integer indices: nothing data-dependent
        lines["accumulate"] = _line()
        y.index_put_((x > 0,), torch.tensor(1.0), accumulate=True)
        lines["out_of_place"] = _line()
        torch.index_put(y, (x >= 0,), values)
        with torch.inference_mode():
            lines["inference"] = _line()
            y[x >= 0] = values

    assert both(body) == [
        ("implicit:index_put(mask)", lines["put"]),
        ("implicit:index_put(mask)", lines["device value"]),
        ("implicit:index_put(mask)", lines["accumulate"]),
        ("implicit:index_put(mask)", lines["out_of_place"]),
        ("implicit:index_put(mask)", lines["inference"]),
    ]


def test_inference_mode_and_inference_tensors(both: Callable[..., list[tuple[str, str]]]) -> None:
    x = torch.tensor([0.0, 1.0, 2.0])
    with torch.inference_mode():
        made = torch.ones(3)
    lines: dict[str, str] = {}

    def body() -> None:
        with torch.inference_mode():
            lines["inside"] = _line()
            torch.nonzero(x), x.var(correction=0), x[x > 0]
            with torch.inference_mode(False):
                lines["reenabled"] = _line()
                torch.nonzero(x)
        lines["tensor"] = _line()
        torch.nonzero(made), made[made > 0]
        with torch.no_grad():
            lines["no_grad"] = _line()
            torch.nonzero(x)

    assert both(body) == [
        ("implicit:nonzero", lines["inside"]),
        ("implicit:index(mask)", lines["inside"]),
        ("implicit:nonzero", lines["reenabled"]),
        ("implicit:nonzero", lines["tensor"]),
        ("implicit:index(mask)", lines["tensor"]),
        ("implicit:nonzero", lines["no_grad"]),
    ]


def test_a_counter_started_inside_inference_mode(both: Callable[..., list[tuple[str, str]]]) -> None:
    x = torch.tensor([0.0, 1.0])
    with torch.inference_mode():
        assert [kind for kind, _ in both(lambda: (torch.nonzero(x), x.var()))] == ["implicit:nonzero"]
    assert not torch.is_inference_mode_enabled()


def test_threads_count_as_the_mode_did(both: Callable[..., list[tuple[str, str]]]) -> None:
    """Carried work counts, and so does a thread the counted code starts; with the counter's thread watch off, a
    thread nobody carried does not (torch modes are per thread)."""
    x = torch.tensor([0.0, 1.0])

    def body() -> None:
        work = carried(lambda: torch.nonzero(x))
        threads = [threading.Thread(target=work), threading.Thread(target=lambda: torch.nonzero(x))]
        for thread in threads:
            thread.start()
            thread.join()

    assert [kind for kind, _ in both(body)] == ["implicit:nonzero"] * 2
    assert [kind for kind, _ in both(body, threads=False)] == ["implicit:nonzero"]


def test_each_ops_own_kernel_is_back_after_the_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing is left registered: the ops run their own kernels, and inference mode is torch's again."""
    monkeypatch.setattr(implicit, "use_kernels", True)
    x = torch.tensor([0.0, 1.0])
    enter = torch.autograd.grad_mode.inference_mode.__enter__
    with SyncCounter() as counter:
        torch.nonzero(x)
        assert torch.autograd.grad_mode.inference_mode.__enter__ is not enter
    with SyncCounter(implicit=False) as explicit_only:
        torch.nonzero(x)
    assert [event.kind for event in counter.events] == ["implicit:nonzero"]
    assert explicit_only.events == []
    assert torch.autograd.grad_mode.inference_mode.__enter__ is enter
    ours = {f"{namespace}/{name}/{key}" for namespace, name, _, keys in implicit._implicit_targets() for key in keys}
    assert ours and not ours & torch.library._impls  # every registration is gone
    assert torch.nonzero(x).tolist() == [[1]]


def test_a_thread_counts_where_torch_carried_a_counting_mode_to_it() -> None:
    """Autograd's device threads run a CUDA backward under its caller's function modes, never under `carried`: a
    thread counts when a counting mode is on its function-mode stack, and not otherwise."""
    seen: dict[str, bool] = {}

    def probe() -> None:
        seen["bare"] = implicit.counting_here()
        with explicit.ExplicitSyncMode():
            seen["carried mode"] = implicit.counting_here()
        with torch.overrides.TorchFunctionMode():
            seen["another mode"] = implicit.counting_here()

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    assert seen == {"bare": False, "carried mode": True, "another mode": False}


def test_a_thread_running_part_of_a_counting_threads_backward_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """With stand-ins no mode travels to autograd's device threads: a thread counts while it runs part of a graph task
    (`torch._C._current_graph_task_id`, faked here as a device thread would see it) and a counting thread's backward
    is running, and not otherwise. A CPU backward runs on its caller's thread: a CPU run starts no device thread."""
    monkeypatch.setattr(explicit, "use_patches", True)
    value = torch.ones(2)
    x = torch.ones(2, requires_grad=True)
    seen: dict[str, bool] = {}

    def on_a_device_thread(name: str, task: int) -> None:
        def probe() -> None:
            seen[name] = implicit.counting_here()
            value.sum().item()

        monkeypatch.setattr(torch._C, "_current_graph_task_id", lambda: task)
        thread = threading.Thread(target=probe)
        thread.start()
        thread.join()
        monkeypatch.undo()
        monkeypatch.setattr(explicit, "use_patches", True)

    def hook(grad: torch.Tensor) -> torch.Tensor:
        on_a_device_thread("in the backward", 7)
        on_a_device_thread("in no graph task", -1)
        return grad

    x.register_hook(hook)
    with SyncCounter(threads=False) as counter:  # the threads here stand for autograd's, which nobody starts
        (x * 2).sum().backward()
        on_a_device_thread("after the backward", 7)
    assert seen == {"in the backward": True, "in no graph task": False, "after the backward": False}
    assert counter.counts_by_kind() == {"item": 1}


def test_counting_inside_inference_mode_does_not_import_dynamo() -> None:
    """The dispatch mode that counts inside `inference_mode` must not import dynamo (about 1.3 s of a recording of a
    loop that never compiles): torch wraps a dispatch mode's `__torch_dispatch__` in `_disable_dynamo` unless the
    mode says not to, and that wrapper imports dynamo on its first call. A fresh interpreter, as a recording is."""
    import subprocess
    import sys

    script = (
        "import sys, torch\n"
        "from tripwire.sync.counter import SyncCounter\n"
        "x = torch.tensor([0.0, 1.0])\n"
        "with SyncCounter() as counter, torch.inference_mode():\n"
        "    torch.nonzero(x); x + 1\n"
        "assert [e.kind for e in counter.events] == ['implicit:nonzero'], counter.events\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "False", done.stdout + done.stderr


class _Doubling(torch.Tensor):
    """A subclass whose `item` computes through its own `__torch_function__`: an op it runs must keep its graph."""

    graphs: ClassVar[list[bool]] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func is torch.Tensor.item:
            doubled = args[0].as_subclass(torch.Tensor) * 2
            cls.graphs.append(doubled.grad_fn is not None)
            return doubled.detach().item()
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad=True to a scalar")  # torch's, for `float`
def test_a_counted_scalar_read_is_counted_once_and_keeps_autograd_where_a_subclass_computes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stand-in counts `item`, `bool`, `float`, `int`, `index` itself and runs the read below autograd, past the
    counting kernel at the autograd key: counted once as itself, never again as `_local_scalar_dense`. A subclass's
    own `__torch_function__` runs as it did: its ops still record their graph."""
    monkeypatch.setattr(implicit, "use_kernels", True)
    x = torch.tensor([1.5], requires_grad=True)
    weight = torch.nn.Parameter(torch.tensor(2.0))
    index = torch.tensor(3)
    odd = torch.tensor([0.5], requires_grad=True).as_subclass(_Doubling)
    _Doubling.graphs.clear()
    with SyncCounter() as counter:
        values = (x.item(), bool(x), float(weight), int(weight), [0, 1, 2, 3][index], odd.item())
    assert values == (1.5, True, 2.0, 2, 3, 1.0)
    assert counter.counts_by_kind() == {"item": 2, "bool": 1, "float": 1, "int": 1, "index": 1}
    assert _Doubling.graphs == [True]
    (x * weight).sum().backward()  # the graph of the tensors read is intact
    assert x.grad is not None and weight.grad is not None and x.grad.item() == 2.0


def test_ops_registered_later_are_listed_and_only_their_schemas_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The listing remembers each op's static kind (a history fork server reads every schema once, in `warm`): a
    library loaded afterwards (a tree's torchvision) adds its data-dependent ops, and only their schemas are read.
    The listing equals one made from nothing."""
    implicit.read_op_schemas()
    read: list[str] = []
    original = implicit._read_static

    def counting(full: str) -> str | None:
        read.append(full)
        return original(full)

    monkeypatch.setattr(implicit, "_read_static", counting)
    library = torch.library.Library("tripwire_later", "DEF")
    try:
        library.define("pick(Tensor x) -> Tensor", tags=(torch.Tag.data_dependent_output,))
        library.define("plain(Tensor x) -> Tensor")
        library.impl("pick", lambda x: x[x > 0], "CPU")
        library.impl("plain", lambda x: x + 1, "CPU")
        listed = implicit._implicit_targets()
        assert sorted(read) == ["tripwire_later::pick", "tripwire_later::plain"]
        later = [(namespace, name, static) for namespace, name, static, keys in listed if "CPU" in keys]
        assert ("tripwire_later", "pick", "implicit:pick") in later
        assert not [name for namespace, name, _, _ in listed if name == "plain"]
        monkeypatch.setattr(implicit, "_static_of", {})
        monkeypatch.setattr(implicit, "_targets", (-1, []))
        assert implicit._implicit_targets() == listed
    finally:
        library._destroy()


def test_a_device_tensor_indexed_by_host_indices_uploads_them_on_an_accelerator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`b_obs[mb_inds]` (CleanRL's minibatches, a NumPy index) or a buffer indexed by `torch.randint(n, (b,))`: torch
    uploads a host index before it indexes a device tensor, a blocking copy. Read from the tensors on an accelerator
    (stood in for here: this machine has none); a device index, or a host tensor indexed, uploads nothing; a CPU run
    cannot tell (the rule's docstring)."""
    from unittest import mock

    device_tensor = mock.Mock(spec=torch.Tensor)
    device_tensor.device = torch.device("cuda", 0)
    host_index = torch.tensor([0, 2])
    device_index = mock.Mock(spec=torch.Tensor)
    device_index.device = torch.device("cuda", 0)
    device_index.dtype = torch.int64
    index_kind = implicit._static_kind("aten", "index", (torch.Tag.dynamic_output_shape,))
    put_kind = implicit._static_kind("aten", "index_put_", ())
    monkeypatch.setattr(implicit, "accelerator_in_use", lambda: True)
    assert implicit._call_kind(index_kind, (device_tensor, [host_index]), {}) == "to_device"
    assert implicit._call_kind(put_kind, (device_tensor, [None, host_index], torch.ones(2)), {}) == "to_device"
    assert implicit._call_kind(index_kind, (device_tensor, [device_index]), {}) is None
    assert implicit._call_kind(index_kind, (torch.zeros(3), [host_index]), {}) is None
    monkeypatch.setattr(implicit, "accelerator_in_use", lambda: False)
    assert implicit._call_kind(index_kind, (device_tensor, [host_index]), {}) is None
