"""Modules built on their device (`esper.kasmina.building.built_on`): the same numbers on CPU as a host build moved
there, the run's RNG streams untouched, and on CUDA no upload at all (that half needs a GPU and skips without one)."""

from __future__ import annotations

import pytest
import torch

from esper.kasmina import CNNHost, built_on, create_blueprint
from esper.leyline import BlueprintAction, get_task_spec
from esper.tolaria.devices import resolve_device
from tripwire.sync.counter import SyncCounter


def _host_build_moved(seed: int, device: torch.device) -> torch.nn.Module:
    """What germination did before: fork the host RNG, seed it, build on the host, move."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = create_blueprint(BlueprintAction.CONV_LIGHT, 16)
    return module.to(device)


def test_a_cpu_build_has_the_numbers_of_a_host_build_and_leaves_the_rng_as_it_was() -> None:
    torch.manual_seed(11)
    before = torch.get_rng_state()
    with built_on(torch.device("cpu"), 5):
        built = create_blueprint(BlueprintAction.CONV_LIGHT, 16)
    assert torch.equal(torch.get_rng_state(), before)
    reference = _host_build_moved(5, torch.device("cpu"))
    pairs = zip(built.state_dict().values(), reference.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    with built_on(torch.device("cpu"), 6):
        other = create_blueprint(BlueprintAction.CONV_LIGHT, 16)
    assert not all(torch.equal(a, b) for a, b in zip(built.state_dict().values(), other.state_dict().values()))


def test_a_host_moved_to_the_device_is_counted_and_one_built_there_is_not() -> None:
    """On CPU the counter reads a module's move to the run's device (`--device`, here cpu) as the uploads the GPU run
    makes; a build on the device makes none."""
    task = get_task_spec("cifar_baseline")
    device = resolve_device("cpu")  # the run's compute device, as the trainer resolves it
    with SyncCounter() as moved:
        _host_build_moved(3, device)
        with torch.random.fork_rng(devices=[]):
            CNNHost(task).to(device)
    with SyncCounter() as built, built_on(device, 3):
        create_blueprint(BlueprintAction.CONV_LIGHT, 16)
        CNNHost(task)
    assert moved.counts_by_kind().get("to_device", 0) > 0
    assert built.total == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a build on a CUDA device needs a GPU")
def test_a_cuda_build_is_on_the_device_reproducible_and_leaves_both_rngs_as_they_were() -> None:
    device = torch.device("cuda", torch.cuda.current_device())
    cpu_before, cuda_before = torch.get_rng_state(), torch.cuda.get_rng_state(device)
    with SyncCounter() as counter, built_on(device, 5):
        first = create_blueprint(BlueprintAction.CONV_LIGHT, 16)
    with built_on(device, 5):
        second = create_blueprint(BlueprintAction.CONV_LIGHT, 16)
    assert all(tensor.device == device for tensor in first.state_dict().values())
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), second.state_dict().values()))
    assert torch.equal(torch.get_rng_state(), cpu_before) and torch.equal(torch.cuda.get_rng_state(device), cuda_before)
    assert counter.counts_by_kind().get("to_device", 0) == 0
