"""`torch.save` and `torch.load`: what a checkpoint costs the host on a GPU, counted on a CPU run too.

`torch.save` copies every accelerator storage it writes to the host first (`storage.cpu()`), one blocking copy each:
a `save` sync per distinct storage (`device_storages`). On an accelerator the tensors say where they are. On a CPU
run every tensor is on the host, so a tensor counts unless it is known to be host memory on every device:

- built in host memory while the counter ran (`copies.host_born`), or read by `torch.load(..., map_location="cpu")`
  (however the line spells the host: `loaded_on_host` marks what it returns);
- a counted copy to the host (`x.cpu()`, `{k: v.cpu() ...}`, `host.copy_(x)`) that nothing has written to since
  (`copies.unchanged_host_copy`): on a CPU run the same object as the tensor copied, so a save of the tensor itself,
  unchanged since its copy, is taken for a save of the copy;
- a generator's state (`get_state()`, `torch.get_rng_state()`: a CPU byte tensor whatever the generator's device,
  told by its dtype and size);
- an optimizer's `step` counter, which torch's optimizers keep in host memory unless the group is `fused` or
  `capturable` (read from the group: a saved `optimizer.state_dict()` or the optimizer itself).

`torch.load` onto an accelerator reads each storage into host memory and copies it to the device (`storage.cuda()`), a
blocking copy each: a `load` sync per distinct storage (`loaded_storages`). On an accelerator the loaded tensors say
where they are; on a CPU run the line says: none when it loads to the host (`map_location="cpu"`), every storage when
it names a device (`map_location=self.device`), and without `map_location` what a GPU run's save would have written
from a device (the rule above: an optimizer's host-kept `step` and a generator's state are loaded to the host).

A storage saved as such (what pickling a tensor does: `pickle.dumps(t)` saves its storage through `torch.save`)
counts on an accelerator, where its device is known; on a CPU run, where it cannot be told from a host tensor's, it
does not.

The saved object is walked through mappings, sequences, sets and objects' `__dict__` (a module saved whole), reading
nothing else of them: no property, no `__getstate__`, no loop code runs; at most `WALK_LIMIT` objects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from tripwire.sync.copies import PLAIN, accelerator_in_use, in_host_memory, mark_host_born
from tripwire.sync.spelling import spelling

__all__ = [
    "WALK_LIMIT",
    "device_storages",
    "exchanged_on_host",
    "loaded_on_host",
    "loaded_storages",
    "sent_from_host",
]

# The most objects one walk looks at (a model's state and its optimizer's: a few thousand)
WALK_LIMIT = 100_000
# What `get_state()` of a CPU generator returns: a byte tensor of this many elements (a CUDA generator's is smaller,
# and in host memory too; a CPU run has none)
_GENERATOR_SHAPE = tuple(torch.Generator().get_state().shape)
_ATOMS = (type, str, bytes, int, float, complex, bool, type(None), torch.dtype, torch.device)


def device_storages(obj: object) -> int:
    """How many distinct device storages `torch.save(obj)` copies to the host (module docstring)."""
    on_accelerator = accelerator_in_use()
    storages: set[tuple[str, int]] = set()
    with torch._C.DisableTorchFunction():  # a loop's own function mode never sees tripwire's reads
        for tensor in _tensors(obj, steps=on_accelerator):
            if not isinstance(tensor, torch.Tensor):  # a storage, saved as such (a device tensor pickled)
                if on_accelerator and tensor.device.type not in ("cpu", "meta"):
                    storages.add(_storage_key(tensor))
                continue
            place = tensor.device
            if place.type == "meta":
                continue
            if place.type == "cpu" and (on_accelerator or _host_memory(tensor)):
                continue
            storages.add(_storage_key(tensor))
    return len(storages)


def loaded_storages(result: object) -> int:
    """How many storages `torch.load` copied from host memory to a device to return `result` (module docstring), read
    before `loaded_on_host` marks what it loaded to the host."""
    if accelerator_in_use():  # its device storages, read from the tensors: what a save of it would copy back
        return device_storages(result)
    spelled = spelling("load")
    if spelled.target_is_host:
        return 0
    if not spelled.device_named:  # where it was saved
        return device_storages(result)
    with torch._C.DisableTorchFunction():
        return len({_storage_key(t) for t in _tensors(result, steps=True) if t.device.type != "meta"})


def _storage_key(tensor: Any) -> tuple[str, int]:
    """A tensor's or storage's place and storage address (its own id where it has no storage of its own)."""
    if not isinstance(tensor, torch.Tensor):
        return str(tensor.device), tensor.data_ptr()
    try:
        return str(tensor.device), tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # sparse, nested, a functional wrapper
        return str(tensor.device), id(tensor)


def loaded_on_host(result: object) -> None:
    """After `torch.load`: on a CPU run, mark every tensor it returned as host memory when the line loads to the host
    (`map_location="cpu"`, `torch.device("cpu")`, a name with `cpu` or `host` in it); a tensor loaded to a device by
    name (`map_location=self.device`) or where it was saved stays a device tensor."""
    if accelerator_in_use() or not spelling("load").target_is_host:
        return
    for tensor in _tensors(result, steps=True):
        if type(tensor) in PLAIN:  # not a storage, nor a subclass
            mark_host_born(tensor)


def sent_from_host(sent: object) -> bool:
    """Whether what this rank hands an object collective holds tensors, every one of them host memory on a GPU run too
    (the rule above), read before the call (on a CPU run: on an accelerator the received tensors say where they are)."""
    if accelerator_in_use():
        return False
    with torch._C.DisableTorchFunction():
        tensors = _tensors(sent, steps=True)
        return bool(tensors) and all(
            type(tensor) in PLAIN and tensor.device.type == "cpu" and _host_memory(tensor) for tensor in tensors
        )


def exchanged_on_host(received: object) -> None:
    """After an object collective (`all_gather_object`, `gather_object`, `broadcast_object_list`,
    `scatter_object_list`) whose sent objects were host memory (`sent_from_host`): mark the tensors it handed back
    as host memory. The objects are pickled and unpickled, so their tensors arrive where the sender kept them; every
    rank runs the same code, so this rank's objects stand for the others'. Without this a CPU run took them for
    device tensors: their move to the host was counted (this trainer's `stack_masks` of the envs' gathered masks,
    `flat.to(device)`, 12 `to_cpu` in e_distributed) where a GPU run's gathered masks are host tensors already."""
    for tensor in _tensors(received, steps=True):
        if type(tensor) in PLAIN:  # not a storage, nor a subclass
            mark_host_born(tensor)


def _host_memory(tensor: torch.Tensor) -> bool:
    """Whether a CPU run's tensor is in host memory on a GPU run too (module docstring)."""
    generator_state = tensor.dtype == torch.uint8 and tuple(tensor.shape) == _GENERATOR_SHAPE
    return generator_state or in_host_memory(tensor)


def _tensors(obj: object, steps: bool) -> list[Any]:
    """Every tensor and storage `obj` holds (module docstring), an optimizer's host-kept `step` counters left out
    unless `steps` (on an accelerator, where each tensor's place is read, or to mark everything loaded)."""
    found: list[Any] = []
    seen: set[int] = set()
    stack: list[object] = [obj]
    while stack and len(seen) < WALK_LIMIT:
        item = stack.pop()
        if id(item) in seen or isinstance(item, _ATOMS):
            continue
        seen.add(id(item))
        if isinstance(item, (torch.Tensor, torch.UntypedStorage, torch.TypedStorage)):
            found.append(item)
        elif isinstance(item, torch.optim.Optimizer):
            stack.extend(_optimizer_state(item, steps))
        elif isinstance(item, dict):
            if _is_optimizer_state(item) and not steps:
                stack.extend(_saved_optimizer_state(item))
            else:
                stack.extend(dict.values(item))
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        else:
            try:
                state = object.__getattribute__(item, "__dict__")
            except AttributeError:
                continue
            if isinstance(state, dict):
                stack.extend(state.values())
    return found


def _host_steps(group: dict[str, Any]) -> bool:
    """Whether torch keeps this group's `step` counters in host memory (not `fused`, not `capturable`)."""
    return not (group.get("fused") or group.get("capturable"))


def _is_optimizer_state(item: dict[Any, Any]) -> bool:
    groups = item.get("param_groups")
    return (
        isinstance(item.get("state"), dict)
        and isinstance(groups, list)
        and all(isinstance(group, dict) and "params" in group for group in groups)
    )


def _optimizer_parts(
    groups: list[dict[str, Any]], per_param: Callable[[Any], object], rest: Iterator[object], steps: bool
) -> Iterator[object]:
    """What an optimizer holds: its groups, each listed parameter's state (`per_param`; the `step` counters torch keeps
    in host memory left out unless `steps`), then `rest`."""
    for group in groups:
        host = _host_steps(group) and not steps
        yield from group.values()
        for param in group["params"]:
            per = per_param(param)
            if isinstance(per, dict):
                yield from (value for key, value in per.items() if not (host and key == "step"))
    yield from rest


def _saved_optimizer_state(item: dict[Any, Any]) -> Iterator[object]:
    """What a saved `optimizer.state_dict()` holds, its host-kept `step` counters left out."""
    state: dict[Any, Any] = item["state"]
    rest = (value for key, value in item.items() if key not in ("state", "param_groups"))
    return _optimizer_parts(
        item["param_groups"], lambda index: state.get(index) if isinstance(index, (int, str)) else None, rest, False
    )


def _optimizer_state(optimizer: torch.optim.Optimizer, steps: bool) -> Iterator[object]:
    """An optimizer saved whole: its groups, its per-parameter state (the host-kept `step` counters left out unless
    `steps`), and the rest of its attributes."""
    rest = (value for key, value in vars(optimizer).items() if key not in ("state", "param_groups"))
    return _optimizer_parts(optimizer.param_groups, optimizer.state.get, rest, steps)
