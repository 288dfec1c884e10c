"""`torch.save` of device tensors copies each storage to the host, one wait each on a GPU: counted as `save`; loading
one back onto a device copies each storage there (`load`), and so do a module's and an optimizer's `load_state_dict`
of a state loaded to the host (`copy_to_device`, `to_device`).

Before, a checkpoint written from a GPU's state counted nothing, on a CPU run or a GPU: skrl writes its agent's
modules and optimizer every `checkpoint_interval` steps from inside the loop, CleanRL and SB3 at the end. On a CPU run
a tensor counts unless it is host memory on a GPU run too: built there while the counter ran, loaded there
(`torch.load(..., map_location="cpu")`), a counted copy to the host nothing wrote to since, a generator's state, or an
optimizer's `step` counter that torch keeps there (not `fused`, not `capturable`). Run on a GPU (the device check's
test step), the same tests check the count read from the tensors' devices.
"""

from __future__ import annotations

import io
import pickle
import types
from collections.abc import Callable

import pytest
import torch
from torch.overrides import TorchFunctionMode

from tripwire.sync import hot_path
from tripwire.sync.counter import SyncCounter

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def saves(body: Callable[[], object]) -> int:
    """How many `save` syncs `body` makes in a hot-path region."""
    with SyncCounter() as counter, hot_path("region"):
        body()
    return counter.counts_by_kind("region").get("save", 0)


def written(obj: object) -> None:
    torch.save(obj, io.BytesIO())


def trained(**adam: bool) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).to(DEVICE)
    optimizer = torch.optim.Adam(model.parameters(), **adam)
    model(torch.randn(5, 4, device=DEVICE)).sum().backward()
    optimizer.step()
    return model, optimizer


def test_a_models_state_counts_one_save_per_device_storage() -> None:
    model, _ = trained(foreach=True)
    state = model.state_dict()
    # weight, bias; BatchNorm's weight, bias, running mean, running var, batches tracked
    assert saves(lambda: written(state)) == 7
    assert saves(lambda: written(model)) == 7  # the module saved whole: found through its `__dict__`
    assert saves(lambda: written({"a": state, "again": state, "view": state["0.weight"][0]})) == 7  # shared: once


def test_host_memory_is_not_a_wait() -> None:
    model, _ = trained(foreach=True)

    def host_copies() -> None:
        written({name: value.cpu() for name, value in model.state_dict().items()})
        written(torch.zeros(3))  # built in host memory
        written(torch.Generator().get_state())  # a generator's state is host memory on every device
        written(torch.get_rng_state())

    assert saves(host_copies) == 0


def test_a_tensor_written_to_after_its_host_copy_is_the_device_tensor_again() -> None:
    """On a CPU run `.cpu()` returns the tensor itself. Of a tensor that needs no gradient (`weight.detach()`) the
    copy is a tensor of its own over the same memory (`explicit.host_alias`), host memory wherever it is held, as on a
    GPU. Of a parameter it is the parameter: held where no name of the function's says it is the copy (an
    attribute), it stands for the host copy only while nothing writes to it. Kept under a local name, it is the copy
    wherever that name reads it, written to or not, as on a GPU (`copies.keep`), and the device tensor by its own."""
    model, _ = trained(foreach=True)
    weight = model[0].weight
    holder = types.SimpleNamespace()

    def detached_then_changed() -> None:
        holder.copy = weight.detach().cpu()
        written(holder.copy)
        with torch.no_grad():
            holder.copy.add_(1.0)  # on a CPU run the parameter's memory: written, still the copy
        written(holder.copy)

    def copied_then_changed() -> None:
        holder.copy = weight.cpu()
        written(holder.copy)
        with torch.no_grad():
            holder.copy.add_(1.0)  # on a CPU run the parameter itself: an optimizer step between copy and save
        written(holder.copy)

    def kept_then_changed() -> None:
        copy = weight.detach().cpu()
        with torch.no_grad():
            copy.add_(1.0)  # by the copy's name: the copy written, as on a GPU
        written(copy)
        written(weight)  # the parameter: a save of device memory

    assert saves(detached_then_changed) == 0
    assert saves(copied_then_changed) == (0 if DEVICE.type == "cuda" else 1)
    assert saves(kept_then_changed) == 1


def test_an_optimizers_step_counters_count_where_torch_keeps_them() -> None:
    """Adam keeps `step` in host memory unless fused or capturable; exp_avg and exp_avg_sq live with the parameter."""
    _, foreach = trained(foreach=True)
    assert saves(lambda: written(foreach.state_dict())) == 4 * 2  # 4 parameters, 2 moments each
    assert saves(lambda: written(foreach)) == 4 * 2 + 4  # saved whole: its parameters too
    _, fused = trained(fused=True)
    assert saves(lambda: written(fused.state_dict())) == 4 * 3  # the step counters on the device too


def test_what_is_loaded_to_the_host_is_host_memory_and_what_is_loaded_to_a_device_is_not() -> None:
    model, _ = trained(foreach=True)
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    device = DEVICE

    def loaded(how: Callable[[io.BytesIO], object]) -> Callable[[], None]:
        def body() -> None:
            buffer.seek(0)
            written(how(buffer))

        return body

    assert saves(loaded(lambda f: torch.load(f, map_location="cpu"))) == 0
    assert saves(loaded(lambda f: torch.load(f, map_location=torch.device("cpu")))) == 0
    assert saves(loaded(lambda f: torch.load(f, map_location=lambda storage, location: storage))) == 0
    assert saves(loaded(lambda f: torch.load(f, map_location=device))) == 7  # the run's device: a GPU on a GPU run
    assert saves(loaded(lambda f: torch.load(f))) == 7  # where it was saved: on a GPU run, the GPU


def uploads(body: Callable[[], object]) -> dict[str, int]:
    """The uploads (`load`, `copy_to_device`, `to_device`) `body` makes in a hot-path region, by kind."""
    with SyncCounter() as counter, hot_path("region"):
        body()
    kinds = ("load", "copy_to_device", "to_device")
    return {kind: n for kind, n in counter.counts_by_kind("region").items() if kind in kinds}


@pytest.mark.parametrize("adam", [{"fused": True}, {"foreach": True}], ids=["fused", "foreach"])
def test_a_checkpoint_loaded_from_the_host_into_a_module_and_its_optimizer_counts_each_upload(
    adam: dict[str, bool],
) -> None:
    """`model.load_state_dict` copies each entry into its parameter or buffer (`param.copy_`) and
    `optimizer.load_state_dict` moves each state tensor to its parameter's device: from host memory, a blocking upload
    each on a GPU. Before, a CPU run counted none of them (the copies are torch's lines), where a GPU run waited 19
    times here; a checkpoint loaded where it was saved (a device) uploads nothing."""
    model, optimizer = trained(**adam)
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, buffer)
    device = DEVICE

    def resumed(how: Callable[[io.BytesIO], dict[str, dict[str, object]]]) -> Callable[[], None]:
        def body() -> None:
            buffer.seek(0)
            state = how(buffer)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])

        return body

    # 7 entries of the model (BatchNorm's counter too); Adam's 2 moments of 4 parameters, and their `step` counters
    # where torch keeps them with the parameter (fused), not where it keeps them in host memory (foreach)
    moments = 4 * 3 if adam.get("fused") else 4 * 2
    from_host = resumed(lambda f: torch.load(f, map_location="cpu", weights_only=True))
    assert uploads(from_host) == {"copy_to_device": 7, "to_device": moments}
    # loaded to the device: `torch.load` copies each storage there, the step counters too; the loads copy nothing
    assert uploads(resumed(lambda f: torch.load(f, map_location=device, weights_only=True))) == {"load": 7 + 4 * 3}
    # where it was saved: a GPU run's foreach Adam kept its step counters in host memory, and they load there
    assert uploads(resumed(lambda f: torch.load(f, weights_only=True))) == {"load": 7 + moments}
    # after the optimizer's load its state is the device's: saved again, it is copied to the host again
    assert saves(lambda: written(optimizer.state_dict())) == moments


def test_a_module_built_in_host_memory_is_host_memory_until_it_is_moved() -> None:
    """CleanRL's evaluation builds its model, loads a state read to the host into it, then moves it: on a GPU the load
    copies host to host and the move uploads each tensor. torch makes a module's parameters through `nn.Parameter`,
    a new tensor over the memory `torch.empty` gave: marked as host memory as that was. torch's own initializers
    copy what they compute into it (`orthogonal_`: `tensor.view_as(q).copy_(q)`): host to host, no copy to the host."""
    model, _ = trained(foreach=True)
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    device = DEVICE

    def built_loaded_moved() -> None:
        buffer.seek(0)
        host = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
        torch.nn.init.orthogonal_(host[0].weight)
        host.load_state_dict(torch.load(buffer, map_location="cpu", weights_only=True))
        host[0].weight.tolist()  # a read of host memory: no wait on a GPU either
        host.to(device)  # each of its 7 tensors uploaded

    with SyncCounter() as counter, hot_path("region"):
        built_loaded_moved()
    assert counter.counts_by_kind("region") == {"to_device": 7}


def test_a_pickled_device_tensor_counts_on_a_gpu_where_its_storage_is_known_to_be_there() -> None:
    """`pickle.dumps(t)` saves `t`'s storage through `torch.save`: a wait on a GPU, counted there; on a CPU run a
    storage cannot be told from a host tensor's (docs/guardrails.md, limits)."""
    model, _ = trained(foreach=True)
    weight = model[0].weight.detach()
    assert saves(lambda: pickle.dumps(weight)) == (1 if DEVICE.type == "cuda" else 0)
    assert saves(lambda: written(weight.untyped_storage())) == (1 if DEVICE.type == "cuda" else 0)


def test_the_walk_reads_nothing_of_the_loop_a_function_mode_would_see() -> None:
    """The loop's own function mode sees torch.save's calls as it does without tripwire, none of tripwire's reads."""
    model, _ = trained(foreach=True)
    state = model.state_dict()

    class Seen(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[str] = []

        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            self.calls.append(getattr(func, "__name__", repr(func)))
            return func(*args, **(kwargs or {}))

    def seen() -> list[str]:
        with Seen() as mode:
            written(state)
        return mode.calls

    alone = seen()
    with SyncCounter():
        watched = seen()
    assert watched == alone


def test_a_load_to_the_host_copies_nothing_to_a_device_and_one_to_a_device_copies_each_storage() -> None:
    model, _ = trained(foreach=True)
    state = model.state_dict()
    buffer = io.BytesIO()
    torch.save({"model": state, "again": state, "rng": torch.get_rng_state()}, buffer)  # shared storages: once each
    device = DEVICE

    def loaded(how: Callable[[io.BytesIO], object]) -> Callable[[], None]:
        def body() -> None:
            buffer.seek(0)
            how(buffer)

        return body

    assert uploads(loaded(lambda f: torch.load(f, map_location="cpu"))) == {}
    assert uploads(loaded(lambda f: torch.load(f, map_location=lambda storage, location: storage))) == {}
    assert uploads(loaded(lambda f: torch.load(f, map_location=device))) == {"load": 7 + 1}  # the generator's too
    assert uploads(loaded(lambda f: torch.load(f))) == {"load": 7}  # a generator's state was saved from the host


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch's sync detector needs CUDA")
def test_torchs_detector_flags_each_load_tripwire_counts() -> None:
    model, _ = trained(foreach=True)
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    with SyncCounter(cuda_cross_check=True) as counter:
        torch.load(buffer, map_location=DEVICE)
    check = counter.cross_check()
    assert check is not None and check.ok, check and check.format()
    assert counter.counts_by_kind().get("load") == 7


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch's sync detector needs CUDA")
def test_torchs_detector_flags_each_save_tripwire_counts() -> None:
    model, _ = trained(foreach=True)
    state = model.state_dict()
    with SyncCounter(cuda_cross_check=True) as counter:
        written(state)
    check = counter.cross_check()
    assert check is not None and check.ok, check and check.format()
    assert counter.counts_by_kind().get("save") == 7
