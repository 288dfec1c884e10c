"""The synchronize entry points, `torch.distributed`'s collectives and `torch.save`, counted while a counter is active.

`torch.cuda.synchronize`, `torch.accelerator.synchronize`, `torch.cuda.Stream.synchronize` and
`torch.cuda.Event.synchronize` count their calls, restored on exit (also when the body raised): their code is swapped
(`tripwire.sync.swaps`), so a reference taken before the counter started (`sync = torch.cuda.synchronize`, a bound
`stream.synchronize` kept aside) is counted too; one written in C is patched on its owner instead. So are
`torch.cuda.empty_cache` and `torch.accelerator.empty_cache` (`cuda_empty_cache`, `accelerator_empty_cache`): the
caching allocator waits for the device's outstanding work before it frees its cached blocks, and `cudaFree` waits for
the whole device (a no-op on a CPU run, counted there as the wait the same line makes on a GPU). `torch.save` is
swapped the same way and counts one `save` per device storage it copies to the host (a wait each on a GPU:
`tripwire.sync.saved`); `torch.load` runs as it is, then counts one `load` per storage it copied to a device, and
what it loaded to the host is marked as host memory. `nn.Parameter` is swapped too, counting nothing: a parameter
made of host memory (a module built on the host while the counter runs) is marked as host memory as its data was.
A CUDA `GradScaler` a CPU run disabled counts the reads it makes on a GPU (`tripwire.sync.scalers`).

`torch.distributed` collectives and point-to-point calls (`COLLECTIVES`: `all_reduce`, `all_gather`,
`all_gather_object`, `broadcast`, `barrier`, `send`, `recv`, ...) are replaced, in `torch.distributed` and in
`torch.distributed.distributed_c10d`: each call is one sync point of kind `collective:<op>` (every rank waits there
for the others). What torch does inside one (the size exchange and `.item()` of `all_gather_object`) is not counted
again. A collective issued any other way (a reference taken before the counter started, `from torch.distributed
import all_reduce`; a `ProcessGroup` method called directly) is counted where it reaches the dispatcher, as a c10d
op, by the dispatch mode (`tripwire.sync.implicit`), which counts wherever a process group was running when the
counter started. One started before the group (a script that initialises it itself) counts collectives by the
patched functions alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from tripwire.sync import kinds
from tripwire.sync import state as sync
from tripwire.sync.copies import host_born, mark_host_born
from tripwire.sync.installation import Installation, call_counted, patch, swap_in
from tripwire.sync.saved import device_storages, exchanged_on_host, loaded_on_host, loaded_storages, sent_from_host
from tripwire.sync.scalers import watch_scalers

__all__ = ["COLLECTIVES", "counted_method", "patch_sync_functions"]

# torch.distributed entry points counted as `collective:<name>` while a counter is active (those the running torch
# has; a build without torch.distributed has none).
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "monitored_barrier",
    "broadcast",
    "broadcast_object_list",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "gather",
    "gather_object",
    "scatter",
    "scatter_object_list",
    "send",
    "recv",
    "isend",
    "irecv",
    "batch_isend_irecv",
    "send_object_list",
    "recv_object_list",
)


def _counted_call(kind: str, original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Replacement body for a patched sync function."""
    return call_counted(kind, original, args, kwargs)  # pass-through


# The collectives that pickle objects across ranks: (where the sent objects are, where the received ones land), each
# as (position, keyword). The received tensors are host memory when the sent ones are (`saved.exchanged_on_host`).
_OBJECT_COLLECTIVES: dict[str, tuple[tuple[int, str], tuple[int, str]]] = {
    "all_gather_object": ((1, "obj"), (0, "object_list")),
    "gather_object": ((0, "obj"), (1, "object_gather_list")),
    "broadcast_object_list": ((0, "object_list"), (0, "object_list")),
    "scatter_object_list": ((1, "scatter_object_input_list"), (0, "scatter_object_output_list")),
}


def _argument(args: tuple[Any, ...], kwargs: dict[str, Any], at: tuple[int, str]) -> Any:
    return args[at[0]] if len(args) > at[0] else kwargs.get(at[1])


def _counted_object_call(kind: str, name: str, original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """An object collective: counted, and, on a CPU run, what it hands back marked as host memory where what this
    rank sent was (`saved.sent_from_host`)."""
    sent_at, received_at = _OBJECT_COLLECTIVES[name]
    host = not sync._LOCAL.suppress and sent_from_host(_argument(args, kwargs, sent_at))
    result = call_counted(kind, original, args, kwargs)  # pass-through
    if host:
        exchanged_on_host(_argument(args, kwargs, received_at))
    return result


def counted_method(self: Any, kind: str, original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Replacement body for a patched sync method (bound through `functools.partialmethod`)."""
    return call_counted(kind, original, (self, *args), kwargs)  # pass-through


def patch_sync_functions(installation: Installation) -> None:
    """Count the explicit synchronize entry points (the function objects themselves, so a reference taken before the
    counter started is counted too) and every `torch.distributed` collective."""
    targets: list[tuple[Any, str, str]] = [(torch.cuda, "synchronize", kinds.CUDA_SYNCHRONIZE)]
    targets.append((torch.cuda, "empty_cache", kinds.CUDA_EMPTY_CACHE))
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "synchronize"):
        targets.append((accelerator, "synchronize", kinds.ACCELERATOR_SYNCHRONIZE))
    if accelerator is not None and hasattr(accelerator, "empty_cache"):
        targets.append((accelerator, "empty_cache", kinds.ACCELERATOR_EMPTY_CACHE))
    targets.append((torch.cuda.Stream, "synchronize", kinds.STREAM_SYNCHRONIZE))
    targets.append((torch.cuda.Event, "synchronize", kinds.EVENT_SYNCHRONIZE))
    for owner, name, kind in targets:
        function = vars(owner).get(name) if isinstance(owner, type) else getattr(owner, name)
        if swap_in(installation, function, functools.partial(_counted_swap, kind)):
            continue
        if isinstance(owner, type):  # a method written in C: patched on its class
            patch(installation, owner, name, functools.partialmethod(counted_method, kind, getattr(owner, name)))
        else:
            patch(installation, owner, name, functools.partial(_counted_call, kind, getattr(owner, name)))
    _patch_collectives(installation)
    swapped = [(torch.serialization.save, _counted_save), (torch.serialization.load, _watched_load)]
    swapped.append((torch.nn.Parameter.__new__, _watched_parameter))
    for function, counted in swapped:
        swap_in(installation, function, counted)
    watch_scalers(installation)


def _counted_save(original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`torch.save(obj, f)`: one `save` sync per device storage `obj` holds (`saved.device_storages`), each copied
    to the host before it is written; then the save, with recording suppressed."""
    if not sync._LOCAL.suppress:
        for _ in range(device_storages(args[0] if args else kwargs.get("obj"))):
            sync.deliver(kinds.SAVE)
    return call_counted(None, original, args, kwargs)  # pass-through


def _watched_load(original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`torch.load(f, map_location=...)`: run as it is (nothing suppressed: unpickling may run the loop's code), then
    one `load` sync per storage it copied to a device (`saved.loaded_storages`), and what it loaded to the host marked
    as host memory (`saved.loaded_on_host`), so a later save or read of it is not taken for the device's."""
    result = original(*args, **kwargs)  # pass-through
    if not sync._LOCAL.suppress:
        for _ in range(loaded_storages(result)):
            sync.deliver(kinds.LOAD)
        loaded_on_host(result)
    return result


def _watched_parameter(original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`nn.Parameter(data)`: a new tensor over `data`'s memory; marked as host memory when `data` is (a module built
    on the host: torch makes its weights with `torch.empty` and wraps them), so loading a state into it or reading it
    is not taken for the device's, and moving the module to a device counts each parameter's upload."""
    result = original(*args, **kwargs)  # pass-through
    data = args[1] if len(args) > 1 else kwargs.get("data")
    if data is not None and not sync._LOCAL.suppress and host_born(data):
        mark_host_born(result)
    return result


def _counted_swap(kind: str, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A swapped function's call (`tripwire.sync.swaps`): recorded, then run with recording suppressed."""
    return call_counted(kind, original, args, kwargs)  # pass-through


def _patch_collectives(installation: Installation) -> None:
    """Count every `torch.distributed` collective and point-to-point call as `collective:<name>`.

    Both namespaces are patched: user code calls `torch.distributed.<name>`, and torch's own helpers call the
    `distributed_c10d` module's globals (those nested calls are suppressed by the outer count, never doubled).
    """
    if not torch.distributed.is_available():
        return
    from torch.distributed import distributed_c10d

    for name in COLLECTIVES:
        original = getattr(distributed_c10d, name, None) or getattr(torch.distributed, name, None)
        if original is None:
            continue
        if name in _OBJECT_COLLECTIVES:
            counted = functools.partial(_counted_object_call, kinds.COLLECTIVE.of(name), name, original)
        else:
            counted = functools.partial(_counted_call, kinds.COLLECTIVE.of(name), original)
        replacement = functools.wraps(original)(counted)
        for owner in (torch.distributed, distributed_c10d):
            if getattr(owner, name, None) is original:
                patch(installation, owner, name, replacement)
