"""Stand-ins for the torch methods and functions the sync counter watches (`tripwire.sync.hooks`).

While a counter is active, each watched callable (`Tensor.item`, `.cpu`, `.to`, `__bool__`, `torch.tensor`, the host
factories, the place-keeping methods, ...) is replaced on `torch.Tensor` or in `torch` by a stand-in made here. On a
thread that does not count, or inside bookkeeping that is not counted (`ignore_syncs`, the body of a call already
counted), a stand-in calls the original at once; on a counting thread it hands the call to the counter's handler.
Every other torch call runs as it does without tripwire: a function mode, the earlier design, cost every torch call
of the loop a trip through Python (docs/measurements.md, "The cost of recording", item 9).

A call torch will hand to a `__torch_function__` handler (a tensor subclass's, a tensor-like's, a function mode's)
runs with torch's own functions in `torch` (`handed_over`, given by the counter): a handler that asks
`func is torch.stack`, or builds a table of torch's functions as it runs, meets torch's own objects, as it does
without tripwire, never a stand-in.

Dynamo traces through the stand-ins (this file is on its inline-when-called list) and, as it traces,
`is_dynamo_compiling()` is true, so what it puts in the graph is the original call: watching a compiled loop adds
no graph break. This module is kept small, importing nothing of tripwire but the inline list (and the mark of its
runners' code), for that reason.

A stand-in runs the original on the caller's line (`as_caller`) where torch's C++ may warn: a warning is the loop's,
at its line and under its filters, as without tripwire.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from types import CodeType, FrameType, FunctionType, MethodType
from typing import Any

import numpy as np
import torch

from tripwire.sync.dynamo import inline_when_called, never_compiled
from tripwire.sync.state import RUNNER_MARK

inline_when_called(__file__)

Handler = Callable[[Any, Any, tuple[Any, ...], dict[str, Any]], Any]
# runs a call with torch's own functions in `torch` (`tripwire.sync.explicit.with_own_functions`)
HandedOver = Callable[[Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any]

# What every stand-in asks first, as `torch.compiler.is_compiling()` answers it, a Python call shorter (that asks
# `torch.jit.is_scripting()` too, never true here): dynamo folds `is_dynamo_compiling()` to True as it traces, and
# runs it as False; torch.export's non-strict tracing, which runs the code, sets the flag
_DYNAMO_TRACING = torch.compiler.is_dynamo_compiling
_COMPILER: Any = torch.compiler

# What a stand-in runs its original through on the caller's behalf (`as_caller`): a call spelled at column 0 of the
# line after its `return`, padded past any line's length (a traceback through it underlines nothing), its code marked
# by its first constant so that tripwire's own frame walks pass it over (`state._role`). The call is the source's
# fourth line; a caller's line 1 to 3 gets the one-line form (a traceback through it may underline a stretch).
_RUN_SOURCE = f"def run(function, /, *args, **kwargs):\n    {RUNNER_MARK!r}\n    return \\\n"
_RUN_SOURCE += "function(*args, **kwargs" + " " * 4096 + ")\n"
_RUN_SHORT_SOURCE = f"def run(function, /, *args, **kwargs): {RUNNER_MARK!r}; return function(*args, **kwargs)\n"
_RUN, _RUN_SHORT = (
    next(c for c in compile(source, "<tripwire>", "exec").co_consts if isinstance(c, CodeType))
    for source in (_RUN_SOURCE, _RUN_SHORT_SOURCE)
)
_RUN_CALL_LINE = 4  # the line of `function(...)` in `_RUN_SOURCE`
# (the caller's code object's id, its instruction) -> the code (held, so the id is not reused while the entry stands;
# a key of the code object itself would hash its bytecode and constants at every call: 1.6 µs for a script's module
# code) and a runner wearing that code's file, name and line, its module's globals
_AS_CALLER: dict[tuple[int, int], tuple[CodeType, Callable[..., Any]]] = {}


def _run_here(function: Any, /, *args: Any, **kwargs: Any) -> Any:
    return function(*args, **kwargs)  # pass-through


def as_caller(frame: FrameType) -> Callable[..., Any]:
    """A runner (`runner(function, *args, **kwargs)` calls `function(*args, **kwargs)`) as if it were the caller's
    line: a warning torch's C++ raises while the original runs (TORCH_WARN, at Python's stack level 1: the innermost
    Python frame) is the caller's, its file, line and module, and registered in its module's `__warningregistry__`,
    so the loop's filters and once-per-line records apply as without tripwire. Called from a stand-in's frame, the
    warning was tripwire's: `torch.tensor(t)`'s copy-construct advice, NumPy data's "list of numpy.ndarrays is
    extremely slow", `std()` of one element, each shown at tripwire's line, once for every line of the loop, past a
    filter on the loop's module. One runner per call site, made on first use; where none can be made (a frame without
    a line), one of tripwire's own, as before."""
    code = frame.f_code
    key = (id(code), frame.f_lasti)  # not `f_lineno`, which decodes the line table up to the call
    entry = _AS_CALLER.get(key)
    if entry is None:
        entry = _AS_CALLER[key] = (code, _runner(frame, code, frame.f_lineno))
    return entry[1]


def _runner(frame: FrameType, code: CodeType, line: int | None) -> Callable[..., Any]:
    if line is None or line < 1:
        return _run_here
    template, first = (_RUN, line - _RUN_CALL_LINE + 1) if line >= _RUN_CALL_LINE else (_RUN_SHORT, line)
    made = template.replace(
        co_filename=code.co_filename, co_name=code.co_name, co_qualname=code.co_qualname, co_firstlineno=first
    )
    never_compiled(made)
    return FunctionType(made, frame.f_globals)


def forget_callers() -> None:
    """Drop the runners made (`as_caller`): each holds a code object and a module's globals of the loop."""
    _AS_CALLER.clear()


_HAS_HANDLER = torch._C._has_torch_function
_MODES_ON = torch._C._is_torch_function_mode_enabled
_SEQUENCES = (list, tuple)


def reaches_handler(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether torch hands this call to a `__torch_function__` handler: an argument's (one level into a list or tuple
    too, as `torch.stack` takes its tensors), a keyword argument's, or a function mode's other than torch's own
    device context (`with torch.device(...)`, `torch.set_default_device`), whose handler keys its table by torch's
    own functions, built before any stand-in (`tripwire.sync.explicit.build_torch_tables`). The stand-ins ask it only
    when one of its cheap tests could hold (an argument with a handler, keywords, a function mode on, a list or tuple
    first): the usual op, of plain tensors and no keywords, is a Python call shorter."""
    if _HAS_HANDLER(args):
        return True
    if args and type(args[0]) in _SEQUENCES and _HAS_HANDLER(args[0]):
        return True
    if kwargs and _HAS_HANDLER(tuple(kwargs.values())):
        return True
    return _MODES_ON() and _foreign_mode()


# Types no `__torch_function__` handler can come from (torch's own final types, NumPy's own array): asked of one,
# `torch._C._has_torch_function` looks the attribute up and fails, about 0.5 µs, at `.to(device)`, `.to(dtype)` and
# `torch.tensor(array)`, which the stand-ins of moves and builders meet at every step of a loop: a last argument of
# one is not asked
_QUIET = frozenset({torch.device, torch.dtype, np.ndarray})


def _foreign_mode() -> bool:
    from torch.utils._device import DeviceContext

    stack = torch._C._len_torch_function_stack()
    return any(type(torch._C._get_function_stack_at(at)) is not DeviceContext for at in range(stack))


def stand_in(
    key: Any,
    original: Any,
    handle: Handler,
    local: Any,
    elsewhere: Callable[[], bool],
    handed_over: HandedOver,
    *,
    receiver: bool = False,
) -> Callable[..., Any]:
    """A function to put where `original` was: `handle(key, original, args, kwargs)` on a counting thread
    (`local.counting`, or `elsewhere()`: autograd's device thread running a counting thread's backward) outside
    suppressed code, else `original(*args, **kwargs)` on the caller's line (`as_caller`; `handle` runs it so too);
    through `handed_over` when a `__torch_function__` handler will see the call. `key` is torch's own function, which
    the handler classifies the call by (`original` may be another tool's wrapper around it). With `receiver`, it is a
    `TorchFunction`'s `__call__`: the same function with the stand-in object first (written out, not wrapped: the
    classifiers look a fixed number of frames up)."""

    def body(*args: Any, **kwargs: Any) -> Any:
        if local.suppress or (local.counting <= 0 and not elsewhere()):
            return original(*args, **kwargs)  # pass-through
        return handle(key, original, args, kwargs)  # pass-through

    def watched(*args: Any, **kwargs: Any) -> Any:
        if _DYNAMO_TRACING() or _COMPILER._is_compiling_flag:
            return original(*args, **kwargs)  # pass-through
        if (
            _HAS_HANDLER(args[:-1] if args and type(args[-1]) in _QUIET else args)
            or kwargs
            or _MODES_ON()
            or (args and type(args[0]) in _SEQUENCES)
        ) and reaches_handler(args, kwargs):
            return handed_over(body, args, kwargs)  # pass-through
        if local.suppress or (local.counting <= 0 and not elsewhere()):
            return as_caller(sys._getframe(1))(original, *args, **kwargs)  # pass-through
        return handle(key, original, args, kwargs)  # pass-through

    def called(_function: Any, *args: Any, **kwargs: Any) -> Any:
        if _DYNAMO_TRACING() or _COMPILER._is_compiling_flag:
            return original(*args, **kwargs)  # pass-through
        if (
            _HAS_HANDLER(args[:-1] if args and type(args[-1]) in _QUIET else args)
            or kwargs
            or _MODES_ON()
            or (args and type(args[0]) in _SEQUENCES)
        ) and reaches_handler(args, kwargs):
            return handed_over(body, args, kwargs)  # pass-through
        if local.suppress or (local.counting <= 0 and not elsewhere()):
            return as_caller(sys._getframe(1))(original, *args, **kwargs)  # pass-through
        return handle(key, original, args, kwargs)  # pass-through

    return _named(called if receiver else watched, original)


_BELOW_AUTOGRAD = torch._C._AutoDispatchBelowAutograd
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _keywords(original: Any) -> frozenset[str] | None:
    """The keywords a function written in Python takes (None: any, or a builtin whose signature is not read)."""
    try:
        parameters = inspect.signature(original).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters):
        return None
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return frozenset(parameter.name for parameter in parameters if parameter.kind in keyword)


def counted_stand_in(
    kind: str,
    original: Any,
    deliver: Callable[[str], None],
    local: Any,
    elsewhere: Callable[[], bool],
    scalar: bool,
    handed_over: HandedOver,
    in_host_memory: Callable[[object], bool],
    *,
    receiver: bool = False,
    copied: Callable[[object, object], Any] | None = None,
) -> Callable[..., Any]:
    """A stand-in for a read that syncs (`Tensor.item`, `.cpu`, `__bool__`, ...): on a counting thread outside
    suppressed code, `deliver(kind)`, then the original with counting suppressed, so nothing it runs counts again
    (what `stand_in` and the counter's handler do for these calls, two frames shorter). A read of a tensor built in
    host memory (`in_host_memory`, asked only once one is) waits for nothing, on a GPU run too: it runs the same
    way, uncounted. A `scalar` read (its only op `_local_scalar_dense`, which has no autograd formula) of a plain
    tensor runs below autograd: the same kernel, not the counting kernel registered at the autograd key, which would
    only return at once here. `receiver`: as `stand_in`'s. `copied`: called with the tensor read and the result of a
    counted copy to the host (`.cpu()`: `explicit.copied_to_host`), and what it returns is given back. A call the
    original refuses at a keyword it does not take reads nothing, and is not counted: NumPy 2's `np.array(t)` asks
    torch's `__array__(self, dtype=None)` with `copy=` first, then, refused, without (one read, counted once)."""
    takes = _keywords(original)

    def body(*args: Any, **kwargs: Any) -> Any:
        if local.suppress or (local.counting <= 0 and not elsewhere()):
            return original(*args, **kwargs)  # pass-through
        if kwargs and takes is not None and not takes.issuperset(kwargs):
            return original(*args, **kwargs)  # pass-through: refused at its arguments, it raises
        counted = not (args and in_host_memory(args[0]))
        if counted:
            deliver(kind)
        local.suppress += 1
        try:
            result = original(*args, **kwargs)  # pass-through
        finally:
            local.suppress -= 1
        if counted and copied is not None:
            return copied(args[0] if args else None, result)
        return result

    def watched(*args: Any, **kwargs: Any) -> Any:
        if _DYNAMO_TRACING() or _COMPILER._is_compiling_flag:
            return original(*args, **kwargs)  # pass-through
        if (_HAS_HANDLER(args) or kwargs or _MODES_ON() or (args and type(args[0]) in _SEQUENCES)) and reaches_handler(
            args, kwargs
        ):
            return handed_over(body, args, kwargs)  # pass-through
        if local.suppress or (local.counting <= 0 and not elsewhere()):
            return original(*args, **kwargs)  # pass-through
        if kwargs and takes is not None and not takes.issuperset(kwargs):
            return original(*args, **kwargs)  # pass-through: refused at its arguments, it raises
        counted = not (args and in_host_memory(args[0]))
        if counted:
            deliver(kind)
        local.suppress += 1
        try:
            if scalar and args and type(args[0]) in _PLAIN:
                with _BELOW_AUTOGRAD():
                    return original(*args, **kwargs)  # pass-through
            result = original(*args, **kwargs)  # pass-through
        finally:
            local.suppress -= 1
        if counted and copied is not None:
            return copied(args[0] if args else None, result)
        return result

    def called(_function: Any, *args: Any, **kwargs: Any) -> Any:
        if _DYNAMO_TRACING() or _COMPILER._is_compiling_flag:
            return original(*args, **kwargs)  # pass-through
        if (_HAS_HANDLER(args) or kwargs or _MODES_ON() or (args and type(args[0]) in _SEQUENCES)) and reaches_handler(
            args, kwargs
        ):
            return handed_over(body, args, kwargs)  # pass-through
        if local.suppress or (local.counting <= 0 and not elsewhere()):
            return original(*args, **kwargs)  # pass-through
        if kwargs and takes is not None and not takes.issuperset(kwargs):
            return original(*args, **kwargs)  # pass-through: refused at its arguments, it raises
        counted = not (args and in_host_memory(args[0]))
        if counted:
            deliver(kind)
        local.suppress += 1
        try:
            if scalar and args and type(args[0]) in _PLAIN:
                with _BELOW_AUTOGRAD():
                    return original(*args, **kwargs)  # pass-through
            result = original(*args, **kwargs)  # pass-through
        finally:
            local.suppress -= 1
        if counted and copied is not None:
            return copied(args[0] if args else None, result)
        return result

    return _named(called if receiver else watched, original)


def keeping_stand_in(
    original: Any,
    mark: Callable[[tuple[Any, ...], dict[str, Any], Any], None],
    marked: Any,
    local: Any,
    elsewhere: Callable[[], bool],
    handed_over: HandedOver,
    host_built: Callable[[object], bool],
    *,
    warns: bool = False,
    receiver: bool = False,
) -> Callable[..., Any]:
    """A stand-in for a method whose result stays where its input is (`.view`, `.float()`, `.detach()`, ...), or where
    its tensors are (an operator, a reduction: `i + 1`, `x.sum()`, `torch.where(done, 0.0, ret)`): on a counting
    thread outside suppressed code, the original, then `mark(args, kwargs, result)` (a host-built input's result is
    host-built too), what the counter's handler does for these calls, a frame and a classification shorter.
    `marked` is the table of host-built tensors: while it is empty no input can be one, and nothing is asked. Nor is it
    when the first input is a tensor and not host-built (`host_built`, `copies.host_born`): every `mark` marks only
    what a host-built first input makes (a place-keeping method's result, or an op's whose tensors are all host-built),
    and a loop's ops are nearly all of device tensors, so the usual call costs one lookup, not `mark`'s frames.
    `warns`: the original warns from C++ in ordinary use (`x.std()` of one element), so it runs on the caller's line
    (`as_caller`), at about 0.5 µs a call, which the others do not pay. `receiver`: as `stand_in`'s (a function in
    `torch`)."""
    run = original
    if warns:

        def run(*args: Any, **kwargs: Any) -> Any:
            return as_caller(sys._getframe(2))(original, *args, **kwargs)  # pass-through

    def body(*args: Any, **kwargs: Any) -> Any:
        if local.suppress or (local.counting <= 0 and not elsewhere()):
            return run(*args, **kwargs)  # pass-through
        result = run(*args, **kwargs)  # pass-through
        if marked and args and (not isinstance(args[0], torch.Tensor) or host_built(args[0])):
            mark(args, kwargs, result)
        return result

    def watched(*args: Any, **kwargs: Any) -> Any:
        if _DYNAMO_TRACING() or _COMPILER._is_compiling_flag:
            return original(*args, **kwargs)  # pass-through
        if (_HAS_HANDLER(args) or kwargs or _MODES_ON() or (args and type(args[0]) in _SEQUENCES)) and reaches_handler(
            args, kwargs
        ):
            return handed_over(body, args, kwargs)  # pass-through
        if local.suppress or (local.counting <= 0 and not elsewhere()):
            return run(*args, **kwargs)  # pass-through
        result = run(*args, **kwargs)  # pass-through
        if marked and args and (not isinstance(args[0], torch.Tensor) or host_built(args[0])):
            mark(args, kwargs, result)
        return result

    def called(_function: Any, *args: Any, **kwargs: Any) -> Any:
        if _DYNAMO_TRACING() or _COMPILER._is_compiling_flag:
            return original(*args, **kwargs)  # pass-through
        if (_HAS_HANDLER(args) or kwargs or _MODES_ON() or (args and type(args[0]) in _SEQUENCES)) and reaches_handler(
            args, kwargs
        ):
            return handed_over(body, args, kwargs)  # pass-through
        if local.suppress or (local.counting <= 0 and not elsewhere()):
            return run(*args, **kwargs)  # pass-through
        result = run(*args, **kwargs)  # pass-through
        if marked and args and (not isinstance(args[0], torch.Tensor) or host_built(args[0])):
            mark(args, kwargs, result)
        return result

    return _named(called if receiver else watched, original)


class WatchedMethod:
    """What stands on `torch.Tensor` for a watched method while a counter is active: the class's attribute
    (`torch.Tensor.item`: what code compares with `is`, keys a table by, or what torch hands a `__torch_function__`
    handler) is torch's own object, so no one can capture or meet a stand-in there; an instance's (`t.item`, what a
    call runs, and what Python's slots call for `bool(t)`) is the counting stand-in, bound to the tensor. A method
    reached through the class (`torch.Tensor.item(t)`) therefore runs torch's own, uncounted, as a reference taken
    before the counter started does."""

    __slots__ = ("own", "watched")

    def __init__(self, own: Any, watched: Callable[..., Any]) -> None:
        self.own = own
        self.watched = watched

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if instance is None:
            return self.own
        return MethodType(self.watched, instance)


def _named(watched: Callable[..., Any], original: Any) -> Callable[..., Any]:
    """`watched` read as `original` by code that inspects it: its name, module and docstring, and `__wrapped__`,
    which `inspect.signature` follows (torch's builtins have none: it raises ValueError, as it does for them) and
    `inspect.unwrap` returns."""
    name = getattr(original, "__name__", "watched")
    watched.__name__ = name
    watched.__qualname__ = getattr(original, "__qualname__", name)
    watched.__doc__ = getattr(original, "__doc__", None)
    watched.__module__ = getattr(original, "__module__", None)  # type: ignore[assignment]
    watched.__wrapped__ = original  # type: ignore[attr-defined]
    return watched


class _Module:
    """A module named in a pickle: unpickled, `importlib.import_module(name)`, in any process, tripwire or not."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __reduce__(self) -> tuple[Any, ...]:
        return (importlib.import_module, (self.name,))


class TorchFunction:
    """Base of the stand-ins for functions in `torch` (`torch.zeros`, `torch.stack`, ...), one subclass per function
    whose `__call__` is the stand-in. A reference taken while a counter is active (`factory = torch.zeros`, in a
    class body, a `functools.partial`, a table) is the stand-in, and outlives the recording; it behaves as torch's
    function there too: a call after the recording is torch's own call; stored on a class it is not bound as a method
    (a Python function would be: `self` passed as its first argument); it pickles and copies as a reference to
    `torch.<name>`, resolved where it is loaded (a pickle names no tripwire); it equals and hashes as torch's
    function. Only `is` tells them apart."""

    __slots__ = ()
    _own: Any = None
    _owner = "torch"
    _attribute = ""
    # set on each function's subclass: the stand-in made with `receiver` (a method, which dynamo traces into; a
    # staticmethod it refuses, and a call that wraps it costs a frame the classifiers' fixed depths do not expect)
    __call__: Callable[..., Any]

    def __reduce__(self) -> tuple[Any, ...]:
        return (getattr, (_Module(self._owner), self._attribute))

    def __eq__(self, other: object) -> bool:
        return other is self or other is self._own or (isinstance(other, TorchFunction) and other._own is self._own)

    def __hash__(self) -> int:
        return hash(self._own)

    def __repr__(self) -> str:
        return repr(self._own)

    def __getattr__(self, name: str) -> Any:  # what the stand-in does not say itself: torch's function's
        return getattr(self._own, name)


# One stand-in per function of torch's, for the process: dynamo guards a compiled function on the identity of the
# object it found in `torch`, so a new object at each recording would recompile a function the last one warmed up
_TORCH_FUNCTIONS: dict[tuple[str, int], TorchFunction] = {}


def torch_function(called: Callable[..., Any], own: Any, attribute: str) -> TorchFunction:
    """The stand-in for `torch.<attribute>` (torch's own: `own`), a `TorchFunction` whose call is `called` (a stand-in
    made with `receiver`): the same object at every recording in this process, calling this recording's stand-in."""
    known = _TORCH_FUNCTIONS.get((attribute, id(own)))
    if known is not None:
        type(known).__call__ = called  # type: ignore[method-assign]
        return known
    names = {name: getattr(called, name) for name in ("__name__", "__qualname__", "__doc__", "__wrapped__")}
    body = {"__call__": called, "__slots__": (), "_own": own, "_attribute": attribute}
    kind = type(getattr(own, "__name__", attribute), (TorchFunction,), {**body, **names, "__module__": own_module(own)})
    made = _TORCH_FUNCTIONS[(attribute, id(own))] = kind()
    return made  # type: ignore[no-any-return]


def own_module(own: Any) -> str:
    module = getattr(own, "__module__", None)
    return module if isinstance(module, str) else "torch"
