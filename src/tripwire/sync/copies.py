"""Host-bound copies, one rule whatever the spelling: which `.to(...)` and `copy_` calls count as a sync.

A `.to(...)` or `dst.copy_(src)` counts (`to_cpu`, `copy_to_cpu`, `..._nonblocking` with `non_blocking=True`) when
data really leaves an accelerator for the host, or, on a CPU run where every tensor is already on the host, when the
user's call names the host as its target: the target of `.to(...)` (positional or `device=`) is a CPU string
(`"cpu"`, `"cpu:0"`), a `torch.device("cpu"...)`, or a name whose last part says so (`cpu`, `host` or `pinned` in
it: `self.cpu_buffer`, `host_out`, `PINNED`), and the receiver of `copy_` is such a name. So a CPU machine counts
the copies that would stall a GPU run, while `.to(self.device)` (the run's own device, a no-op on CPU and a device
move on GPU) is not counted. The call's own source is read through the interpreter's instruction positions, once
per call site. `tripwire.sync.hooks` asks `to_kind` and `copy_kind` from its function mode.
"""

from __future__ import annotations

import ast
import linecache
from types import CodeType, FrameType
from typing import Any

import torch

from tripwire.sync import state as sync

__all__ = ["copy_kind", "to_kind"]


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


_HOST_WORDS = ("cpu", "host", "pinned")


_spelling_cache: dict[tuple[CodeType, int, str], bool] = {}


def _names_host(node: ast.expr) -> bool:
    """Whether an expression spells the host: a CPU device string, `torch.device("cpu"...)`, or a name (its last
    part: `self.cpu_buffer`, `host[i]`) with `cpu`, `host` or `pinned` in it."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.split(":")[0] == "cpu"
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        first = node.args[0] if node.args else next((kw.value for kw in node.keywords if kw.arg == "type"), None)
        return name == "device" and first is not None and _names_host(first)
    if isinstance(node, ast.Subscript):
        return _names_host(node.value)
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return any(word in name.lower() for word in _HOST_WORDS)


def _call_source(frame: FrameType) -> str:
    """The source of the call the frame is executing now (its instruction's position), or ""."""
    positions = list(frame.f_code.co_positions())
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


def _spelled_host(frame: FrameType, method: str) -> bool:
    try:
        tree = ast.parse(_call_source(frame).strip(), mode="eval")
    except (SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method):
            continue
        if method == "copy_":
            return _names_host(node.func.value)
        targets = [*node.args[:1], *(kw.value for kw in node.keywords if kw.arg == "device")]
        return any(_names_host(target) for target in targets)
    return False


def _host_spelled(method: str) -> bool:
    """Whether the user's line running now calls `.<method>(...)` with the host spelled as the target (cached per
    call site and instruction)."""
    frame = sync.user_frame()
    if frame is None:
        return False
    key = (frame.f_code, frame.f_lasti, method)
    known = _spelling_cache.get(key)
    if known is None:
        known = _spelling_cache[key] = _spelled_host(frame, method)
    return known


def to_kind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """Kind of a `Tensor.to(...)` call: `to_cpu`/`to_cpu_nonblocking` for a host-bound copy, else None.

    A copy counts when it really leaves an accelerator (source not on the CPU), or when the call names the host as
    its target (module docstring: a deliberate move to the host, which would sync on CUDA; counted on CPU too so
    CPU-only CI sees it). A move to a device the tensor is already on by another name (an env's device on a CPU
    run, or torch's own `.to(device)` calls inside e.g. `clip_grad_norm_`) is a no-op and does not count.
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
    if target != "cpu":
        return None
    source = args[0]
    leaves_device = isinstance(source, torch.Tensor) and source.device.type not in ("cpu", "meta")
    if not (leaves_device or isinstance(raw_target, str) or _host_spelled("to")):
        return None
    return "to_cpu_nonblocking" if non_blocking else "to_cpu"


def copy_kind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """Kind of `dst.copy_(src)`: `copy_to_cpu` when a CPU tensor receives accelerator data, or, on a CPU run, when
    the user's line names the destination as a host buffer (module docstring)."""
    destination, source = args[0], args[1] if len(args) > 1 else kwargs.get("src")
    if not isinstance(source, torch.Tensor) or destination.device.type != "cpu":
        return None
    if source.device.type == "meta" or (source.device.type == "cpu" and not _host_spelled("copy_")):
        return None
    non_blocking = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
    return "copy_to_cpu_nonblocking" if non_blocking else "copy_to_cpu"
