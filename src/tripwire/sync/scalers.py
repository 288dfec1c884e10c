"""A CUDA `GradScaler` on a CPU run: the reads the GPU run makes in it, counted where the GPU run waits.

`torch.amp.GradScaler("cuda")` (and `torch.cuda.amp.GradScaler()`) built where CUDA is not available disables itself
with a warning, and its `step(optimizer)` then only calls `optimizer.step()`. On a GPU the same line reads the
optimizer's found-inf flag first (`found_inf.item()` in `GradScaler._maybe_opt_step`), a wait on the device at every
step of a mixed-precision loop; `get_scale()` reads the scale, and `state_dict()` the scale and the growth tracker,
once `scale()` has made them. So a CPU run missed the one sync a step an fp16 loop has on its GPU.

While a counter runs, a scaler built for CUDA with `enabled` asked (its default) and disabled for want of CUDA is
remembered (`GradScaler.__init__`'s code swapped, `tripwire.sync.swaps`), and each of those reads is counted as the
`item` it is on the GPU, at the line that calls the scaler, as a GPU run names it (torch's frames are passed over).
An optimizer that takes the scaling into its own step (`fused=True`: `_step_supports_amp_scaling`) reads nothing
there, on either run. A step reads one flag per device the optimizer's gradients are on: one is counted, a model on
one device. Not counted: a scaler built before the counter started (whether it was asked to be enabled is gone by
then), and a scaler a GPU run enables (its reads are real, and counted as reads).
"""

from __future__ import annotations

import contextlib
import inspect
import weakref
from collections.abc import Callable
from typing import Any

from tripwire.sync import kinds
from tripwire.sync import state as sync
from tripwire.sync.installation import Installation, swap_in

__all__ = ["watch_scalers"]

# Scalers a CPU run disabled for want of CUDA, and those of them whose `scale()` has run: by id, each entry the
# scaler's weak reference (a loop's subclass may be unhashable; nothing is added to the scaler itself)
_DISABLED: dict[int, weakref.ReferenceType[Any]] = {}
_SCALED: dict[int, weakref.ReferenceType[Any]] = {}
_STEP_READS = 1  # found-inf flags a step reads: one per device of the optimizer's gradients


def _remember(table: dict[int, weakref.ReferenceType[Any]], scaler: object) -> None:
    key = id(scaler)

    def gone(_ref: weakref.ReferenceType[Any]) -> None:
        table.pop(key, None)

    with contextlib.suppress(TypeError):  # not weakly referable (a subclass with `__slots__`): not followed
        table[key] = weakref.ref(scaler, gone)


def _held(table: dict[int, weakref.ReferenceType[Any]], scaler: object) -> bool:
    ref = table.get(id(scaler))
    return ref is not None and ref() is scaler


def _count(reads: int) -> None:
    if not sync._LOCAL.suppress:
        for _ in range(reads):
            sync.deliver(kinds.ITEM)


def _built(original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`GradScaler.__init__`: run, then remember the scaler when it was asked for CUDA and disabled itself."""
    result = original(*args, **kwargs)  # pass-through
    scaler = args[0] if args else None
    if getattr(scaler, "_device", None) != "cuda" or getattr(scaler, "_enabled", True):
        return result
    try:
        asked = inspect.signature(original).bind(*args, **kwargs).arguments.get("enabled", True)
    except (TypeError, ValueError):  # a signature torch changed: nothing known of what was asked
        return result
    if asked:  # read as torch read it: `enabled` disabled for want of CUDA, not by the loop
        _remember(_DISABLED, scaler)
    return result


def _step(original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`GradScaler.step(optimizer)`: the GPU run's found-inf read, then the step."""
    scaler = args[0] if args else None
    optimizer = args[1] if len(args) > 1 else kwargs.get("optimizer")
    if _held(_DISABLED, scaler) and not getattr(optimizer, "_step_supports_amp_scaling", False):
        _count(_STEP_READS)
    return original(*args, **kwargs)  # pass-through


def _scale(original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`GradScaler.scale(outputs)`: on a GPU the first one makes the scale and growth tracker a later read reads."""
    if args and _held(_DISABLED, args[0]):
        _remember(_SCALED, args[0])
    return original(*args, **kwargs)  # pass-through


def _get_scale(original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`GradScaler.get_scale()`: the scale's read, once it exists."""
    if args and _held(_SCALED, args[0]):
        _count(1)
    return original(*args, **kwargs)  # pass-through


def _state_dict(original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`GradScaler.state_dict()`: the scale's and the growth tracker's reads, once they exist."""
    if args and _held(_SCALED, args[0]):
        _count(2)
    return original(*args, **kwargs)  # pass-through


_WATCHED: dict[str, Callable[[Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any]] = {
    "__init__": _built,
    "step": _step,
    "scale": _scale,
    "get_scale": _get_scale,
    "state_dict": _state_dict,
}


def watch_scalers(installation: Installation) -> None:
    """Swap the code of `GradScaler`'s methods that read on a GPU, where torch has them (`torch.amp.grad_scaler`)."""
    try:
        from torch.amp.grad_scaler import GradScaler
    except ImportError:  # a build without it
        return
    for name, counted in _WATCHED.items():
        swap_in(installation, vars(GradScaler).get(name), counted)
