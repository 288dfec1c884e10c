"""What one counter installed and how it is put back: the record every hook module patches through.

`Installation` holds what a `SyncCounter.__enter__` installed (modes, kernels, patched attributes, swapped code,
place-keeping stand-ins not yet in place), so its `__exit__` removes exactly that (`tripwire.sync.hooks.uninstall`).
`patch` replaces an attribute and remembers how to restore it; `call_counted` records one sync and runs the call
with recording suppressed; the backward tracking lets autograd's device threads count while a counting thread's
backward runs (`in_counted_backward`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FunctionType, ModuleType
from typing import Any, Protocol

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from tripwire.common.unhook import put_back
from tripwire.sync import state as sync
from tripwire.sync.swaps import Swap, swap_code

__all__ = ["Installation", "call_counted", "in_counted_backward", "patch", "swap_in", "tracked_backward"]

_BACKWARDS = [0]  # backward passes that counting threads are running now (`in_counted_backward`)
_BACKWARDS_LOCK = threading.Lock()
_LOCAL = sync._LOCAL  # this thread's region stack, suppression and implicit-counting depths


def _fresh_lock_in_child() -> None:
    """A forked child starts with the lock free (another thread may have held it at the fork: `tripwire.sync.state`)."""
    global _BACKWARDS_LOCK
    _BACKWARDS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_fresh_lock_in_child)


class Closable(Protocol):
    """What an installation keeps of the implicit kernels (`tripwire.sync.implicit.ImplicitKernels`): a close."""

    def close(self) -> None: ...


@dataclass
class Installation:
    """What one `SyncCounter.__enter__` installed, so its `__exit__` removes exactly that."""

    function_mode: TorchFunctionMode | None = None
    counting: bool = False  # stand-ins installed and this thread marked as counting (`_LOCAL.counting`)
    dispatch_mode: TorchDispatchMode | None = None
    kernels: Closable | None = None  # counting implicit syncs in place of `dispatch_mode`
    restores: list[tuple[Any, str, bool, Any, Any]] = field(default_factory=list)  # owner, name, had own, own, ours
    skipping: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)  # `tripwire.sync.dynamo`
    swaps: list[Swap] = field(default_factory=list)  # functions whose code counts their calls
    keeping: list[tuple[str, Any]] = field(default_factory=list)  # place-keeping stand-ins not yet in place
    # the functions replaced in `torch` (name, torch's own, the stand-in), torch's own again during an import
    namespace: list[tuple[str, Any, Any]] = field(default_factory=list)
    # stand-ins entered in TorchScript's table of builtins under their own's op (`as_script_builtin`), held here so
    # that no other object takes their id while they are in it
    script_builtins: list[Any] = field(default_factory=list)


def patch(installation: Installation, owner: Any, name: str, replacement: Any) -> None:
    """Replace `owner.name`, remembering how to restore it."""
    had_own = name in vars(owner)
    installation.restores.append((owner, name, had_own, vars(owner).get(name), replacement))
    if isinstance(owner, ModuleType) and isinstance(replacement, FunctionType):
        # pickled by reference, as `torch.as_tensor` itself is (a spawned DataLoader's `collate_fn=torch.stack`, a
        # `Pool.map(torch.as_tensor, ...)`): under the name it stands in for, which finds this very object here and
        # torch's own in a process with no counter
        replacement.__module__, replacement.__qualname__ = owner.__name__, name
    setattr(owner, name, replacement)


def swap_in(
    installation: Installation, function: Any, counted: Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]
) -> bool:
    """`swaps.swap_code(function, counted)`, the swap kept so that this installation's removal puts the code back;
    False when the function cannot be swapped (not a Python function)."""
    swap = swap_code(function, counted)
    if swap is None:
        return False
    installation.swaps.append(swap)
    return True


def as_script_builtin(installation: Installation, own: Any, stand_in: Any) -> None:
    """Enter `stand_in` in TorchScript's table of builtins as the op `own` is (`aten::stack` for `torch.stack`):
    `torch.jit.script` resolves a function's `torch.stack` to the object in `torch` when it compiles, and a stand-in
    it does not know as a builtin it tries to compile as Python (`*args` refused), so a loop that scripts a
    function while it is recorded would fail only then. The compiled code calls the op, past every stand-in, as it
    does without one."""
    from torch.jit import _builtins

    op = _builtins._find_builtin(own)
    if op is not None:
        _builtins._register_builtin(stand_in, op)
        installation.script_builtins.append(stand_in)


def restore(installation: Installation) -> None:
    """Put back every attribute `patch` replaced for this installation, newest first, and take its stand-ins out of
    TorchScript's table of builtins (their ids are free once they are gone). An attribute the loop replaced while it
    was recorded (a library imported then that patches `torch.as_tensor`) keeps the loop's object, with the stand-in
    it wrapped, if any, replaced by torch's own (`tripwire.common.unhook`)."""
    for owner, name, had_own, original, ours in reversed(installation.restores):
        put_back(owner, name, had_own, original, ours)
    installation.restores.clear()
    if installation.script_builtins:
        from torch.jit import _builtins

        table = _builtins._get_builtin_table()
        for stand_in in installation.script_builtins:
            table.pop(id(stand_in), None)
        installation.script_builtins.clear()


def call_counted(kind: str | None, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Record `kind` (None: nothing, a read of host memory), then run `func` with recording suppressed so nothing
    inside counts twice."""
    if kind is not None:
        sync.deliver(kind)
    local = sync._LOCAL
    local.suppress += 1
    try:
        return func(*args, **kwargs)  # pass-through
    finally:
        local.suppress -= 1


def in_counted_backward() -> bool:
    """Whether this thread runs part of a backward pass while a counting thread runs one: autograd runs an
    accelerator's part of the graph on a device thread of its own, where a function mode, carried there by torch,
    counted; the stand-ins count there as the mode did. (Another thread's own backward, running at the same time,
    is counted as well.)"""
    return _BACKWARDS[0] > 0 and torch._C._current_graph_task_id() != -1


def tracked_backward(original: Callable[..., Any]) -> Callable[..., Any]:
    """`torch.autograd._engine_run_backward`, noting a counting thread's backward in `_BACKWARDS` while it runs."""

    @functools.wraps(original)
    def run(*args: Any, **kwargs: Any) -> Any:
        if _LOCAL.counting <= 0:
            return original(*args, **kwargs)  # pass-through
        with _BACKWARDS_LOCK:
            _BACKWARDS[0] += 1
        try:
            return original(*args, **kwargs)  # pass-through
        finally:
            with _BACKWARDS_LOCK:
                _BACKWARDS[0] -= 1

    return run
