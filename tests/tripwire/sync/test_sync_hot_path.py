"""hot_path costs nothing without a counter; with one, syncs are attributed; CUDA is cross-checked where present."""

from __future__ import annotations

import threading

import pytest
import torch
from sync_counts import cpu_run
from torch.utils._python_dispatch import _len_torch_dispatch_stack

from tripwire.bitwise.trajectory import TrajectoryRecorder
from tripwire.sync import explicit, hot_path, ignore_syncs, implicit
from tripwire.sync.copies import _host_born
from tripwire.sync.counter import SyncCounter
from tripwire.sync.regions import _current_regions

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # a tensor built here is read with a wait


def test_hot_path_without_a_counter_pushes_no_region_and_no_torch_mode() -> None:
    with hot_path("train_pass"):
        assert _current_regions() == []
        assert torch._C._len_torch_function_stack() == 0
        assert _len_torch_dispatch_stack() == 0


@pytest.mark.parametrize("kernels", [True, False], ids=["kernels", "dispatch mode"])
def test_counter_installs_modes_only_while_active(
    kernels: bool, explicit_hooks: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With kernels counting implicit syncs no dispatch mode is pushed, except inside inference mode; with stand-ins
    seeing explicit syncs no function mode is pushed, and the watched functions are torch's own again after."""
    monkeypatch.setattr(implicit, "use_kernels", kernels and implicit.kernels_available())
    item, zeros, getitem = torch.Tensor.item, torch.zeros, torch.Tensor.__getitem__
    with SyncCounter():
        dispatch = 0 if implicit.use_kernels else 1
        function = 0 if explicit_hooks else 1
        assert torch._C._len_torch_function_stack() == function and _len_torch_dispatch_stack() == dispatch
        # the class's attribute stays torch's own (a `WatchedMethod` binds the stand-in for an instance only)
        assert torch.Tensor.item is item and (torch.zeros is not zeros) == explicit_hooks
        assert (type(vars(torch.Tensor).get("item")).__name__ == "WatchedMethod") == explicit_hooks
        with torch.inference_mode():
            assert _len_torch_dispatch_stack() == 1
        assert _len_torch_dispatch_stack() == dispatch
    assert torch._C._len_torch_function_stack() == 0 and _len_torch_dispatch_stack() == 0
    assert torch.Tensor.item is item and torch.zeros is zeros and torch.Tensor.__getitem__ is getitem
    assert "item" not in vars(torch.Tensor) and "__getitem__" not in vars(torch.Tensor)


def test_the_place_keeping_stand_ins_wait_for_the_first_host_built_tensor() -> None:
    """Until a tensor is built in host memory no input of `.view`, `[...]`, `.float()`, ... can be one, so their
    stand-ins are put in place at the first such tensor (a loop that builds none never pays for them); the methods that
    sync have theirs from the start."""
    value = torch.ones(2)  # built before the counter: not host-built as far as it knows
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # the run's device: on a GPU, the GPU
    earlier = dict(_host_born)  # tensors another test marked and still holds: they would put them in place at once
    _host_born.clear()
    try:
        with SyncCounter() as counter:
            assert "item" in vars(torch.Tensor) and "view" not in vars(torch.Tensor)
            value.view(2, 1)[0].sum().item()
            assert "view" not in vars(torch.Tensor) and "__getitem__" not in vars(torch.Tensor)
            rows = torch.tensor([1.0, 2.0])  # host-built: from here on its views and casts are marked
            assert "view" in vars(torch.Tensor) and "__getitem__" not in vars(torch.Tensor)  # `[...]` is a view
            rows[1:].to(device)  # the run's device, by name, of a host-built slice (its `_base`): an upload
    finally:
        _host_born.update(earlier)
    assert "view" not in vars(torch.Tensor) and "__getitem__" not in vars(torch.Tensor)
    assert counter.counts_by_kind() == {"item": 1, "to_device": 1}


def test_a_copy_read_at_once_puts_no_place_keeping_stand_in_in_place() -> None:
    """A CPU run's copy to the host is a tensor of its own, marked as host memory (`explicit.host_alias`). A copy read
    in the expression that made it (`action.cpu().numpy()`, each env step of SB3 and CleanRL) leaves nothing to
    compute with, so it puts no place-keeping stand-in in place: a loop of device tensors keeps paying nothing per
    op for them. A copy kept for later (`host = x.cpu()`) does."""
    cpu_run()
    value = torch.ones(2)
    earlier = dict(_host_born)
    _host_born.clear()
    try:
        with SyncCounter() as counter:
            value.cpu().numpy()
            value.cpu().squeeze().tolist()  # a host method between: still read at once
            assert "view" not in vars(torch.Tensor)
            host = value.cpu()
            assert "view" in vars(torch.Tensor)
            host.view(2, 1)[0].item()  # host memory: no wait
    finally:
        _host_born.update(earlier)
    assert counter.counts_by_kind() == {"cpu": 3}


def test_a_stand_in_is_what_torch_calls_and_counts_only_on_counting_threads() -> None:
    """A watched method or function is replaced where torch looks it up (`t.item()`, `t[0]`, `torch.zeros`); another
    thread that does not count runs it straight through (the counter's thread watch is off here, or the thread it
    starts would count)."""
    value = torch.ones(2)
    seen: dict[str, object] = {}

    def elsewhere() -> None:
        seen["other thread"] = value.sum().item()

    with SyncCounter(threads=False) as counter:
        value.sum().item()
        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()
        assert bool(value[0] > 0)
    assert seen == {"other thread": 2.0}
    assert counter.counts_by_kind() == {"item": 1, "bool": 1}


class _Passing(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("kernels", [True, False], ids=["kernels", "dispatch mode"])
def test_ignore_syncs_takes_the_counting_modes_off_and_puts_them_back(
    kernels: bool, explicit_hooks: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bookkeeping under `ignore_syncs` runs with no counting mode on the stacks (it pays nothing per torch call);
    leaving, even by an exception, puts back exactly the stacks that were there, so counting goes on after it."""
    monkeypatch.setattr(implicit, "use_kernels", kernels and implicit.kernels_available())
    value = torch.ones(2)
    function = 0 if explicit_hooks else 1
    with SyncCounter() as counter:
        for inference in (False, True):
            with torch.inference_mode(inference):
                before = torch._C._len_torch_function_stack(), _len_torch_dispatch_stack()
                assert before[0] == function and before[1] in (0, 1)
                with ignore_syncs():
                    assert (torch._C._len_torch_function_stack(), _len_torch_dispatch_stack()) == (0, 0)
                    value.sum().item()
                    with ignore_syncs():  # nested: nothing more to take off, and nothing lost on the way out
                        value.nonzero()
                    assert (torch._C._len_torch_function_stack(), _len_torch_dispatch_stack()) == (0, 0)
                with pytest.raises(RuntimeError, match="inside"), ignore_syncs():
                    raise RuntimeError("inside")
                assert (torch._C._len_torch_function_stack(), _len_torch_dispatch_stack()) == before
                value.sum().item()
                value.nonzero()
    assert counter.counts_by_kind() == {"item": 2, "implicit:nonzero": 2}


def test_ignore_syncs_leaves_a_mode_pushed_above_the_counters_and_the_counters_beneath_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(explicit, "use_patches", False)  # the function mode, which `ignore_syncs` takes off
    value = torch.ones(2)
    with SyncCounter() as counter, _Passing() as passing:
        with ignore_syncs():
            stack = [torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack())]
            assert stack[-1] is passing and isinstance(stack[0], explicit.ExplicitSyncMode)
            value.sum().item()
        assert torch._C._len_torch_function_stack() == 2
        value.sum().item()
    assert counter.counts_by_kind() == {"item": 1}


def test_recording_a_checkpoint_under_a_counter_makes_no_trip_through_the_counting_hooks(
    explicit_hooks: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe's digests, specs and state reads run uncounted and unclassified: recording a module, an optimizer's
    state and plain values hands not one call to the counter's handler (before, every tensor cost dozens)."""
    calls = []
    watched = explicit.watched_call

    def counting(func, call, args, kwargs):  # type: ignore[no-untyped-def]
        calls.append(func)
        return watched(func, call, args, kwargs)

    monkeypatch.setattr(explicit, "watched_call", counting)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    optimizer = torch.optim.Adam(model.parameters())
    recorder = TrajectoryRecorder(keep_values=True)
    with SyncCounter() as counter:
        model(torch.randn(3, 4)).sum().backward()
        optimizer.step()
        state, plain = optimizer.state_dict(), {"reward": 0.5, "actions": [1, 2], "t": torch.arange(3)}
        calls.clear()
        before = counter.counts_by_kind()
        recorder.record("model", model)
        recorder.record("optimizer", state)
        recorder.record("plain", plain)
        assert calls == [] and counter.counts_by_kind() == before
        torch.ones(1, device=DEVICE).item()
    assert calls and counter.counts_by_kind()["item"] == before.get("item", 0) + 1
    assert len(recorder.trajectory) == 3 and set(recorder.values) == {"model", "optimizer", "plain"}


def test_sync_inside_a_region_is_attributed_to_it_and_its_call_site() -> None:
    value = torch.ones(2)
    with SyncCounter() as counter:
        with hot_path("epoch_transfer"):
            value.sum().item()
        value.tolist()
    assert counter.counts_by_region() == {"<outside>": 1, "epoch_transfer": 1}
    (site,) = counter.sites("epoch_transfer")
    assert site.startswith("tests/tripwire/sync/test_sync_hot_path.py:")


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
