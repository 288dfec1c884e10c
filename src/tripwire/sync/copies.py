"""Host-bound copies, one rule whatever the spelling: which `.to(...)` and `copy_` calls count as a sync.

A `.to(...)` or `dst.copy_(src)` counts (`to_cpu`, `copy_to_cpu`, `..._nonblocking` with `non_blocking=True`) when
data really leaves an accelerator for the host, or, on a CPU run where every tensor is already on the host, when the
user's call names the host as its target: the target of `.to(...)` (positional or `device=`) is a CPU string
(`"cpu"`, `"cpu:0"`), a `torch.device("cpu"...)`, or a name whose last part says so (`cpu`, `host` or `pinned` in
it: `self.cpu_buffer`, `host_out`, `PINNED`), and the receiver of `copy_` is such a name. So a CPU machine counts
the copies that would stall a GPU run, while `.to(self.device)` (the run's own device, a no-op on CPU and a device
move on GPU) is not counted. The call's own source is read through the interpreter's instruction positions, once
per call site. `tripwire.sync.hooks` asks `to_kind` and `copy_kind` from its function mode.

Uploads that block the host (`to_device`, `copy_to_device`, `tensor_to_device`) are counted the same way: on an
accelerator from the tensors (a host source that is not `non_blocking`, or is from pageable memory and larger than
`STAGED_BYTES`: measured on an H200, a non-blocking pageable upload of 1 MiB returned with a kernel still running,
one of 16 MiB waited for it, docs/measurements.md; a blocking one waits, pinned or not); on a CPU run from the
call and from where the tensor came from. The hooks mark the tensors the user's code builds in host memory (a host
factory or `torch.tensor` without `device=`, and their place-keeping views and casts); a `.to(<a device by name>)`
or a `copy_` into a device buffer of a marked tensor without `non_blocking` counts, and so does a tensor built from
host data on the line that moves it (`torch.tensor(rows).to(device)`) unless that line pins it and is
non-blocking. A tensor moved to a device is a device tensor from then on (on a CPU run `.to` returns the tensor
itself), so the device-to-device copies after an upload do not count again. Whether memory is pinned cannot be seen
on a CPU run (`pin_memory()` needs an accelerator): a `non_blocking=True` copy of a tensor built earlier is taken as
the pinned one it is written for, so a dropped `pin_memory()` alone is seen on an accelerator only.

The same marks say where a read waits: a read of a marked tensor (`.item()`, `int(t)`, an index), or a data-dependent
op of marked tensors alone (`all_host_born`), reads host memory on a GPU run too and is not counted; a copy into a
marked tensor from one that is not is a copy to the host.
"""

from __future__ import annotations

import dis
import functools
import sys
import threading
import weakref
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

import numpy as np
import torch

from tripwire.common.lines import line_of
from tripwire.sync import kinds
from tripwire.sync import state as sync
from tripwire.sync.spelling import Keeping, device_of, forget_sources, module_move, spelled_names, spelling

__all__ = [
    "all_host_born",
    "at_subscript",
    "builder_data",
    "copied_here",
    "copy_kind",
    "default_device",
    "forget_host_born",
    "forget_sources",
    "forget_tensors",
    "host_born",
    "in_host_memory",
    "indexed_copy_kind",
    "keep",
    "lend",
    "made_by_user",
    "mark_host_born",
    "note_host_copy",
    "number_copy_kind",
    "tensor_kind",
    "to_kind",
    "type_of",
    "unchanged_host_copy",
]


def _device_type(value: object) -> str | None:
    """The device type a `.to()` argument names, or None when it names no device (nor one torch knows: the call
    itself then fails as it would without tripwire, the loop's error, not one of tripwire's)."""
    if isinstance(value, torch.device):
        return type_of(value)
    if isinstance(value, str):
        try:
            return torch.device(value).type
        except RuntimeError:
            return None
    if isinstance(value, torch.Tensor):
        return type_of(value.device)
    if isinstance(value, int) and not isinstance(value, bool):
        return "cuda"
    return None


def type_of(device: torch.device) -> str:
    """`device.type`, looked up: torch builds the string anew at every read (about 0.4 µs, through a C++ string
    stream), and the classifiers read a tensor's device type several times a call. A process sees a few devices."""
    known = _TYPES.get(device)
    if known is None:
        known = _TYPES[device] = device.type
    return known


_TYPES: dict[torch.device, str] = {}


# The tensor types whose attributes tripwire reads: a subclass's handler would see each read, which it never sees
# without tripwire, so a subclass is never marked nor asked
PLAIN = (torch.Tensor, torch.nn.Parameter)
_MODES_ON = torch._C._is_torch_function_mode_enabled
_NO_HANDLERS = torch._C.DisableTorchFunction
_BASE: Any = vars(torch._C.TensorBase)["_base"].__get__
PLACE: Any = vars(torch._C.TensorBase)["device"].__get__


def unseen(read: Any, tensor: object) -> Any:
    """`read(tensor)` (a property's getter: `_BASE`, `PLACE`) unseen by a function mode (a loop's own, which never
    sees tripwire's reads without tripwire)."""
    if not _MODES_ON():
        return read(tensor)
    with _NO_HANDLERS():
        return read(tensor)


# The key of a live object in the tables below: its address, as `id` gives it, but without the audit event `id` raises
# (`builtins.id`): a loop's own audit hook would run at every operator a counter follows, and, in the eager part of a
# compiled function, dynamo would compile the hook's frame, a frame the loop does not have
_key: Callable[[object], int] = object.__hash__

# Tensors built in host memory from host data or by a host factory (no `device=`) while a counter ran, by id: on a
# CPU run every tensor is on the host, so this is what tells a later `.to(device)` of one of them is an upload.
_host_born: dict[int, weakref.ref[torch.Tensor]] = {}


# The storages of the inference tensors among them, by id of the storage's object: a view of a tensor built inside
# `torch.inference_mode` is an inference tensor that keeps no `_base`, only the storage it shares (`self.vel[env_ids]`
# of legged_gym's state, computed inside rsl_rl's rollout). torch keeps one object per storage while the storage
# lives, so the entry ends with the storage, whichever of its tensors outlives the others.
_host_born_storages: dict[int, weakref.ref[Any]] = {}
# The marked tensors that are views themselves (`returns = returns[:, 0].cpu()` of a device tensor, on a CPU run the
# view itself), by id of their `_base`, which a view of one of them has as its own `_base`: such a view is host memory
# when its elements lie within a marked view's (`_within`). A view keeps its base alive, so the key stays its own.
_host_views: dict[int, list[weakref.ref[torch.Tensor]]] = {}
_STORAGE: Any = vars(torch._C.TensorBase)["untyped_storage"]
_IS_INFERENCE: Any = vars(torch._C.TensorBase)["is_inference"]
_VERSION: Any = vars(torch._C.TensorBase)["_version"].__get__


def _read_storage(tensor: torch.Tensor) -> Any:
    if tensor.layout is not torch.strided:
        return None
    try:
        return _STORAGE(tensor)
    except (RuntimeError, NotImplementedError):
        return None


def _storage_of(tensor: torch.Tensor) -> Any:
    """The storage object of a plain strided tensor, read unseen by a loop's function mode, or None (a sparse tensor,
    a tensor without storage)."""
    return unseen(_read_storage, tensor)


def _inference_storage(tensor: object) -> Any:
    """The storage of a plain inference tensor (built inside `torch.inference_mode`, its views keeping only that),
    or None for any other."""
    if type(tensor) not in PLAIN:
        return None
    if not (_IS_INFERENCE(tensor) if not _MODES_ON() else unseen(_IS_INFERENCE, tensor)):  # a call shorter: each mark
        return None
    assert isinstance(tensor, torch.Tensor)
    return _storage_of(tensor)


def mark_host_born(tensor: torch.Tensor) -> None:
    """Remember that `tensor` was built in host memory (until it is freed), and, for an inference tensor, its
    storage (until that is freed), which its views share."""
    key = _key(tensor)
    ref = _host_born.get(key)
    # marked for good over a copy's scoped entry, unless the copy is what is read now: a CPU run's `.long()` of a long
    # copy, or `copy = copy.cpu()`, is the device tensor itself, still read by its own name elsewhere
    if ref is None or (isinstance(ref, _Scoped) and ref() is not tensor):
        _host_born[key] = weakref.ref(tensor, functools.partial(_forget, key))
        storage = _inference_storage(tensor)
        if storage is not None and (at := _key(storage)) not in _host_born_storages:
            _host_born_storages[at] = weakref.ref(storage, functools.partial(_forget, at, table=_host_born_storages))
        base = None if type(tensor) not in PLAIN else _BASE(tensor) if not _MODES_ON() else unseen(_BASE, tensor)
        if base is not None and not ((ref := _host_born.get(_key(base))) is not None and ref() is base):
            views = _host_views.setdefault(_key(base), [])  # a view of memory not marked as a whole
            views.append(weakref.ref(tensor, functools.partial(_forget_view, _key(base))))


def _forget_view(base: int, ref: weakref.ref[torch.Tensor], table: dict[int, list[Any]] = _host_views) -> None:
    views = table.get(base)
    if views is not None:
        if ref in views:
            views.remove(ref)
        if not views:
            table.pop(base, None)


def _span(tensor: torch.Tensor) -> tuple[int, int] | None:
    """The first and one past the last element of its storage a strided tensor reaches ((0, 0): none; None: not a
    strided tensor, which has no strides to read)."""
    if tensor.layout is not torch.strided or tensor.is_nested:
        return None
    if tensor.numel() == 0:
        return 0, 0
    first = last = int(tensor.storage_offset())
    for size, stride in zip(map(int, tensor.size()), map(int, tensor.stride()), strict=True):
        if stride < 0:
            first += (size - 1) * stride
        else:
            last += (size - 1) * stride
    return first, last + 1


def _within(tensor: torch.Tensor, views: list[weakref.ref[torch.Tensor]]) -> bool:
    """Whether a view's elements lie within those of one of the marked `views` of its base (read unseen)."""
    span = unseen(_span, tensor)
    for ref in views:
        view = ref()
        around = unseen(_span, view) if span is not None and view is not None else None
        if span is not None and around is not None and around[0] <= span[0] and span[1] <= around[1]:
            return True
    return False


class _Scoped(weakref.ref[torch.Tensor]):
    """A `_host_born` entry for a CPU run's copy to the host, which is the device tensor itself there: called, it
    gives its tensor only where the user's code reads the copy (`_Lent`, `_Kept`), on the thread that made it; else
    None, as a dead reference would. Found out of scope for good, it leaves the table."""

    __slots__ = ("code", "frame", "thread")

    def __init__(self, tensor: torch.Tensor, callback: Callable[[Any], None], frame: FrameType) -> None:
        super().__init__(tensor, callback)  # type: ignore[call-arg]  # typeshed gives `ref` no `__init__`
        self.frame = _key(frame)  # by key: a reference would keep the caller's locals alive
        self.code = _key(frame.f_code)
        self.thread = threading.get_ident()

    def __call__(self) -> torch.Tensor | None:
        tensor = super().__call__()
        if tensor is None or threading.get_ident() != self.thread:
            return None
        inside = self._reads_copy()
        if inside:
            return tensor
        if inside is None and _host_born.get(_key(tensor)) is self:  # over: the caller's tensor again
            _host_born.pop(_key(tensor), None)  # never raises, should another thread have dropped it
        return None

    def _reads_copy(self) -> bool | None:
        """Whether the code running now reads the copy: True, False, or None once it never can again."""
        raise NotImplementedError


class _Lent(_Scoped):
    """A copy passed straight to a call (`lend`): host memory while the user's code reading it runs inside a call made
    by the lending statement."""

    __slots__ = ("first", "last")

    def __new__(
        cls, tensor: torch.Tensor, callback: Callable[[Any], None], frame: FrameType, lines: tuple[int, int]
    ) -> _Lent:
        return super().__new__(cls, tensor, callback)

    def __init__(
        self, tensor: torch.Tensor, callback: Callable[[Any], None], frame: FrameType, lines: tuple[int, int]
    ) -> None:
        super().__init__(tensor, callback, frame)
        self.first, self.last = lines

    def _reads_copy(self) -> bool | None:
        return sync.inside_call_of(self.frame, self.code, self.first, self.last)


class _Kept(_Scoped):
    """A copy kept under a local name (`keep`): host memory where the keeping function's line reading it spells that
    name and none the device tensor was read from (`cpus[i].tolist()`, not `accums[i].tolist()`), or passes it so to
    a function of the user's (`listed(cpus)`), while that function runs."""

    __slots__ = ("hows",)

    def __new__(cls, tensor: torch.Tensor, callback: Callable[[Any], None], frame: FrameType, how: Keeping) -> _Kept:
        return super().__new__(cls, tensor, callback)

    def __init__(self, tensor: torch.Tensor, callback: Callable[[Any], None], frame: FrameType, how: Keeping) -> None:
        super().__init__(tensor, callback, frame)
        # each name the function keeps a copy under (`first = x.cpu()`, then `pair = (x.cpu(), y)`)
        self.hows: tuple[Keeping, ...] = (how,)

    def _reads_copy(self) -> bool | None:
        found = sync.calling(self.frame, self.code)
        if found is None:
            return None  # the keeping function has returned
        keeper, below = found
        if below is False:  # through torch to the user's code (a module's `forward`): the keeper's line not read
            return False
        names = spelled_names(keeper)  # its line reading, or its call of the user's code reading
        return any(how.name in names and names.isdisjoint(how.device) for how in self.hows)


def lend(tensor: torch.Tensor, frame: FrameType, lines: tuple[int, int]) -> None:
    """On a CPU run, a counted copy to the host (`frame`'s call) passed straight to another call, at `lines`
    (`sum_tree.update_ids(data_ids.cpu())`, ElegantRL's prioritized replay: `spelling.passes_on`): host memory to the
    code that call runs, as the copy is on a GPU run, and not to the caller, for whom it is the device tensor itself
    (copied again on the next pass of a loop). Not for a tensor marked for good."""
    found = _scoped_entry(tensor)
    if found is None:
        return
    key, ref = found
    if isinstance(ref, _Lent) and _same_scope(ref, frame) and (ref.first, ref.last) == lines:
        return  # lent by the same line of the same call again (a loop's next pass)
    _host_born[key] = _Lent(tensor, functools.partial(_forget, key), frame, lines)


def keep(tensor: torch.Tensor, frame: FrameType, how: Keeping) -> None:
    """On a CPU run, a counted copy to the host kept under a local name of `frame`'s function (`spelling.keeps`:
    `cpus = [a.cpu() for a in accums]`, the original trainer's validation, before `cpus[i].tolist()`): host memory
    where that function's lines read it by that name, as the copy is on a GPU run, and the device tensor itself where
    they read it by its own (`accums[i]`). Not for a tensor marked for good."""
    found = _scoped_entry(tensor)
    if found is None:
        return
    key, ref = found
    if isinstance(ref, _Kept) and _same_scope(ref, frame):  # the same call keeps it again, or by another name
        if how not in ref.hows:
            ref.hows = (*ref.hows, how)
        return
    _host_born[key] = _Kept(tensor, functools.partial(_forget, key), frame, how)


def _scoped_entry(tensor: torch.Tensor) -> tuple[int, _Scoped | None] | None:
    """For `lend` and `keep`: `tensor`'s key with its live scoped entry (None when it has none), or None when it
    gets none (a subclass, or a tensor marked for good). The entry is read as a plain reference: its own answer is
    where the code reads, not whether it is the tensor's."""
    if type(tensor) not in PLAIN:
        return None
    key = _key(tensor)
    ref = _host_born.get(key)
    if ref is None or weakref.ref.__call__(ref) is not tensor:
        return key, None
    return (key, ref) if isinstance(ref, _Scoped) else None


def _same_scope(ref: _Scoped, frame: FrameType) -> bool:
    return (ref.frame, ref.code, ref.thread) == (_key(frame), _key(frame.f_code), threading.get_ident())


def forget_tensors() -> None:
    """The last counter stopped: forget which tensors were host memory, host copies, views of them and moved by a
    module's move. A later recording knows only what it sees, as the first did (a tensor made before it is the
    device's), whatever the loop did with these between the two (on a GPU run, `obs = obs.to(device)` between
    recordings made a CUDA tensor of a host one, whose reads a mark left behind hid)."""
    _host_born.clear()
    _host_born_storages.clear()
    _host_views.clear()
    _device_resident.clear()
    _host_copies.clear()


def _forget(key: int, _ref: object, table: dict[int, weakref.ref[Any]] = _host_born) -> None:
    table.pop(key, None)  # the table bound early: this may run at interpreter exit, after module globals are gone


def forget_host_born(tensor: object) -> None:
    """`tensor` now stands for a device tensor (a CPU run's `.to(device)` returns the tensor itself): not host memory
    from here on, nor when it is a view of host memory (`_resident` outranks its `_base`), nor its inference views,
    nor the views of its elements when it is a marked view itself."""
    if not isinstance(_host_born.get(_key(tensor)), _Kept):  # a kept copy is read by its own name still
        _host_born.pop(_key(tensor), None)
    if isinstance(tensor, torch.Tensor):
        _make_resident(tensor)
        storage = _inference_storage(tensor) if _host_born_storages else None
        if storage is not None:
            _host_born_storages.pop(_key(storage), None)
        base = unseen(_BASE, tensor) if _host_views and type(tensor) in PLAIN else None
        views = _host_views.get(_key(base)) if base is not None else None
        for ref in [ref for ref in views or () if ref() is tensor]:
            _forget_view(_key(base), ref)


def _inference_view_of_host_memory(tensor: torch.Tensor) -> bool:
    """Whether an inference tensor shares the storage of an inference tensor built in host memory: its view, which
    keeps no `_base` (`host[1]`, `host[ids]`'s target inside a rollout under `torch.inference_mode`)."""
    storage = _inference_storage(tensor)
    if storage is None or _resident(tensor):
        return False
    ref = _host_born_storages.get(_key(storage))
    return ref is not None and ref() is storage


def made_by_user(depth: int) -> bool:
    """Whether the torch call being classified was made by the user's code, not by torch on its behalf (`Module.to`
    moving the parameters a library built): `depth` frames up is the frame that made the call."""
    return not sys._getframe(depth + 1).f_code.co_filename.startswith(sync.skip_prefixes())


def host_born(tensor: Any) -> bool:
    """Whether `tensor` was marked by `mark_host_born` (the same object, still alive), or is a view of one (`t[i]`,
    `t.split(...)`: a view's `_base` is the tensor it views)."""
    ref = _host_born.get(_key(tensor))
    if ref is not None and ref() is tensor:
        return True
    if not (_host_born and type(tensor) in PLAIN):  # a subclass's `_base` would reach its `__torch_function__`
        return False
    # every op asks: `unseen` and `_resident` written out, a call shorter each (`tensor` is a plain tensor here)
    base = _BASE(tensor) if not _MODES_ON() else unseen(_BASE, tensor)
    if base is None:  # not a view, or an inference tensor's view, which keeps only the storage it shares
        return bool(_host_born_storages) and _inference_view_of_host_memory(tensor)
    ref = _device_resident.get(_key(tensor))
    if ref is not None and ref() is tensor:  # a view the run moved to the device (the same object on CPU)
        return False
    ref = _host_born.get(_key(base))
    if ref is not None and ref() is base:
        return True
    views = _host_views.get(_key(base)) if _host_views else None
    return views is not None and _within(tensor, views)


def all_host_born(args: tuple[Any, ...]) -> bool:
    """Whether an op's tensor arguments (one level into a list or tuple too: `index`'s indices) are all host-built,
    and there is one: such an op reads host memory on a GPU run too, and waits for nothing."""
    found = False
    for arg in args:  # written out, not as one loop over `(arg,)`: a tuple fewer per argument of every op
        if isinstance(arg, torch.Tensor):
            if not host_born(arg):
                return False
            found = True
        elif isinstance(arg, (list, tuple)):
            for item in arg:
                if isinstance(item, torch.Tensor):
                    if not host_born(item):
                        return False
                    found = True
    return found


def to_kind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """Kind of a `Tensor.to(...)` call: `to_cpu`/`to_cpu_nonblocking` for a host-bound copy, `to_device` for a
    host-to-device copy that blocks the host, else None.

    Host-bound: a copy counts when it really leaves an accelerator (source not on the CPU), or, on a CPU run, when
    the call names the host as its target (module docstring: a deliberate move to the host, which would sync on
    CUDA; counted on CPU too so CPU-only CI sees it) and the tensor is not host memory already. A move to a device the
    tensor is already on by another name (an env's device on a CPU run, or torch's own `.to(device)` calls inside e.g.
    `clip_grad_norm_`) is a no-op and does not count; on a run that uses an accelerator, a host tensor's move to the
    host is nothing either, whatever the line says.

    Host-to-device: a blocking copy from host memory, or a `non_blocking` one from pageable memory larger than
    `STAGED_BYTES`, blocks the host until the device's queue drains. On an accelerator that is read from the tensors
    (`upload_waits`); on a CPU run, where the target is the CPU too, from the call's source: a tensor built from host
    data on that line (`torch.tensor(values).to(self.device)`) and moved to a named device counts, unless the move is
    `non_blocking=True` and the line pins it (`.pin_memory()`) or it is no larger than `STAGED_BYTES`; so does
    a host-built one (or a view of one), and each parameter and buffer of a module the user's line moves
    (`model.to(device)`: torch moves them one by one) that is not on the device yet.
    """
    raw_target: object = kwargs.get("device")
    non_blocking = bool(kwargs.get("non_blocking", False))
    for arg in args[1:]:
        if raw_target is None and not isinstance(arg, (bool, torch.dtype)):
            raw_target = arg
        elif isinstance(arg, bool):
            non_blocking = non_blocking or arg
            break
    target = _device_type(raw_target) if raw_target is not None else None
    source = args[0]
    place = type_of(source.device) if isinstance(source, torch.Tensor) else None
    on_host = place == "cpu"
    if target not in (None, "cpu", "meta"):  # a real device: read the tensors
        return kinds.TO_DEVICE if on_host and upload_waits(source, non_blocking) else None
    if target != "cpu":
        return None
    host_bound = kinds.TO_CPU_NONBLOCKING if non_blocking else kinds.TO_CPU
    if place not in (None, "cpu", "meta"):  # it leaves an accelerator
        return host_bound
    if accelerator_in_use():  # the tensors say where they are: a host tensor moved to the host moves nothing
        return None
    born = host_born(source)
    if isinstance(raw_target, torch.Tensor) and host_born(raw_target):  # `x.to(other)`: other's place, host memory
        return None if born else host_bound
    caller = sys._getframe(3)  # the frame that made the call: past this, `watched_call` and the mode or stand-in
    by_user = not caller.f_code.co_filename.startswith(sync.skip_prefixes())
    if isinstance(raw_target, str) and not by_user:  # torch's own line: a string is the place it means
        return None if born else host_bound
    if caller.f_code is _MODULE_CONVERT:  # torch's `Module.to` moving one of the module's tensors
        return _module_move_kind(source)
    if caller.f_code is _LOAD_INTO_OPTIMIZER:  # torch's `Optimizer.load_state_dict` moving a value to its parameter
        if not _loaded_onto_device(source, caller.f_locals.get("param")):
            return None
        forget_host_born(source)  # what `.to` returns (on a CPU run, the tensor itself) is device state from here on
        return None if non_blocking else kinds.TO_DEVICE
    if not by_user and not isinstance(raw_target, str):  # torch's own `t.to(other.device)`: where `other` is
        kind = _to_where_it_is(source, caller, born, host_bound, non_blocking)
        if kind is not _UNKNOWN:
            return kind
    # the user's line: the caller itself when it is the user's (one walk of the stack a call, not two)
    spelled = spelling("to", sync.site_frame(caller) if by_user else None)
    # a string the line holds in a name (`device = "cuda" if ... else "cpu"`) is a device; one it spells is the host
    if spelled.target_is_host or (isinstance(raw_target, str) and not spelled.device_named):
        return None if born else host_bound
    if not (on_host and spelled.device_named):
        return None
    if spelled.built_on_host:  # built right there: pageable unless the line pins it, and its size is known
        uploaded = not non_blocking or (not spelled.pinned and _past_staging(source))
    else:
        # built earlier in host memory: whether it was pinned is decided on the accelerator (`pin_memory()` needs
        # one), so a `non_blocking=True` copy is taken as the pinned one it is written for; without it, it counts
        uploaded = not non_blocking and born and by_user
    forget_host_born(source)  # what `.to` returns (on a CPU run, the tensor itself) is a device tensor from here on
    return kinds.TO_DEVICE if uploaded else None


_UNKNOWN = "unknown"  # `_to_where_it_is` cannot tell


def _to_where_it_is(
    source: torch.Tensor, caller: FrameType, born: bool, host_bound: str, non_blocking: bool
) -> str | None:
    """A move torch's own code makes to where another tensor is (`pack_padded_sequence`'s
    `sorted_indices.to(input.device)`, host indices to the input's device), on a CPU run: to the host when that tensor
    is host memory (a download of device memory, nothing of host memory), else to the device (an upload of host
    memory, blocking unless `non_blocking`; nothing of device memory). The other tensor is read from torch's frame, a
    call that returns at once. `_UNKNOWN` when the line does not move to a name's `.device`."""
    name = device_of(caller)
    other = caller.f_locals.get(name) if name else None
    if not isinstance(other, torch.Tensor):
        return _UNKNOWN
    if in_host_memory(other):
        return None if born else host_bound
    if not born:
        return None
    forget_host_born(source)  # what `.to` returns (on a CPU run, the tensor itself) is a device tensor from here on
    return None if non_blocking else kinds.TO_DEVICE


def _module_move_kind(tensor: torch.Tensor) -> str | None:
    """One tensor of a module the user's line moves (`model.to(device)`), on a CPU run: an upload of pageable memory
    (a module's tensors are never pinned) unless the line names the host or the tensor was moved to the device
    before; from here on it is there."""
    spelled = module_move()
    if not spelled.device_named or spelled.target_is_host:
        return None
    if _resident(tensor) and not host_born(tensor):
        return None
    _make_resident(tensor)
    forget_host_born(tensor)
    return kinds.TO_DEVICE


# torch's own `Module.to` moves each parameter and buffer through this nested function: a call made there is the
# module's move, on the user's behalf
_MODULE_CONVERT: CodeType | None = next(
    (
        const
        for const in torch.nn.Module.to.__code__.co_consts
        if isinstance(const, CodeType) and const.co_name == "convert"
    ),
    None,
)
# torch's own code that puts a loaded state into a module's or an optimizer's tensors: `Module.load_state_dict`
# copies each entry into its parameter or buffer (`param.copy_(input_param)`), `Optimizer.load_state_dict` moves each
# state tensor to its parameter's place (`value.to(device=param.device)`; an Adam `step` only in a fused or capturable
# group). On a GPU, from host memory, each is a blocking upload; on a CPU run the line is torch's, not the user's.
_LOAD_INTO_MODULE: CodeType = torch.nn.Module._load_from_state_dict.__code__
_LOAD_INTO_OPTIMIZER: CodeType | None = getattr(
    getattr(torch.optim.Optimizer, "_process_value_according_to_param_policy", None), "__code__", None
)


def in_host_memory(tensor: torch.Tensor) -> bool:
    """Whether a CPU run's tensor is host memory on a GPU run too: built there while the counter ran (or loaded there:
    `saved.loaded_on_host`), or a counted copy to the host nothing has written to since."""
    return host_born(tensor) or unchanged_host_copy(tensor)


def _loaded_onto_device(source: torch.Tensor, place: object) -> bool:
    """On a CPU run, whether torch putting loaded state `source` into a module's or optimizer's tensor (`place`: the
    parameter or buffer it lands in, or the parameter whose place it takes) uploads it: the state is host memory and
    the parameter is not (a module moved to the device, or built before the counter ran)."""
    return in_host_memory(source) and not (isinstance(place, torch.Tensor) and host_born(place))


# Tensors a module move put on the device, by id (a CPU run's move leaves the same object): moved again, not counted
_device_resident: dict[int, weakref.ref[torch.Tensor]] = {}


def _resident(tensor: torch.Tensor) -> bool:
    ref = _device_resident.get(_key(tensor))
    return ref is not None and ref() is tensor


def _make_resident(tensor: torch.Tensor) -> None:
    key = _key(tensor)
    if key not in _device_resident:
        _device_resident[key] = weakref.ref(tensor, functools.partial(_forget, key, table=_device_resident))


# On a CPU run, the results of counted copies to the host (`.cpu()`, `.to("cpu")`, a `copy_` into a host buffer), by
# id, with their version counter then: the same object as the tensor copied (`.cpu()` of a host tensor returns it),
# so not host-born (a later read of the tensor itself waits on a GPU), but what `torch.save` of it would write from
# host memory on a GPU run too, while nothing has written to it since (`unchanged_host_copy`).
_host_copies: dict[int, tuple[weakref.ref[torch.Tensor], int, tuple[int, int, int]]] = {}


def _statement(frame: FrameType | None = None) -> tuple[int, int, int]:
    """Where the user's code runs now: its frame (`frame`, when the caller has found it already), its code and its
    line, by id (no reference kept; the line looked up, not decoded: every host copy asks)."""
    if frame is None:
        frame = sync.user_frame(2)
    return (0, 0, 0) if frame is None else (_key(frame), _key(frame.f_code), line_of(frame) or 0)


def note_host_copy(tensor: object, frame: FrameType | None = None) -> None:
    """Remember that `tensor` is a counted copy to the host, as it is now and where the user's statement made it (a
    CPU run; a subclass is never read). `frame`: the user's frame running that statement, when the caller has found
    it (`_statement`)."""
    if type(tensor) in PLAIN and not accelerator_in_use():
        assert isinstance(tensor, torch.Tensor)
        key = _key(tensor)
        ref = weakref.ref(tensor, functools.partial(_forget_copy, key))
        _host_copies[key] = (ref, _version(tensor), _statement(frame))


def _version(tensor: torch.Tensor) -> int:
    """`tensor`'s version counter, or -1 for an inference tensor, which keeps none (reading it raises): a copy made
    inside `torch.inference_mode` (the original esper-lite's `values_tensor.cpu().tolist()`) is taken as unchanged
    while it lives, since a write to it cannot be seen."""
    if _MODES_ON():
        return -1 if unseen(_IS_INFERENCE, tensor) else unseen(_VERSION, tensor)
    return -1 if _IS_INFERENCE(tensor) else _VERSION(tensor)  # `unseen`'s reads written out: every host copy asks


def _forget_copy(key: int, _ref: object, table: dict[int, Any] = _host_copies) -> None:
    table.pop(key, None)


def unchanged_host_copy(tensor: torch.Tensor) -> bool:
    """Whether `tensor` is a counted copy to the host nothing has written to since (`note_host_copy`)."""
    entry = _host_copies.get(_key(tensor))
    return entry is not None and entry[0]() is tensor and entry[1] == _version(tensor)


def copied_here(tensor: torch.Tensor) -> bool:
    """Whether a CPU run's tensor is host memory to a copy into or out of it: built there (`host_born`), or a counted
    copy to the host made by the statement running now (`dev[i] = x.cpu()`, a round trip that uploads on a GPU). A
    copy an earlier statement made is, on a CPU run, the device tensor itself, which later lines write from and into
    as the device tensor it is on a GPU: torch-ac steps its environments with `action.cpu().numpy()` and then stores
    `self.actions[i] = action`, a copy between device tensors (counted as an upload until this rule, once a step). A
    save keeps the wider rule (`in_host_memory`): what it writes of such a copy is host memory on a GPU too."""
    if host_born(tensor):
        return True
    return bool(_host_copies) and unchanged_host_copy(tensor) and _host_copies[_key(tensor)][2] == _statement()


def accelerator_in_use() -> bool:
    """Whether this process runs on an accelerator (CUDA started): then where a tensor is tells a copy, not a line.
    `torch.cuda.is_initialized()` as torch writes it, a Python call shorter: most watched calls ask."""
    return bool(_CUDA._initialized and not _CUDA_IN_BAD_FORK())


_CUDA = torch.cuda
_CUDA_IN_BAD_FORK = torch.cuda._is_in_bad_fork


def default_device() -> torch.device | None:
    """The default device a factory without `device=` builds on (the innermost `with torch.device(...)`, or
    `torch.set_default_device`'s), or None when none is set."""
    if not _MODES_ON():
        return None
    from torch.utils._device import DeviceContext

    for at in reversed(range(torch._C._len_torch_function_stack())):
        mode = torch._C._get_function_stack_at(at)
        if type(mode) is DeviceContext:
            return mode.device  # a torch.device (DeviceContext makes one)
    return None


def builder_data(args: tuple[Any, ...], kwargs: dict[str, Any]) -> object:
    """The data a builder was handed: its first argument, or `data=` (`torch.tensor`, `as_tensor`) or `obj=`
    (`torch.asarray`)."""
    if args:
        return args[0]
    return kwargs["data"] if "data" in kwargs else kwargs.get("obj")


def tensor_kind(args: tuple[Any, ...], kwargs: dict[str, Any], builder: str) -> str | None:
    """Kind of `torch.tensor(data, device=...)` / `torch.as_tensor(...)`: `tensor_to_device` when host data (a list,
    a number, an array) is copied to a device, which blocks the host; on a CPU run, when the `device=` the call
    names is not the host (read from its source)."""
    device = kwargs.get("device")
    data = builder_data(args, kwargs)
    if isinstance(data, torch.Tensor) or (type(data) in (list, tuple) and not data):  # a tensor, or nothing to copy
        return None
    if device is None:  # built where a default device says: `with torch.device(...)`, `torch.set_default_device`
        default = default_device()
        if default is None or default.type == "meta":
            return None
        # on a CPU run the loop's default device is the device a GPU run sets there (as `explicit._host_built` reads
        # it); on an accelerator, where it is: a BatchNorm built in `with torch.device("cuda")` uploads its counter
        return kinds.TENSOR_TO_DEVICE if default.type != "cpu" or not accelerator_in_use() else None
    target = _device_type(device)
    if target not in (None, "cpu", "meta"):
        return kinds.TENSOR_TO_DEVICE
    if target != "cpu" or accelerator_in_use():
        return None
    if _placed_by_default_device():  # the function mode sees the `device=` a default device added: as above
        return kinds.TENSOR_TO_DEVICE
    return kinds.TENSOR_TO_DEVICE if spelling(builder).device_named else None


def _placed_by_default_device() -> bool:
    """Whether the call being classified was made by a default device's handler (`DeviceContext`), which adds its
    device to a factory called without one: a function mode below it sees the call with `device=`. A few frames up:
    past this, the classifier, `watched_call` and the mode."""
    from torch.utils._device import DeviceContext

    handler = DeviceContext.__torch_function__.__code__
    frame: FrameType | None = sys._getframe(2)
    for _ in range(4):
        if frame is None:
            return False
        if frame.f_code is handler:
            return True
        frame = frame.f_back
    return False


# The largest non-blocking upload from pageable memory seen to return without waiting for the device (an H200, CUDA
# 13.0 driver 580: 1 MiB did, 16 MiB did not): the driver stages it in pinned memory of its own; past what that
# takes, the copy waits for the stream. Between the two sizes nothing was measured, so anything larger counts.
STAGED_BYTES = 1 << 20


def upload_waits(source: torch.Tensor, non_blocking: bool) -> bool:
    """Whether copying host tensor `source` to an accelerator blocks the host until the device's queue drains."""
    if not non_blocking:
        return True  # torch copies, then synchronizes the stream: pinned or not
    if source.is_pinned():
        return False
    return _past_staging(source)


def _past_staging(source: torch.Tensor) -> bool:
    """Whether a non-blocking upload of pageable `source` is larger than the driver is seen to stage (STAGED_BYTES)."""
    return source.numel() * source.element_size() > STAGED_BYTES


def copy_kind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """Kind of `dst.copy_(src)`: `copy_to_cpu` when a CPU tensor receives accelerator data, or, on a CPU run, when
    the destination is host memory (host-built, `mark_host_born`, or named as a host buffer by the user's line:
    module docstring) and the source is not; `copy_to_device` when host data lands in a device tensor and blocks
    the host: on an accelerator as `upload_waits` says, on a CPU run a host-built source copied
    without `non_blocking` into a destination that is not host memory."""
    destination, source = args[0], args[1] if len(args) > 1 else kwargs.get("src")
    non_blocking = bool(kwargs.get("non_blocking", args[2] if len(args) > 2 else False))
    if isinstance(source, NUMBERS):  # `lr.copy_(lrnow)`: see `number_copy_kind`
        # on a CPU run, not into a buffer the line names as the host's, nor for torch's own code
        named_host = not accelerator_in_use() and (spelling("copy_").target_is_host or not made_by_user(3))
        return None if named_host else number_copy_kind(destination, non_blocking)
    if not isinstance(source, torch.Tensor):
        return None
    from_place = type_of(source.device)
    if from_place == "meta":
        return None
    to_place = type_of(destination.device)
    if to_place not in ("cpu", "meta"):
        return kinds.COPY_TO_DEVICE if from_place == "cpu" and upload_waits(source, non_blocking) else None
    if to_place != "cpu":
        return None
    if from_place == "cpu" and accelerator_in_use():  # host to host
        return None
    host_bound = kinds.COPY_TO_CPU_NONBLOCKING if non_blocking else kinds.COPY_TO_CPU
    if from_place != "cpu":
        return host_bound
    if host_born(destination) or spelling("copy_").target_is_host:  # into host memory: from the device, or not
        # torch's own copy into a tensor it was handed copies what it computed beside it (`nn.init.orthogonal_` of a
        # module built on the host: `tensor.view_as(q).copy_(q)`), host memory on a GPU run too
        return None if host_born(source) or not made_by_user(3) else host_bound
    if sys._getframe(3).f_code is _LOAD_INTO_MODULE:  # torch's `Module.load_state_dict` copying into a parameter
        return kinds.COPY_TO_DEVICE if not non_blocking and _loaded_onto_device(source, destination) else None
    return kinds.COPY_TO_DEVICE if not non_blocking and host_born(source) and made_by_user(3) else None


def indexed_copy_kind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """Kind of an `aten::copy_` that torch's C++ makes for a Python call that is not itself a copy: `dst[i] = src`
    and `dst[a:b] = src` of a tensor (torch copies `src` into the view; a 0-d host tensor into a larger view is a
    `fill_` instead, nothing copied, nothing counted), or `Tensor.copy_` reached through the class, past the stand-in.
    The same rule as `copy_kind`'s without the user's line to read (the statement spells no copy):
    `copy_to_device` when host data lands in a device tensor and blocks the host, `copy_to_cpu` when device data
    lands in host memory. On a CPU run a source or destination is host memory when it was built there
    (`host_born`) or is a counted copy to the host (`x.cpu()`) made by the same statement (`copied_here`), as a GPU
    run would hold them; a destination built before the counter ran is taken for the device's, as `copy_kind` takes
    it."""
    destination: Any = args[0] if args else kwargs.get("self")
    source: Any = args[1] if len(args) > 1 else kwargs.get("src")
    non_blocking = bool(kwargs.get("non_blocking", args[2] if len(args) > 2 else False))
    if type(source) not in PLAIN or type(destination) not in PLAIN:  # a subclass's reads reach its handler
        number = isinstance(source, NUMBERS) and type(destination) in PLAIN  # `torch.Tensor.copy_(t, 2.5)`
        return number_copy_kind(destination, non_blocking) if number else None
    if accelerator_in_use():  # the tensors say where they are
        to_place, from_place = type_of(destination.device), type_of(source.device)
        if to_place == from_place or "meta" in (to_place, from_place):
            return None
        if to_place != "cpu":
            return kinds.COPY_TO_DEVICE if from_place == "cpu" and upload_waits(source, non_blocking) else None
        return kinds.COPY_TO_CPU_NONBLOCKING if non_blocking else kinds.COPY_TO_CPU
    if _made_from_a_number(source, destination):  # `dst[k] = 2.5`
        if in_host_memory(destination):  # made there, copied there: `losses[k] = loss.item()`
            return None
        # into the view torch made for the assignment (into the tensor itself, `t[...] = x`, `x` may be the loop's
        # 0-d tensor, held longer than `t`: not counted), and a subscript assignment's, not a graph's `aten.copy_`
        if (destination._is_view() or _element_of_an_inference_tensor(destination)) and at_subscript():
            return number_copy_kind(destination, non_blocking)
    if not (_host_born or _host_copies) or source.is_meta or destination.is_meta:  # nothing in host memory yet
        return None
    if copied_here(source):
        return None if non_blocking or copied_here(destination) else kinds.COPY_TO_DEVICE
    if not copied_here(destination):
        return None
    return kinds.COPY_TO_CPU_NONBLOCKING if non_blocking else kinds.COPY_TO_CPU


# A Python number given for a tensor's data: torch makes a 0-d tensor of it in host memory whenever the target is on
# an accelerator (`valueToTensor` for a CUDA tensor's `__setitem__`, a wrapped number for `copy_`'s `src`)
NUMBERS = (bool, int, float, complex, np.generic)


def number_copy_kind(destination: object, non_blocking: bool) -> str | None:
    """Kind of a Python number copied into `destination`: `dev[k] = 2.5` (one element: torch copies the 0-d tensor it
    made of the number into the 0-d view; into a larger view it fills, nothing copied), `lr.copy_(lrnow)`, and
    `dev[idx] = 2.5` through tensor indices (`index_put_` moves the 0-d value to the target's device first). On an
    accelerator each is a copy from host memory into the device that synchronizes the stream (`memcpy_and_sync`):
    `copy_to_device`, unless `non_blocking` (a few bytes of pageable memory, staged). On a CPU run the same into any
    destination that is not host memory; into host memory it is made there and copied there, nothing waits. A
    destination built inside `torch.inference_mode` is an inference tensor, whose views keep no `_base`: where such a
    view is, the storage it shares tells (`host_born`)."""
    if not isinstance(destination, torch.Tensor) or non_blocking or destination.is_meta:
        return None
    if accelerator_in_use():
        return None if destination.device.type == "cpu" else kinds.COPY_TO_DEVICE
    return None if copied_here(destination) else kinds.COPY_TO_DEVICE


def _subscript_codes() -> tuple[frozenset[int], int | None]:
    """The opcodes of a subscript read or store, and the `BINARY_OP` argument that is a subscript read where there is
    no `BINARY_SUBSCR` (CPython 3.14 folded it into `BINARY_OP`)."""
    codes = {dis.opmap[name] for name in ("BINARY_SUBSCR", "STORE_SUBSCR") if name in dis.opmap}
    operations = [name for name, _ in getattr(dis, "_nb_ops", ())]
    read = operations.index("NB_SUBSCR") if "BINARY_SUBSCR" not in dis.opmap and "NB_SUBSCR" in operations else None
    return frozenset(codes), read


_SUBSCRIPTS, _NB_SUBSCR = _subscript_codes()
_BINARY_OP = dis.opmap["BINARY_OP"]


def at_subscript() -> bool:
    """Whether the op being classified runs for a subscript in the user's code (`dst[k] = 2.5`, `b_obs[mb_inds]`):
    the user's frame is at a subscript read or store, where a compiled graph's `aten.copy_(buffer, add)` (a
    BatchNorm's step count) or a `loss.backward()` whose formulas index with saved indices is at a call."""
    frame = sync.user_frame(2)
    if frame is None:
        return False
    code, at = frame.f_code, frame.f_lasti
    known = sync._STATE.subscripts.get((id(code), at))
    if known is None:
        instructions = code.co_code  # built on each read
        op = instructions[at]
        found = op in _SUBSCRIPTS or (op == _BINARY_OP and instructions[at + 1] == _NB_SUBSCR)
        known = sync._STATE.subscripts[(id(code), at)] = (code, found)
    return known[1]


def _element_of_an_inference_tensor(tensor: torch.Tensor) -> bool:
    """Whether an inference tensor is one element of a larger one (`dst[k] = 2.5` inside `torch.inference_mode`, into
    a tensor built there): such a view keeps no `_base` (`_is_view()` is False), so it is told by a storage that holds
    more than its one element."""
    storage = _inference_storage(tensor)
    return storage is not None and storage.nbytes() > tensor.element_size()


def _made_from_a_number(source: torch.Tensor, destination: torch.Tensor) -> bool:
    """On a CPU run, whether `source` is the 0-d tensor torch made from a Python number for `dst[k] = 2.5` (torch
    copies it into a 0-d view; into a larger one it fills): made where the destination is on a CPU run, in host
    memory on a GPU run (`number_copy_kind`). Nothing of Python's holds it: it has no more references than the view
    torch made for the destination (both reached here the same way), where a tensor the loop assigns
    (`losses[k] = loss`, a download on a GPU; `dev[k] = x.sum()`, on the device) has the loop's own besides, and it
    is not a view (a one-element tensor assigned into a 0-d view is copied through a view torch makes of it). Into
    a device tensor the copy must be an assignment's too (`at_subscript`: a direct `aten.copy_` of two 0-d
    tensors, the destination held long, the source a fresh result, passes the count)."""
    return (
        source.dim() == 0
        and destination.dim() == 0
        and sys.getrefcount(source) <= sys.getrefcount(destination)
        and not source._is_view()
    )
