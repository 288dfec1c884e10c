"""The determinism settings a run changes, each with the line that changed it.

`torch.backends.cudnn.benchmark = True` in a loop's set-up changes nothing on a CPU, where the gate runs, and makes
every GPU run pick its convolution kernels by timing, so two GPU runs of one seed differ. A CPU run cannot see the
difference in its numbers; it can see the line. `SettingsWatch` records every change, while it is active, of:

- `torch.use_deterministic_algorithms` (`[mode, warn_only]`), also as `torch.set_deterministic_debug_mode` sets it;
- `torch.backends.cudnn.benchmark`, `.deterministic`, `.allow_tf32`, `.enabled`, `.benchmark_limit`;
- `torch.backends.cuda.matmul.allow_tf32` and its reduced-precision reductions;
- `torch.set_float32_matmul_precision`;
- `torch.utils.deterministic.fill_uninitialized_memory` (with deterministic algorithms, whether new uninitialized
  memory is filled with NaN: off, a kernel that reads memory it never wrote reads whatever was there);

each named at the first frame outside torch and tripwire (`file:line in function`). The functions keep their
identity (their code is swapped, `tripwire.sync.swaps`), the cuDNN flags are watched on their module's class, and all
is put back on exit. A change made another way (`torch.backends.cudnn.flags(...)`, `torch.set_num_threads`, the
`CUBLAS_WORKSPACE_CONFIG` environment variable) is found by comparing the values at the end, with no line. A set to
the value it already had is no change.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import torch

from tripwire.common.unhook import put_back
from tripwire.sync import state
from tripwire.sync.swaps import Swap, swap_code

__all__ = ["SettingChange", "SettingsWatch", "determinism_settings", "restore_settings"]

_CUDNN = ("benchmark", "deterministic", "allow_tf32", "enabled", "benchmark_limit")
_MATMUL = ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction")
_FILL = "torch.utils.deterministic.fill_uninitialized_memory"


def _fill_module() -> Any:
    """`torch.utils.deterministic` (whose class holds the fill flag as a property), None on a torch without it."""
    return getattr(torch.utils, "deterministic", None)


def determinism_settings() -> dict[str, Any]:
    """Every setting `SettingsWatch` watches, by its dotted name, as it is now (plain JSON values)."""
    values: dict[str, Any] = {
        "torch.use_deterministic_algorithms": _deterministic(),  # [mode, warn_only]; the debug mode follows them
        "torch.float32_matmul_precision": torch.get_float32_matmul_precision(),
        "torch.num_threads": torch.get_num_threads(),
        "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG", ""),
    }
    for name in _CUDNN:
        if hasattr(torch.backends.cudnn, name):
            values[f"torch.backends.cudnn.{name}"] = getattr(torch.backends.cudnn, name)
    if hasattr(_fill_module(), "fill_uninitialized_memory"):
        values[_FILL] = bool(_fill_module().fill_uninitialized_memory)
    for name in _MATMUL:
        try:
            values[f"torch.backends.cuda.matmul.{name}"] = getattr(torch.backends.cuda.matmul, name)
        except (AttributeError, RuntimeError):  # a setting this torch build does not have
            continue
    return values


def restore_settings(values: Mapping[str, Any]) -> None:
    """Put back each setting `values` (an earlier `determinism_settings()`) holds where it now differs: a recording
    leaves the process's settings as it found them, so what one loop set (`cudnn.deterministic = True`) is neither
    in force during, nor missing from the changes seen by, the next recording in the process."""
    now = determinism_settings()
    if now["torch.use_deterministic_algorithms"] != values["torch.use_deterministic_algorithms"]:
        mode, warn_only = values["torch.use_deterministic_algorithms"]
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
    if now["torch.float32_matmul_precision"] != values["torch.float32_matmul_precision"]:
        torch.set_float32_matmul_precision(values["torch.float32_matmul_precision"])  # sets matmul's allow_tf32 too
    if now["torch.num_threads"] != values["torch.num_threads"]:
        torch.set_num_threads(values["torch.num_threads"])
    if now["CUBLAS_WORKSPACE_CONFIG"] != values["CUBLAS_WORKSPACE_CONFIG"]:
        if values["CUBLAS_WORKSPACE_CONFIG"]:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = values["CUBLAS_WORKSPACE_CONFIG"]
        else:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    if _FILL in values and now.get(_FILL) != values[_FILL]:
        _fill_module().fill_uninitialized_memory = values[_FILL]
    now = determinism_settings()  # after the precision, which moved matmul's allow_tf32 with it
    for owner, prefix, flags in (
        (torch.backends.cudnn, "torch.backends.cudnn.", _CUDNN),
        (torch.backends.cuda.matmul, "torch.backends.cuda.matmul.", _MATMUL),
    ):
        for flag in flags:  # the flags `determinism_settings` read, where this torch build has them
            name = prefix + flag
            if name in values and now.get(name) != values[name]:
                setattr(owner, flag, values[name])


@dataclass(frozen=True)
class SettingChange:
    """One change of a determinism setting: what, from what to what, and where ("" when not seen as it happened)."""

    setting: str
    before: Any
    after: Any
    site: str = ""

    def format(self) -> str:
        where = f" at {self.site}" if self.site else " (seen at the end of the run: the line is unknown)"
        return f"{self.setting} {self.before!r} -> {self.after!r}{where}"


class _WatchedFlag:
    """A flag held as a property of its module's class (cuDNN's, the fill's) while watched: read as torch reads it,
    a set recorded as it happens."""

    def __init__(self, own: Any, setting: str, watch: SettingsWatch) -> None:
        self.own, self.setting, self.watch = own, setting, watch

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        return self.own.__get__(instance, owner)

    def __set__(self, instance: Any, value: Any) -> None:
        before = self.own.__get__(instance, type(instance))
        self.own.__set__(instance, value)
        self.watch.note(self.setting, before, self.own.__get__(instance, type(instance)))


class SettingsWatch:
    """`with SettingsWatch() as watch: run()`, then `watch.changes`: every determinism setting the run changed."""

    def __init__(self) -> None:
        self.changes: list[SettingChange] = []
        self._before: dict[str, Any] = {}
        self._swaps: list[Swap] = []
        self._restores: list[tuple[Any, str, Any, Any]] = []  # owner, name, own, ours

    def note(self, setting: str, before: Any, after: Any) -> None:
        """Record a change made now (nothing when the value did not change), named at the caller's line."""
        if before != after:
            self.changes.append(SettingChange(setting, before, after, _site()))

    def __enter__(self) -> SettingsWatch:
        state.ensure_skipped()
        self._before = determinism_settings()
        flags = [(type(torch.backends.cudnn), name, f"torch.backends.cudnn.{name}") for name in _CUDNN]
        if _fill_module() is not None:
            flags.append((type(_fill_module()), "fill_uninitialized_memory", _FILL))
        for owner, name, setting in flags:
            own = vars(owner).get(name)
            if own is not None and hasattr(own, "__set__"):
                flag = _WatchedFlag(own, setting, self)
                self._restores.append((owner, name, own, flag))
                setattr(owner, name, flag)
        matmul_class = type(torch.backends.cuda.matmul)
        hook = "__setattr__"  # cuBLASModule's own, in Python: the class's slot stays the generic one
        own_setattr = vars(matmul_class).get(hook)
        if own_setattr is not None:
            watched = _matmul_setattr(own_setattr, self)
            self._restores.append((matmul_class, hook, own_setattr, watched))
            setattr(matmul_class, hook, watched)
        for function, setting, reader in (
            (torch.use_deterministic_algorithms, "torch.use_deterministic_algorithms", _deterministic),
            (torch.set_deterministic_debug_mode, "torch.use_deterministic_algorithms", _deterministic),
            (torch.set_float32_matmul_precision, "torch.float32_matmul_precision", torch.get_float32_matmul_precision),
        ):
            swap = swap_code(function, _Recorded(self, setting, reader))
            if swap is not None:
                self._swaps.append(swap)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for swap in reversed(self._swaps):
            swap.restore()
        self._swaps.clear()
        for owner, name, own, ours in reversed(self._restores):
            put_back(owner, name, True, own, ours)
        self._restores.clear()
        after = determinism_settings()
        seen = {change.setting for change in self.changes}
        for name, value in after.items():
            if value != self._before.get(name) and name not in seen and not _covered(name, seen):
                self.changes.append(SettingChange(name, self._before.get(name), value))

    def format(self) -> str:
        return "; ".join(change.format() for change in self.changes) or "no determinism setting changed"


# Settings one call changes together: the second is said by the change of the first
_IMPLIED = {
    "torch.float32_matmul_precision": "torch.backends.cuda.matmul.allow_tf32",
    "torch.backends.cuda.matmul.allow_tf32": "torch.float32_matmul_precision",
}


def _covered(name: str, seen: set[str]) -> bool:
    return any(_IMPLIED.get(setting) == name for setting in seen)


def _deterministic() -> list[bool]:
    return [torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()]


class _Recorded:
    """A swapped setter's call: the value before, the call, the value after, noted at the caller's line."""

    def __init__(self, watch: SettingsWatch, setting: str, reader: Any) -> None:
        self.watch, self.setting, self.reader = watch, setting, reader

    def __call__(self, original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        before = self.reader()
        result = original(*args, **kwargs)  # pass-through
        self.watch.note(self.setting, before, self.reader())
        return result


def _matmul_setattr(own: Any, watch: SettingsWatch) -> Any:
    def __setattr__(self: Any, name: str, value: Any) -> Any:
        before = getattr(self, name, None) if name in _MATMUL else None
        result = own(self, name, value)  # pass-through
        if name in _MATMUL:
            watch.note(f"torch.backends.cuda.matmul.{name}", before, getattr(self, name))
        return result

    return __setattr__


def _site() -> str:
    """`relpath:line in qualname` of the first frame outside torch and tripwire, "" when there is none."""
    frame = state._outside(sys._getframe(2))[0]
    if frame is None:
        return ""
    code = frame.f_code
    return f"{state.relative_path(code.co_filename)}:{frame.f_lineno} in {code.co_qualname}"
