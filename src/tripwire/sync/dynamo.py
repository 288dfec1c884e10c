"""Keeping torch.compile out of tripwire's own frames, so watching a compiled loop does not change what it compiles.

While dynamo's frame callback is set (a compiled function is running), every Python frame that starts is a candidate
for compilation: a counter's `__torch_function__` called for an op in eager code between two graphs, a region's
`__enter__`, an instrument's stand-in. Compiled, they would add frames, graphs, breaks and recompiles that the loop
does not have without tripwire. `dynamo_skips_tripwire()` puts tripwire's folder on dynamo's skip list, so its
frames run as they are, and the files registered with `inline_when_called` (the instruments' stand-ins) on its
inline-when-called list, so that code dynamo traces goes through them to the loop's own function. Asked whether a
stand-in (a function object, not a frame's code) is skipped, as `torch.compile(module)` asks of `module.forward`,
dynamo answers for the original the stand-in stands in front of.

The lists are set once the loop has imported dynamo, not before (an import hook while a counter or instrument is
active): importing dynamo costs about a second, which a loop that never compiles should not pay. Once set, they stay
for the process (tripwire's frames are never worth compiling). This module loads no torch.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import sys
import types
import weakref
from collections.abc import Iterator
from types import CodeType
from typing import Any

__all__ = [
    "called_nonrecursively_disabled",
    "dynamo_skips_tripwire",
    "inline_when_called",
    "marked_as_compiled",
    "never_compiled",
    "nonrecursively_disabled",
    "outside_compile",
]

_INLINED: set[str] = set()
# Code of tripwire's that wears another file's name, made before dynamo was imported: skipped as it is imported
_UNCOMPILED: weakref.WeakSet[CodeType] = weakref.WeakSet()


def never_compiled(code: CodeType) -> None:
    """Have dynamo run every frame of `code` as it is: tripwire's own code that wears another file's name (a
    stand-in's runner wears the loop's line, `watched.as_caller`), which the skip list, by file, cannot tell from the
    loop's. Started while a compiled function runs, dynamo took it for the loop's frame and tried to compile it."""
    frames = sys.modules.get(f"{_DYNAMO}.eval_frame")
    skip = getattr(frames, "skip_code", None)
    if callable(skip):
        skip(code)
    else:
        _UNCOMPILED.add(code)


def inline_when_called(path: str) -> None:
    """Have dynamo trace into `path` when code it is tracing calls it (its frames stay skipped at the top)."""
    _INLINED.add(path.replace("\\", "/"))
    rules = sys.modules.get(f"{_DYNAMO}.trace_rules")
    if rules is not None and getattr(rules, "_tripwire_skipped", False):
        _register_inlined(rules)


_DYNAMO = "torch._dynamo"


def marked_as_compiled(stand: CodeType, original: CodeType) -> bool:
    """Whether `torch.compile` marked `stand`, a stand-in's code, to be compiled whatever its frame holds (dynamo's
    `always_optimize_code_objects`, set as the loop compiles the stand-in); if so `original`, the code of the
    function it stands in front of, is marked too, as the loop alone compiling it would have it. Without the mark
    dynamo skips a frame whose arguments show it no tensor. False while dynamo is not imported or the mark not set."""
    marks = getattr(sys.modules.get(f"{_DYNAMO}.eval_frame"), "always_optimize_code_objects", None)
    if marks is None or stand not in marks:
        return False
    marks[original] = True
    return True


def called_nonrecursively_disabled(caller: CodeType) -> bool:
    """Whether `caller`, the code of the frame that called a stand-in, is the wrapper of
    `torch.compiler.disable(f, recursive=False)`: dynamo skips the frame such a wrapper calls (and only that one, the
    frames it calls are compiled), by looking at the frame's caller. False while dynamo is not imported."""
    decorators = sys.modules.get(f"{_DYNAMO}.decorators")
    return caller is getattr(decorators, "_nonrecursive_disable_wrapper_code", None)


def nonrecursively_disabled(function: Any) -> Any:
    """`function` called through dynamo's own non-recursive disable wrapper (the one `torch.compiler.disable(f,
    recursive=False)` returns), so that dynamo skips `function`'s frame and compiles what it calls, as it would with
    no stand-in between; `function` itself on a torch without one."""
    utils = sys.modules.get(f"{_DYNAMO}.external_utils")
    wrap = getattr(utils, "get_nonrecursive_disable_wrapper", None)
    return wrap(function) if callable(wrap) else function


class outside_compile:  # lower case: used as a `with` statement, as `contextlib`'s are
    """Dynamo's frame callback and the JIT tracer off on this thread while tripwire's bookkeeping runs, and back after.

    The skip list keeps tripwire's own frames from being compiled, not the frames they call: an instrument's
    checkpoint digests what a compiled call returned inside the stand-in, while the callback is still set, so a
    `state_dict()` of the loop's object (a TensorDict's) would be compiled there, a compile the loop does not have,
    and a generator frame (a genexpr of `inspect`'s) raised "Attempt to trace generator" under `fullgraph=True` on
    torch 2.12. With the callback off, everything the bookkeeping calls runs as it is. In the same way a function the
    loop hands `torch.jit.trace` runs while the tracer records: a checkpoint's digest read the traced tensors there,
    and the tracer warned the loop four times (`TracerWarning`: converting a tensor to a NumPy array, a Python number,
    a boolean, iterating over it) of reads that were tripwire's. A class, not a generator
    (`contextlib.contextmanager`'s frame is one); nothing is done while dynamo is not imported, or no trace runs."""

    __slots__ = ("_frames", "_prior", "_trace")

    def __init__(self) -> None:
        self._frames: Any = None
        self._prior: Any = None
        self._trace: Any = None

    def __enter__(self) -> None:
        torch = sys.modules.get("torch")
        trace = getattr(getattr(torch, "_C", None), "_get_tracing_state", None)
        if trace is not None and (state := trace()) is not None:
            torch._C._set_tracing_state(None)  # type: ignore[union-attr]
            self._trace = state
        if _DYNAMO not in sys.modules:  # never imported: no callback can be set
            return
        frames = sys.modules["torch"]._C._dynamo.eval_frame
        prior = frames.get_eval_frame_callback()
        if prior is not None:
            frames.set_eval_frame(None)
            self._frames, self._prior = frames, prior

    def __exit__(self, *exc_info: object) -> None:
        frames, self._frames = self._frames, None
        if frames is not None:
            frames.set_eval_frame(self._prior)
            self._prior = None
        state, self._trace = self._trace, None
        if state is not None:
            sys.modules["torch"]._C._set_tracing_state(state)


def _skip_tripwire() -> None:
    """Put tripwire's folder on dynamo's skip list, and the stand-ins on its inline-when-called list and among the
    files `torch.compile` calls as they are (not wrapped in a frame of its own), once."""
    rules = sys.modules.get(f"{_DYNAMO}.trace_rules")
    if rules is None or getattr(rules, "_tripwire_skipped", False):
        return
    _register_inlined(rules)
    if not hasattr(rules.check, "_tripwire_originals"):
        rules.check = _originals_checked(rules.check)  # type: ignore[attr-defined]  # asked of a stand-in: the original
    rules.add("tripwire")  # also recompiles the skip list's pattern
    rules._tripwire_skipped = True  # type: ignore[attr-defined]  # our mark on dynamo's module
    _build_dynamo_tables()
    for code in list(_UNCOMPILED):
        never_compiled(code)
    _UNCOMPILED.clear()


def _build_dynamo_tables() -> None:
    """Have dynamo build its tables of torch's functions (which it sends to a tensor subclass's `__torch_function__`,
    which it traces by a handler of its own: `torch.tensor`, `torch.full`, `torch.from_numpy`) now, while `torch`
    holds torch's own: dynamo builds each on first use and keeps it for the process, and one built while a
    stand-in stood in `torch` held the stand-in, not the function dynamo meets when it traces through it. This runs
    once, as dynamo is imported (an import sees torch's own functions, `tripwire.sync.explicit.shield_imports`) or,
    when it was imported before, as the first counter or instrument starts, before any stand-in."""
    tables = sys.modules.get(f"{_DYNAMO}.variables.torch")
    if tables is None:
        return
    overridable = getattr(tables, "get_overridable_functions", None)
    if callable(overridable):
        overridable()
    handlers = getattr(getattr(tables, "TorchInGraphFunctionVariable", None), "_get_handlers", None)
    if callable(handlers):
        handlers()


def _register_inlined(rules: Any) -> None:
    inline = getattr(rules, "BUILTIN_INLINE_WHEN_CALLED", None)
    if isinstance(inline, set):
        inline.update(_INLINED)
    elif callable(getattr(rules, "check_file", None)) and not hasattr(rules.check_file, "_tripwire_inlines"):
        # torch before 2.12 has no inline-when-called list: its file check is asked first, for a call dynamo traces
        rules.check_file = _inlining_check(rules.check_file, rules.SkipResult)
    unwrapped = getattr(sys.modules.get(f"{_DYNAMO}.eval_frame"), "DONT_WRAP_FILES", None)
    if isinstance(unwrapped, set):
        unwrapped.update(_INLINED)


def _originals_checked(check: Any) -> Any:
    """Dynamo's `trace_rules.check` asked of a stand-in (a function or a bound method whose function wears a
    registered stand-in file and `__wrapped__`) answers for the original it stands in front of; a code object (a frame
    dynamo meets) and everything else as dynamo decides. `torch.compile(module)` asks it of `module.forward` to pick
    how to compile the module: of a stand-in it said "skipped" (tripwire's file), and dynamo compiled the module
    through a wrapper frame of its own, which traced the forward, broke at its first break and then compiled the
    forward again as a frame: one break and one frame more than the loop alone, and the region never ran its body."""

    def checked(obj: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            asked = _original_of(obj)
        except Exception:  # an object whose attributes raise: dynamo decides on what it was given
            asked = obj
        return check(asked, *args, **kwargs)

    checked._tripwire_originals = True  # type: ignore[attr-defined]  # our mark: wrapped once
    return checked


def _original_of(obj: Any) -> Any:
    """The original a stand-in stands in front of (bound to the same object for a bound method), else `obj`."""
    function = getattr(obj, "__func__", obj)
    code = getattr(function, "__code__", None)
    if isinstance(code, CodeType) and code.co_filename.replace("\\", "/") in _INLINED:
        original = getattr(function, "__wrapped__", None)
        if original is not None:
            owner = getattr(obj, "__self__", None)
            return types.MethodType(original, owner) if function is not obj and owner is not None else original
    return obj


def _inlining_check(check_file: Any, skip_result: Any) -> Any:
    """Dynamo's `check_file` with the registered stand-ins inlined when traced code calls them (what
    `BUILTIN_INLINE_WHEN_CALLED` does from torch 2.12 on); every other file as dynamo decides."""

    def check(filename: str | None, is_inlined_call: bool = False) -> Any:
        if is_inlined_call and filename is not None and filename.replace("\\", "/") in _INLINED:
            return skip_result(False, "tripwire's stand-ins: inlined when called")
        return check_file(filename, is_inlined_call)

    check._tripwire_inlines = True  # type: ignore[attr-defined]
    return check


class _SkipTripwireOnImport(importlib.abc.MetaPathFinder):
    """Runs `_skip_tripwire` as soon as the loop has imported dynamo, before anything compiles."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != _DYNAMO:
            return None
        for finder in sys.meta_path:
            if isinstance(finder, _SkipTripwireOnImport) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _SkippingLoader(spec.loader)
                return spec
        return None


class _SkippingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        _skip_tripwire()


_FINDER = _SkipTripwireOnImport()
_USERS = [0]  # active `dynamo_skips_tripwire` blocks: the import hook stays while any is open


@contextlib.contextmanager
def dynamo_skips_tripwire() -> Iterator[None]:
    """While active (and from then on, once dynamo is imported), dynamo runs tripwire's frames as they are."""
    if _DYNAMO in sys.modules:
        _skip_tripwire()
        yield
        return
    if not _USERS[0]:
        sys.meta_path.insert(0, _FINDER)
    _USERS[0] += 1
    try:
        yield
    finally:
        _USERS[0] -= 1
        if not _USERS[0] and _FINDER in sys.meta_path:
            sys.meta_path.remove(_FINDER)
