"""Which `.to(...)` and `copy_` calls count as host syncs: every spelling of a deliberate move to the host (what
would stall a GPU run), counted on a CPU run too; never a move to the run's own device or a dtype change."""

from __future__ import annotations

import gc
import runpy
import weakref
from pathlib import Path

import pytest
import torch

from tripwire.sync import hot_path
from tripwire.sync.counter import SyncCounter

pytestmark = pytest.mark.usefixtures("explicit_hooks")  # stand-ins and the function mode alike


def count_in_region(action: object) -> dict[str, int]:
    with SyncCounter() as counter, hot_path("region"):
        action()  # type: ignore[operator]
    return counter.counts_by_kind("region")


def test_to_cpu_string_counts_on_a_cpu_run() -> None:
    tensor = torch.ones(3)
    assert count_in_region(lambda: tensor.to("cpu")) == {"to_cpu": 1}


def test_non_blocking_to_cpu_string_counts_as_its_own_kind() -> None:
    tensor = torch.ones(3)
    assert count_in_region(lambda: tensor.to("cpu", non_blocking=True)) == {"to_cpu_nonblocking": 1}


def test_move_to_a_device_object_the_tensor_is_on_does_not_count() -> None:
    tensor = torch.ones(3)
    device = torch.device("cpu")
    assert count_in_region(lambda: tensor.to(device, non_blocking=True)) == {}


def test_dtype_conversion_does_not_count() -> None:
    tensor = torch.ones(3)
    assert count_in_region(lambda: tensor.to(torch.float64)) == {}


def test_clip_grad_norm_internals_do_not_count() -> None:
    layer = torch.nn.Linear(4, 2)
    layer(torch.ones(1, 4)).sum().backward()
    assert count_in_region(lambda: torch.nn.utils.clip_grad_norm_(layer.parameters(), 1.0)) == {}


def test_item_still_counts() -> None:
    tensor = torch.ones(1)
    assert count_in_region(lambda: tensor.item()) == {"item": 1}


def test_every_spelling_of_a_host_target_counts_on_a_cpu_run() -> None:
    tensor, cpu_buffer, host = torch.ones(3), torch.zeros(3), {"out": torch.zeros(3)}
    spellings = [
        lambda: tensor.to(torch.device("cpu")),
        lambda: tensor.to(torch.device("cpu", 0)),
        lambda: tensor.to("cpu:0"),
        lambda: tensor.to(device="cpu"),
        lambda: tensor.to(device=torch.device(type="cpu")),
        lambda: tensor.to(cpu_buffer),  # another tensor as the target, named as a host buffer
        lambda: tensor.to(host["out"], copy=True),
    ]
    for spelling in spellings:
        assert count_in_region(spelling) == {"to_cpu": 1}
    assert count_in_region(lambda: tensor.to(torch.device("cpu"), non_blocking=True)) == {"to_cpu_nonblocking": 1}


def test_a_copy_into_a_host_buffer_counts_and_one_between_device_tensors_does_not() -> None:
    tensor, pinned_rows, scratch = torch.ones(3), torch.zeros(2, 3), torch.zeros(3)
    assert count_in_region(lambda: pinned_rows[0].copy_(tensor)) == {"copy_to_cpu": 1}
    assert count_in_region(lambda: scratch.copy_(tensor)) == {}


def test_the_runs_own_device_and_other_tensors_do_not_count() -> None:
    tensor, other, device = torch.ones(3), torch.zeros(3), torch.device("cpu")
    for move in (lambda: tensor.to(device), lambda: tensor.to(other), lambda: tensor.to(device=other.device)):
        assert count_in_region(move) == {}


def test_a_host_copy_spelled_over_several_lines_is_read_whole() -> None:
    tensor = torch.ones(3)

    def pull() -> torch.Tensor:
        return tensor.to(
            torch.device("cpu"),
            copy=True,
        )

    assert count_in_region(pull) == {"to_cpu": 1}


def test_a_counter_keeps_no_code_of_the_loop_after_it_ends(tmp_path: Path) -> None:
    """The spelling of each `.to` is read once per call site and cached by its code object; the cache holds the code
    so that its id is not reused. Once the last counter ends, no code of the loop it watched may stay held (a long
    process, a test suite, would keep every recorded loop's code, and dynamo's generated code with its globals)."""
    loop = tmp_path / "loop.py"
    loop.write_text("def move(tensor, host_buffer):\n    return tensor.to(host_buffer)\n", encoding="utf-8")
    namespace = runpy.run_path(str(loop))
    tensor = torch.ones(3)  # built outside the counter: a device tensor as far as it knows
    with SyncCounter(root=tmp_path) as counter, hot_path("region"):
        namespace["move"](tensor, torch.zeros(1))
    assert counter.counts_by_kind("region") == {"to_cpu": 1}  # the spelling was read: the target's name
    code = weakref.ref(namespace.pop("move").__code__)
    gc.collect()
    assert code() is None, [type(holder).__name__ for holder in gc.get_referrers(code())]


LOCAL_HOST = """
import torch

device = "cpu"  # a script's own top: the run's device, as every move of it says


def to_host(outputs, own_device):
    device = "cpu"  # the host, by name, a few lines above its use (Sample Factory's inference worker)
    buffers = {device: None}
    buffers[device] = [value.to(device) for value in outputs]  # an index of the name binds nothing
    for key, value in enumerate(outputs):
        outputs[key] = value.to(device)
    return buffers


def either(outputs, own_device, flag):
    device = "cpu" if flag else own_device  # the run's device on one branch: not the host by name
    return [value.to(device) for value in outputs]


def rebound(outputs, own_device):
    device = "cpu"
    device = own_device
    return [value.to(device) for value in outputs]


def at_top(outputs):
    return [value.to(device) for value in outputs]
"""


def test_a_local_name_bound_to_the_host_alone_is_the_host(tmp_path: Path) -> None:
    """`device = "cpu"` inside the function that moves to `device` names the host as plainly as `.to("cpu")`: Sample
    Factory's inference worker moves its policy outputs so, 5 a step, which a CPU run took for moves to the run's
    device (and an output built in host memory for an upload). A name bound to anything else there, a loop's or a
    script's top-level `device`, is read as before."""
    path = tmp_path / "local_host.py"
    path.write_text(LOCAL_HOST, encoding="utf-8")
    loop = runpy.run_path(str(path))
    # built before the counter: the device's, as a policy's outputs are; a list each, as `to_host` stores its copies
    # back in the slots it read (host memory from then on: `spelling.rebinds`)
    outputs = [[torch.ones(2), torch.zeros(2)] for _ in range(4)]
    assert count_in_region(lambda: loop["to_host"](outputs[0], "cpu")) == {"to_cpu": 4}
    assert count_in_region(lambda: loop["to_host"]([torch.ones(2)], "cpu")) == {}  # host memory, built there
    assert count_in_region(lambda: loop["either"](outputs[1], "cpu", True)) == {}
    assert count_in_region(lambda: loop["rebound"](outputs[2], "cpu")) == {}
    assert count_in_region(lambda: loop["at_top"](outputs[3])) == {}
