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
accelerator from the tensors (a host source that is not both pinned and `non_blocking`); on a CPU run from the
call and from where the tensor came from. The hooks mark the tensors the user's code builds in host memory (a host
factory or `torch.tensor` without `device=`, and their place-keeping views and casts); a `.to(<a device by name>)`
or a `copy_` into a device buffer of a marked tensor without `non_blocking` counts, and so does a tensor built from
host data on the line that moves it (`torch.tensor(rows).to(device)`) unless that line pins it and is
non-blocking. A tensor moved to a device is a device tensor from then on (on a CPU run `.to` returns the tensor
itself), so the device-to-device copies after an upload do not count again. Whether memory is pinned cannot be seen
on a CPU run (`pin_memory()` needs an accelerator): a `non_blocking=True` copy of a tensor built earlier is taken as
the pinned one it is written for, so a dropped `pin_memory()` alone is seen on an accelerator only.
"""

from __future__ import annotations

import ast
import functools
import linecache
import sys
import weakref
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

import torch

from tripwire.sync import kinds
from tripwire.sync import state as sync
from tripwire.sync.spelling import HOST_WORDS, name_of, names_host

__all__ = [
    "copy_kind",
    "forget_host_born",
    "forget_sources",
    "host_born",
    "made_by_user",
    "mark_host_born",
    "tensor_kind",
    "to_kind",
]


def _device_type(value: object) -> str | None:
    """The device type a `.to()` argument names, or None when it names no device."""
    if isinstance(value, torch.device):
        return value.type
    if isinstance(value, str):
        return torch.device(value).type
    if isinstance(value, torch.Tensor):
        return value.device.type
    if isinstance(value, int) and not isinstance(value, bool):
        return "cuda"
    return None


# Calls that build a tensor in host memory when no `device=` is given: from host data, or a host factory
_BUILDERS = {"tensor", "as_tensor", "from_numpy", "Tensor", "FloatTensor", "LongTensor", "IntTensor", "BoolTensor"}
_BUILDERS |= {"zeros", "ones", "empty", "full", "arange", "linspace", "eye", "rand", "randn", "randint"}
_KEEPS_PLACE = {"float", "long", "int", "double", "half", "bool", "view", "reshape", "contiguous", "unsqueeze"}
_KEEPS_PLACE |= {"squeeze", "flatten", "t", "clone", "detach"}  # a host tensor stays a host tensor


# Tensors built in host memory from host data or by a host factory (no `device=`) while a counter ran, by id: on a
# CPU run every tensor is on the host, so this is what tells a later `.to(device)` of one of them is an upload.
_host_born: dict[int, weakref.ref[torch.Tensor]] = {}


def mark_host_born(tensor: torch.Tensor) -> None:
    """Remember that `tensor` was built in host memory (until it is freed)."""
    key = id(tensor)
    if key not in _host_born:
        _host_born[key] = weakref.ref(tensor, functools.partial(_forget, key))


def _forget(key: int, _ref: object, table: dict[int, weakref.ref[torch.Tensor]] = _host_born) -> None:
    table.pop(key, None)  # the table bound early: this may run at interpreter exit, after module globals are gone


def forget_host_born(tensor: object) -> None:
    """`tensor` now stands for a device tensor (a CPU run's `.to(device)` returns the tensor itself)."""
    _host_born.pop(id(tensor), None)


def made_by_user(depth: int) -> bool:
    """Whether the torch call being classified was made by the user's code, not by torch on its behalf (`Module.to`
    moving the parameters a library built): `depth` frames up is the frame that made the call."""
    return not sys._getframe(depth + 1).f_code.co_filename.startswith(sync.skip_prefixes())


def host_born(tensor: object) -> bool:
    """Whether `tensor` was marked by `mark_host_born` (the same object, still alive), or is a view of one (`t[i]`,
    `t.split(...)`: a view's `_base` is the tensor it views)."""
    ref = _host_born.get(id(tensor))
    if ref is not None and ref() is tensor:
        return True
    base = getattr(tensor, "_base", None) if _host_born and isinstance(tensor, torch.Tensor) else None
    if base is None:
        return False
    ref = _host_born.get(id(base))
    return ref is not None and ref() is base


@dataclass(frozen=True)
class _Spelling:
    """What the user's call says of a copy, read from its source."""

    target_is_host: bool = False  # `.to(X)` with X the host / `dst.copy_(...)` into a host buffer
    device_named: bool = False  # a device target that is not the host: `.to(self.device)`, `device=device`
    built_on_host: bool = False  # the receiver of `.to()` is built from host data right there (`torch.tensor(...)`)
    pinned: bool = False  # ... in pinned memory (`.pin_memory()`, or a name with `pinned` in it)


# Keyed by the code object's id, the entry holding the code so the id is not reused: hashing a code object hashes its
# bytecode and constants, tens of microseconds for a script's module code, on every call of a watched `.to`
_spelling_cache: dict[tuple[int, int, str], tuple[CodeType, _Spelling]] = {}


def _receiver(node: ast.expr) -> tuple[bool, bool]:
    """`(built on the host, pinned)` of the tensor a `.to()` is called on, as far as its expression says."""
    if isinstance(node, ast.Call):
        method = name_of(node.func)
        if method == "pin_memory" and isinstance(node.func, ast.Attribute):
            return True, True  # pinned memory is host memory
        if method in _KEEPS_PLACE and isinstance(node.func, ast.Attribute):
            return _receiver(node.func.value)
        if method in _BUILDERS:
            return not any(kw.arg == "device" for kw in node.keywords), False
        return False, False
    if isinstance(node, ast.Subscript):
        return _receiver(node.value)
    name = name_of(node).lower()
    return any(word in name for word in HOST_WORDS), "pinned" in name


_Positions = list[tuple[int | None, int | None, int | None, int | None]]
_positions_cache: dict[int, tuple[CodeType, _Positions]] = {}  # by the code's id, as `_spelling_cache`


def forget_sources() -> None:
    """Drop the decoded instruction positions (the last counter stopped; a long process need not keep them)."""
    _positions_cache.clear()


def _call_source(frame: FrameType) -> str:
    """The source of the call the frame is executing now (its instruction's position), or ""."""
    code = frame.f_code
    cached = _positions_cache.get(id(code))
    if cached is None:  # decoded once per code object: a script's module code takes milliseconds
        cached = _positions_cache[id(code)] = (code, list(code.co_positions()))
    positions = cached[1]
    index = frame.f_lasti // 2
    if index >= len(positions):
        return ""
    start, end, first_col, last_col = positions[index]
    if start is None or end is None or first_col is None or last_col is None:
        return ""
    lines = [linecache.getline(frame.f_code.co_filename, n).encode() for n in range(start, end + 1)]
    if start == end:
        return lines[0][first_col:last_col].decode(errors="replace")
    return b"".join([lines[0][first_col:], *lines[1:-1], lines[-1][:last_col]]).decode(errors="replace")


def _spelled(frame: FrameType, method: str) -> _Spelling:
    """Read the call `method(...)` (`.to`, `.copy_`, or a builder such as `torch.tensor`) the frame is making."""
    try:
        tree = ast.parse(_call_source(frame).strip(), mode="eval")
    except (SyntaxError, ValueError):
        return _Spelling()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and name_of(node.func) == method):
            continue
        if method == "copy_" and isinstance(node.func, ast.Attribute):
            return _Spelling(target_is_host=names_host(node.func.value))
        if method in ("tensor", "as_tensor"):
            device = next((kw.value for kw in node.keywords if kw.arg == "device"), None)
            return _Spelling(device_named=device is not None and not names_host(device))
        targets = [*node.args[:1], *(kw.value for kw in node.keywords if kw.arg == "device")]
        host = any(names_host(target) for target in targets)
        built, pinned = _receiver(node.func.value) if isinstance(node.func, ast.Attribute) else (False, False)
        return _Spelling(host, bool(targets) and not host, built, pinned)
    return _Spelling()


def _spelling(method: str) -> _Spelling:
    """How the user's line running now spells its `method(...)` call (cached per call site and instruction)."""
    frame = sync.user_frame()
    if frame is None:
        return _Spelling()
    key = (id(frame.f_code), frame.f_lasti, method)
    cached = _spelling_cache.get(key)
    if cached is None:
        cached = _spelling_cache[key] = (frame.f_code, _spelled(frame, method))
    known = cached[1]
    return known


def to_kind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """Kind of a `Tensor.to(...)` call: `to_cpu`/`to_cpu_nonblocking` for a host-bound copy, `to_device` for a
    host-to-device copy that blocks the host, else None.

    Host-bound: a copy counts when it really leaves an accelerator (source not on the CPU), or when the call names
    the host as its target (module docstring: a deliberate move to the host, which would sync on CUDA; counted on
    CPU too so CPU-only CI sees it). A move to a device the tensor is already on by another name (an env's device
    on a CPU run, or torch's own `.to(device)` calls inside e.g. `clip_grad_norm_`) is a no-op and does not count.

    Host-to-device: a copy from host memory that is not both pinned and `non_blocking` blocks the host until it
    lands. On an accelerator that is read from the tensors; on a CPU run, where the target is the CPU too, from the
    call's source: a tensor built from host data on that line (`torch.tensor(values).to(self.device)`) and moved to
    a named device counts, unless it is pinned there (`.pin_memory()`) and the move is `non_blocking=True`.
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
    place = source.device.type if isinstance(source, torch.Tensor) else None
    on_host = place == "cpu"
    if target not in (None, "cpu", "meta"):  # a real device: read the tensors
        pinned = on_host and non_blocking and source.is_pinned()
        return kinds.TO_DEVICE if on_host and not pinned else None
    if target != "cpu":
        return None
    leaves_device = place not in (None, "cpu", "meta")
    if leaves_device or isinstance(raw_target, str):
        return kinds.TO_CPU_NONBLOCKING if non_blocking else kinds.TO_CPU
    spelling = _spelling("to")
    if spelling.target_is_host:
        return kinds.TO_CPU_NONBLOCKING if non_blocking else kinds.TO_CPU
    if not (on_host and spelling.device_named):
        return None
    if spelling.built_on_host:  # built right there: pageable unless the line pins it
        uploaded = not (non_blocking and spelling.pinned)
    else:
        # built earlier in host memory: whether it was pinned is decided on the accelerator (`pin_memory()` needs
        # one), so a `non_blocking=True` copy is taken as the pinned one it is written for; without it, it counts
        uploaded = not non_blocking and host_born(source) and made_by_user(3)
    forget_host_born(source)  # what `.to` returns (on a CPU run, the tensor itself) is a device tensor from here on
    return kinds.TO_DEVICE if uploaded else None


def tensor_kind(args: tuple[Any, ...], kwargs: dict[str, Any], builder: str) -> str | None:
    """Kind of `torch.tensor(data, device=...)` / `torch.as_tensor(...)`: `tensor_to_device` when host data (a list,
    a number, an array) is copied to a device, which blocks the host; on a CPU run, when the `device=` the call
    names is not the host (read from its source)."""
    device = kwargs.get("device")
    if device is None or (args and isinstance(args[0], torch.Tensor)):
        return None
    target = _device_type(device)
    if target not in (None, "cpu", "meta"):
        return kinds.TENSOR_TO_DEVICE
    return kinds.TENSOR_TO_DEVICE if target == "cpu" and _spelling(builder).device_named else None


def copy_kind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """Kind of `dst.copy_(src)`: `copy_to_cpu` when a CPU tensor receives accelerator data, or, on a CPU run, when
    the user's line names the destination as a host buffer (module docstring); `copy_to_device` when host data
    lands in a device tensor and blocks the host: on an accelerator a source not both pinned and `non_blocking`,
    on a CPU run a host-built source (`mark_host_born`) copied without `non_blocking` into a destination the line
    does not name as a host buffer."""
    destination, source = args[0], args[1] if len(args) > 1 else kwargs.get("src")
    if not isinstance(source, torch.Tensor) or source.device.type == "meta":
        return None
    non_blocking = bool(kwargs.get("non_blocking", args[2] if len(args) > 2 else False))
    if destination.device.type not in ("cpu", "meta"):
        pinned = non_blocking and source.device.type == "cpu" and source.is_pinned()
        return kinds.COPY_TO_DEVICE if source.device.type == "cpu" and not pinned else None
    if destination.device.type != "cpu":
        return None
    if source.device.type != "cpu" or _spelling("copy_").target_is_host:
        return kinds.COPY_TO_CPU_NONBLOCKING if non_blocking else kinds.COPY_TO_CPU
    return kinds.COPY_TO_DEVICE if not non_blocking and host_born(source) and made_by_user(3) else None
