"""The stand-in an instrument puts in front of a callable, and how torch.compile is kept from seeing it.

`stand_in(original, call)` is a real function carrying the original's name, docstring and signature, so it binds
like the original (a method stays a method) and `torch.compile` treats it like the original: compiling a bound
method compiles a frame, not a callable object that dynamo would wrap in one of its own.

Dynamo meets a stand-in in two ways, and `tripwire.sync.dynamo` tells it what to do with each:
- as the top frame of a compiled call (the loop compiles a function an instrument stands in front of): tripwire's
  frames are on dynamo's skip list, so the stand-in and its instruments run as they are, and the original is
  compiled as its own frame, with its own name, exactly as without tripwire;
- called from code dynamo is tracing (an instrument on a function that compiled code inlines): this file is on
  dynamo's inline-when-called list, and `torch.compiler.is_compiling()` sends the trace straight to the original,
  so the graph is the one the loop has without tripwire. An instrument cannot act inside a graph: such calls are
  not counted, regioned or checkpointed (`calls` says how often the instrument ran).

`torch.compile(f)` marks `f`'s code to be compiled whatever its frame holds; the loop that compiles a function an
instrument stands in front of marks the stand-in's, and without the mark dynamo skips a frame whose arguments show
it no tensor (a batch object of the loop's: LeanRL's TensorDicts), running it eagerly and compiling what it calls as
frames of their own. The stand-in passes the mark on to the original, as the loop alone would have it.

`torch.compiler.disable(f, recursive=False)` of a stand-in returns a wrapper that dynamo recognises in the frame
that calls `f`: that frame alone runs eagerly, what it calls is compiled. The stand-in comes between the wrapper and
the original, which dynamo then compiled (its graph breaks included). Called from that wrapper while a compiled
function runs, the stand-in calls the original through one of dynamo's own, and the original's frame is skipped.

"""

from __future__ import annotations

import functools
import inspect
import sys
import types
from collections.abc import Callable
from typing import Any

import torch
from torch.compiler import is_compiling

from tripwire.sync.dynamo import (
    called_nonrecursively_disabled,
    inline_when_called,
    marked_as_compiled,
    nonrecursively_disabled,
)
from tripwire.sync.state import compiler_at_work

__all__ = ["StandInObject", "sources_name_originals", "stand_in", "stands_as_object"]

Call = Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]
# Dynamo's frame callback on this thread (None when no compiled function runs): set by the compiled wrapper before it
# calls the stand-in the loop compiled, so a stand-in called from eager code asks no more than this (a torch without
# the getter: always asked)
_callback_set = getattr(torch._C._dynamo.eval_frame, "get_eval_frame_callback", lambda: True)


def stand_in(original: Any, call: Call) -> Callable[..., Any]:
    """A function standing in for `original` that runs `call(original, args, kwargs)`; inside a graph dynamo traces,
    and while torch.compile runs it for itself (on torch 2.11 AOT Autograd calls a compiled method again as it
    compiles), `original` itself. (A closure: only a real function binds and compiles like the function it replaces.)

    Each stand-in has a code object of its own, so `torch.compile`'s mark on the code of what it compiles names this
    one: the first call after the loop compiled it passes the mark on to the original (`marked_as_compiled`).

    A stand-in reads the original's module namespace as its `__globals__`: TorchScript compiles the original's source
    (`inspect` unwraps the stand-in) but resolves its names in the `__globals__` and free variables of the function it
    is given, and `torch.jit.script(model)` with a region on `forward` failed on the forward's first name that
    tripwire's module lacks ("undefined value F"). So the stand-in's body reads no global name: what it calls is
    bound here, under names of tripwire's own, which the original's source cannot mean."""
    _tripwire_original, _tripwire_call = original, call
    _tripwire_unmarked = hasattr(original, "__code__")  # until the mark is passed on (its code read then)
    _tripwire_skipped_alone: Any = None  # the original behind dynamo's non-recursive disable wrapper, made on need
    _tripwire_stand: Any = None  # this stand-in, once made
    _tripwire_compiling, _tripwire_at_work, _tripwire_callback = is_compiling, compiler_at_work, _callback_set
    _tripwire_marked, _tripwire_frame = marked_as_compiled, sys._getframe
    _tripwire_from_disabled, _tripwire_disabled = called_nonrecursively_disabled, nonrecursively_disabled

    def stand(*args: Any, **kwargs: Any) -> Any:
        nonlocal _tripwire_unmarked, _tripwire_skipped_alone
        if _tripwire_compiling() or _tripwire_at_work():  # traced into a graph, or run by the compiler for itself
            return _tripwire_original(*args, **kwargs)  # pass-through
        if _tripwire_callback() is not None:  # a compiled function runs: dynamo is to see the original as alone
            if _tripwire_unmarked and _tripwire_marked(_tripwire_stand.__code__, _tripwire_original.__code__):
                _tripwire_unmarked = False
            if _tripwire_from_disabled(_tripwire_frame(1).f_code):
                if _tripwire_skipped_alone is None:
                    _tripwire_skipped_alone = _tripwire_disabled(_tripwire_original)
                return _tripwire_call(_tripwire_skipped_alone, args, kwargs)  # pass-through
        return _tripwire_call(_tripwire_original, args, kwargs)  # pass-through

    async def stand_awaited(*args: Any, **kwargs: Any) -> Any:  # an `async def` original's: see `_body_like`
        return await _tripwire_call(_tripwire_original, args, kwargs)  # pass-through

    def stand_iterated(*args: Any, **kwargs: Any) -> Any:  # a generator function's: see `_body_like`
        if _tripwire_compiling() or _tripwire_at_work():  # traced into a graph: the original alone
            return (yield from _tripwire_original(*args, **kwargs))  # pass-through
        return (yield from _tripwire_call(_tripwire_original, args, kwargs))  # pass-through

    async def stand_async_iterated(*args: Any, **kwargs: Any) -> Any:  # an async generator function's
        steps = _tripwire_call(_tripwire_original, args, kwargs)
        value: Any = None
        error: BaseException | None = None
        while True:  # `yield from` for an async generator: what is sent or thrown in goes through, as is closing
            try:
                item = await (steps.asend(value) if error is None else steps.athrow(error))
            except StopAsyncIteration:
                return
            value, error = None, None
            try:
                value = yield item
            except GeneratorExit:
                await steps.aclose()
                raise
            except BaseException as raised:  # thrown in by the consumer: into the inner generator
                error = raised

    bodies = {"awaited": stand_awaited, "iterated": stand_iterated, "async iterated": stand_async_iterated}
    body = bodies.get(_body_like(original), stand)
    flags = body.__code__.co_flags | (getattr(original, "__code__", body.__code__).co_flags & _KEPT_FLAGS)
    namespace = getattr(original, "__globals__", None)
    made = types.FunctionType(
        body.__code__.replace(co_flags=flags),  # its own: the closure's code is shared by every stand-in
        namespace if isinstance(namespace, dict) else body.__globals__,
        body.__name__,
        None,
        body.__closure__,
    )
    functools.update_wrapper(made, original)
    _with_methods_of(made, original)
    _tripwire_stand = made
    return made


def sources_name_originals(get: Callable[..., Any]) -> Callable[..., Any]:
    """`torch._sources.get_source_lines_and_file` naming the original's file for a stand-in. TorchScript compiles a
    function's source from `inspect.getsourcelines`, which unwraps the stand-in, and names its file from
    `inspect.getsourcefile`, which does not: a scripted module's graph, and the traceback of an error raised in its
    scripted `forward`, named tripwire's stand.py at the loop's own line numbers."""

    @functools.wraps(get)
    def lines_and_file(obj: Any, *args: Any, **kwargs: Any) -> Any:
        lines, first, filename = get(obj, *args, **kwargs)
        code = getattr(obj, "__code__", None)
        if isinstance(code, types.CodeType) and code.co_filename == _STAND_FILE:
            filename = inspect.getsourcefile(inspect.unwrap(obj)) or filename
        return lines, first, filename

    return lines_and_file


# A flag of the original's code the stand-in's keeps: `types.coroutine` marks a generator awaitable by it
_KEPT_FLAGS = inspect.CO_ITERABLE_COROUTINE


def _body_like(original: Any) -> str:
    """What kind of function `original` is by its code's flags, for a stand-in of the same kind: "awaited" (an
    `async def`), "iterated" (a generator function), "async iterated" (an async generator function), or "" (plain).
    A loop, or the framework it runs on, asks `inspect.iscoroutinefunction` or `isgeneratorfunction` (or asyncio's)
    of what it is handed to choose how to run it (Ray makes an actor async when one of its methods is, and streams
    what a generator task yields; an ASGI server runs a plain endpoint on its thread pool; pytest drives a generator
    fixture), and Python 3.11 answers from the function's code flags alone. Such a stand-in runs the instrument when
    first awaited or iterated, where the original's body starts, so one never run is not counted as a call. Read from
    the flags, not `inspect.iscoroutinefunction`, which from Python 3.12 also says True of a plain function marked as
    one (`inspect.markcoroutinefunction`): that stand-in stays plain, returning what the original returns, and
    carries the mark (`functools.update_wrapper`)."""
    if not isinstance(original, types.FunctionType):
        return ""
    flags = original.__code__.co_flags
    if flags & inspect.CO_COROUTINE:
        return "awaited"
    if flags & inspect.CO_ASYNC_GENERATOR:
        return "async iterated"
    return "iterated" if flags & inspect.CO_GENERATOR else ""


def stands_as_object(original: Any) -> bool:
    """Whether `original` is a callable that is not a function (an object of a class with `__call__`: a
    `torch.library.custom_op`, a `functools.partial`, a scripted function), which a function standing in its place
    could only call: the loop's `@op.register_fake` then failed with "'function' object has no attribute". A
    descriptor that binds when read from a class (a C method, `Tensor.add`; an `lru_cache`d method; a Cython
    function) binds like a function, which is what stands in for it, with the original's methods (`stand_in`): an
    object with a `__get__` of its own is a frame dynamo cannot trace. A partial is no such descriptor before Python
    3.14, whatever its `__get__` (3.13 gave it one that only warns): a class attribute of it is not bound."""
    if not callable(original) or isinstance(original, _ROUTINES):
        return False
    return not hasattr(type(original), "__get__") or (isinstance(original, functools.partial) and not _PARTIAL_BINDS)


_ROUTINES = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, types.BuiltinMethodType)
_PARTIAL_BINDS = sys.version_info >= (3, 14)  # `functools.partial` a method descriptor


def _with_methods_of(made: Any, original: Any) -> None:
    """Give a function standing in for a callable object that binds like a function (an `lru_cache` wrapper, a
    Cython function) that object's methods and callable attributes, bound to it, which the loop may call through
    the stand-in (`Table.row.cache_info()`, `cache_clear()`); a value that is not callable may change, and is left
    to the original, but for a partial's (`args`, `keywords`: read-only, from Python 3.14 on where it binds)."""
    if isinstance(original, _ROUTINES) or not hasattr(type(original), "__get__"):
        return
    for name in dir(original):
        if name.startswith("__") or hasattr(made, name):
            continue
        try:
            value = getattr(original, name)
        except Exception:  # an attribute the object computes and refuses: left to the original
            continue
        if callable(value) or isinstance(original, functools.partial):
            made.__dict__[name] = value


class _StandIn:
    """What `StandInObject` does; its two kinds differ in having a `__dict__` (the original's) or none."""

    __slots__ = ()
    _tripwire_original: Any
    _tripwire_call: Call

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        original = self._tripwire_original
        if is_compiling() or compiler_at_work():  # traced into a graph, or run by the compiler for itself
            return original(*args, **kwargs)  # pass-through
        return self._tripwire_call(original, args, kwargs)  # pass-through

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tripwire_original, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._tripwire_original, name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._tripwire_original, name)

    @property  # type: ignore[misc]  # the original's class, so `isinstance(stand, CustomOpDef)` holds as for it
    def __class__(self) -> type:
        return type(self._tripwire_original)

    @property
    def __wrapped__(self) -> Any:  # what `inspect.unwrap` and `inspect.signature` follow
        return self._tripwire_original

    def __repr__(self) -> str:
        return repr(self._tripwire_original)

    def __str__(self) -> str:
        return str(self._tripwire_original)

    def __dir__(self) -> list[str]:
        return dir(self._tripwire_original)

    def __eq__(self, other: object) -> bool:
        original = self._tripwire_original
        return bool(original == (other._tripwire_original if isinstance(other, _StandIn) else other))

    def __hash__(self) -> int:
        return hash(self._tripwire_original)

    def __reduce_ex__(self, protocol: Any) -> Any:  # pickled as the original
        return self._tripwire_original.__reduce_ex__(protocol)


class StandInObject(_StandIn):
    """A stand-in for a callable that is not a function: a call runs `call(original, args, kwargs)` (the original
    itself inside a graph dynamo traces, and while torch.compile runs it for itself), and everything else is the
    original's: its attributes and methods (read, set, deleted), `isinstance`, equality, hashing, `repr`, pickling,
    `vars()`. Only `type()` and `is` tell it apart. (A class is not stood in for: an instance pickles by its class's
    name.) An original without a `__dict__` (a class with `__slots__`) gets a stand-in without one, so `vars()` of
    it raises as of the original instead of answering an empty dict of the stand-in's own."""

    __slots__ = ("__dict__", "__weakref__", "_tripwire_call", "_tripwire_original")

    def __new__(cls, original: Any, call: Call) -> Any:
        attributes = getattr(original, "__dict__", None)
        made = object.__new__(cls if isinstance(attributes, dict) else _StandInWithoutDict)
        object.__setattr__(made, "_tripwire_original", original)
        object.__setattr__(made, "_tripwire_call", call)
        if isinstance(attributes, dict):  # the original's own, shared: `vars()`, and dynamo's guards on the object
            object.__setattr__(made, "__dict__", attributes)
        return made


class _StandInWithoutDict(_StandIn):
    """`StandInObject`'s for an original without a `__dict__`."""

    __slots__ = ("__weakref__", "_tripwire_call", "_tripwire_original")


_STAND_FILE = stand_in.__code__.co_filename
inline_when_called(__file__)
