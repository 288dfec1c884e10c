"""An object's numbers, found by descending into it, and NumPy values as torch's: what a digest is taken of.

A value that is not a tensor, a NumPy array or scalar, a plain value or a container of them is reduced to a
digestible state (`object_state`): a module's or optimizer's state, any `state_dict()`, and any other object by its
fields (`__dict__` and `__slots__`), descended into until its numbers are found: a replay buffer's `_meta` batch, a
space's bounds, a dataclass of arrays. A value with no fields of its own is digested by what it holds (`_held`): a
deque, a set (sorted), bytes, a random generator's state, a NumPy array torch has no dtype for. The descent stops at
`MAX_DEPTH` objects deep and after `MAX_LEAVES` values (a capture of a whole simulator would digest everything it
holds), a wrapper chain (each link an object of its owner's family: gym's wrappers, each holding the next in `env`)
counting as one level for up to `MAX_CHAIN` links, and what it could not digest (a function or method, a module, a
class, a lock, torch's callable objects, an object built in C that neither has fields nor pickles, an object deeper
than the bound) is named in `skipped` and digested as `<skipped KIND>`. An object built in C with no fields is
digested by what pickling keeps of it (`_pickled`: a NumPy bit generator's state, a seed sequence, a compiled
pattern), and a NumPy masked array by its data, mask and fill value. A callable object of a class with fields (SB3's
`FloatSchedule`, a loss object) is read by its fields, and a `functools.partial` by its arguments.

`tripwire.bitwise.digest` digests what this gives; `tripwire.outside.capture` says when a capture digested no value.
"""

from __future__ import annotations

import array
import collections
import contextlib
import copyreg
import datetime
import decimal
import functools
import inspect
import random
import types
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["MAX_CHAIN", "MAX_DEPTH", "MAX_LEAVES", "Descent", "an_object", "numpy_tensor", "object_state", "plain_leaf"]

MAX_DEPTH = 6  # objects inside objects, below the captured one
# links of a wrapper chain (an object holding one of its own family: a gym wrapper's `env`, a VecEnv wrapper's
# `venv`) walked without going a level deeper, on one path; past them each link is a level again
MAX_CHAIN = 16
MAX_LEAVES = 20_000  # values digested of one capture, and objects read by their fields
# Objects never descended into: code, classes, modules, and what only a running process has (threads, locks, files)
# functions and methods (their numbers are their owners'), modules, classes: named as left out
_OPAQUE: tuple[type, ...] = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, types.ModuleType, type)
_OPAQUE += (types.MethodWrapperType, types.WrapperDescriptorType, types.MethodDescriptorType)
_OPAQUE_NAMES = ("lock", "thread", "event", "condition", "semaphore", "textiowrapper", "bufferedwriter", "logger")


class Descent:
    """One capture's walk: the objects on the way (no cycle is walked twice), the values counted, what was left out."""

    def __init__(self, skipped: list[str]) -> None:
        self.skipped = skipped
        self.leaves = 0
        self.on_path: set[int] = set()
        self.links = 0  # wrapper-chain links on the path walked now (`MAX_CHAIN`)
        self.objects = 0  # objects read by their fields: at most `MAX_LEAVES`, as values are

    def state(self, value: Any, path: str, depth: int) -> Any:
        """The digestible state of `value`, found at `path` inside the capture."""
        if isinstance(value, torch.nn.Module):
            return value.state_dict()
        if isinstance(value, torch.optim.Optimizer):
            params = [param for group in value.param_groups for param in group["params"]]
            return {"params": params, "state_dict": value.state_dict()}
        # looked up on its class: an instance's `__getattr__` (a gym wrapper's, forwarding with a warning) never runs
        if _state_dict_protocol(value):
            return value.state_dict()
        if _digestible(value):
            return self._contents(value, path, depth)
        held = _held(value)
        if held is not None:
            return self._contents(held, path, depth)
        return self._fields(value, path, depth)

    def _fields(self, value: Any, path: str, depth: int) -> Any:
        kind = type(value).__name__
        if _opaque(value):
            return self._skip(path, kind, "")
        if depth > MAX_DEPTH:
            return self._skip(path, kind, f"deeper than {MAX_DEPTH} objects")
        if id(value) in self.on_path:
            return self._skip(path, kind, "a cycle")
        if self.objects >= MAX_LEAVES:  # objects reached by many paths (a graph) are read once per path
            return self._skip(path, kind, f"past {MAX_LEAVES} objects")
        self.objects += 1
        fields = _has_dict(value) or any(getattr(cls, "__slots__", ()) for cls in type(value).__mro__)
        pickled = None if fields else _pickled(value)
        if not fields and pickled is None:
            return self._skip(path, kind, "no fields tripwire can read")  # built in C, and pickling keeps nothing
        self.on_path.add(id(value))
        try:
            if pickled is not None:  # built in C: what pickling keeps of it (a bit generator's state, a seed sequence)
                return {name: self._item(item, _join(path, name), depth + 1) for name, item in pickled.items()}
            own = _own_fields(value)
            link = self._link(value, own)
            return {
                name: self._field(item, _join(path, name), depth, link is not None and item is link)
                for name, item in own
            }
        finally:
            self.on_path.discard(id(value))

    def _link(self, owner: Any, fields: list[tuple[str, Any]]) -> Any:
        """The next link when `owner` is a link of a wrapper chain: the one field holding an object of its own
        family (a class both inherit from, other than `object` and Python's generic bases), as each gym wrapper holds
        the next in `env`; None when no field, or more than one (a tree, a graph), does, or the chain is long."""
        if self.links >= MAX_CHAIN:
            return None
        family = _family(type(owner))
        kin = [item for _, item in fields if not _digestible(item) and family & _family(type(item))]
        return kin[0] if len(kin) == 1 else None  # one field: another naming it too is a graph's second path

    def _field(self, value: Any, path: str, depth: int, link: bool) -> Any:
        """A field's state, a level below its owner's, or at its owner's level when it is the next link of a
        wrapper chain (`_link`): the environment under four gym wrappers is then as deep as the first."""
        if not link:
            return self.state(value, path, depth + 1)
        self.links += 1
        try:
            return self.state(value, path, depth)
        finally:
            self.links -= 1

    def _contents(self, value: Any, path: str, depth: int) -> Any:
        if isinstance(value, _NAMED):
            return str(value)
        if isinstance(value, Mapping):
            return {key: self._item(item, f"{path}[{key!r}]", depth) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self._item(item, f"{path}[{index}]", depth) for index, item in enumerate(value)]
        self.leaves += 1
        return value

    def _item(self, value: Any, path: str, depth: int) -> Any:
        if self.leaves >= MAX_LEAVES:
            return self._skip(path, type(value).__name__, f"past {MAX_LEAVES} values")
        if _digestible(value):
            return self._contents(value, path, depth)
        return self.state(value, path, depth + 1)

    def _skip(self, path: str, kind: str, why: str) -> str:
        self.skipped.append(f"{path.lstrip('.') or 'it'} ({kind}{': ' + why if why else ''})")
        return f"<skipped {kind}>"


def object_state(value: Any, skipped: list[str] | None = None) -> Any:
    """What a checkpoint digests of an object (the module docstring); what is left out is named in `skipped`."""
    return Descent([] if skipped is None else skipped).state(value, "", 0)


# torch's values that are what their name says (`torch.float32`, `cuda:0`, `torch.channels_last`)
_NAMED = (torch.device, torch.dtype, torch.layout, torch.memory_format)


def _digestible(value: Any) -> bool:
    """A tensor, a NumPy array or scalar, a plain value, a device or dtype, or a container (kept, its items judged
    one by one)."""
    return (
        value is None
        or isinstance(value, (torch.Tensor, Mapping, list, tuple, int, float, complex, str, bool, *_NAMED))
        or (type(value).__module__.startswith("numpy") and plain_leaf(value) is not value)
    )


def _held(value: Any) -> Any:
    """What a value of a kind with no fields of its own holds, in a form that is digested (None: not one of them): a
    deque, array or set as a list (a set sorted, so its order is not the hash seed's); bytes as a NumPy array of
    bytes; a NumPy array torch has no dtype for (strings, objects, records, datetimes) as its dtype, shape and items;
    a random generator as its state (torch's, NumPy's, Python's); a range, decimal, date or time as what it says; a
    `functools.partial` as its function and arguments."""
    if isinstance(value, (collections.deque, array.array)):
        return list(value)
    if isinstance(value, (set, frozenset)):
        try:
            return sorted(value)
        except TypeError:
            return sorted(value, key=lambda item: (type(item).__name__, repr(item)))
    if isinstance(value, (bytes, bytearray, memoryview)):
        import numpy

        return numpy.frombuffer(bytes(value), dtype=numpy.uint8).copy()
    if isinstance(value, range):
        return [value.start, value.stop, value.step]
    if isinstance(value, torch.Generator):
        return value.get_state()
    if isinstance(value, random.Random):
        return value.getstate()
    if isinstance(value, (decimal.Decimal, datetime.date, datetime.time, datetime.timedelta)):
        return repr(value)
    if isinstance(value, functools.partial):  # its arguments (the function itself is named as left out)
        return {"func": value.func, "args": list(value.args), "keywords": dict(value.keywords)}
    if type(value).__module__.startswith("numpy"):
        return _numpy_held(value)
    return None


def _numpy_held(value: Any) -> Any:
    import numpy

    if isinstance(value, numpy.dtype):
        return str(value)
    if isinstance(value, numpy.random.Generator):
        return value.bit_generator.state
    if isinstance(value, numpy.random.RandomState):
        return value.get_state(legacy=False)
    if isinstance(value, numpy.ma.MaskedArray):
        return {"data": value.data, "mask": numpy.ma.getmaskarray(value), "fill_value": value.fill_value}
    if isinstance(value, numpy.ndarray):
        if value.dtype.kind in "Mm":  # datetimes and durations: their int64 counts, and the unit in the dtype
            return {"dtype": str(value.dtype), "counts": value.view(numpy.int64)}
        return {"dtype": str(value.dtype), "shape": list(value.shape), "items": value.tolist()}
    return None


def _opaque(value: Any) -> bool:
    """Left out by name: a function, method, module, class, lock, thread or stream, and a callable object called in C
    (a NumPy ufunc, a numba or jax compiled function: their fields are their compilers' caches) or of torch's (a
    compiled function's callbacks, an op). A callable object whose `__call__` is Python's (a learning-rate schedule,
    a loss) is read by its fields, as any object is."""
    return (
        isinstance(value, _OPAQUE)
        or type(value).__name__.lower() in _OPAQUE_NAMES
        or (
            callable(value)
            and (
                type(value).__module__.partition(".")[0] == "torch"
                or not isinstance(inspect.getattr_static(type(value), "__call__", None), _PYTHON_CALLS)
            )
        )
    )


_PYTHON_CALLS = (types.FunctionType, staticmethod, classmethod)


_GENERIC_MODULES = frozenset({"builtins", "abc", "typing", "typing_extensions", "collections.abc"})


_FAMILIES: dict[type, frozenset[type]] = {}


def _family(kind: type) -> frozenset[type]:
    """The classes `kind` inherits from that say what it is: its MRO without `object`, Python's generic bases
    (`Generic`, `ABC`, `Protocol`) and the builtin kinds (a list, a dict, a number are never a wrapper)."""
    try:
        return _FAMILIES[kind]
    except (KeyError, TypeError):  # TypeError: a metaclass made the class unhashable, and it is not kept
        family = frozenset(cls for cls in kind.__mro__ if cls.__module__ not in _GENERIC_MODULES)
    if len(_FAMILIES) >= 4096:
        _FAMILIES.clear()
    with contextlib.suppress(TypeError):
        _FAMILIES[kind] = family
    return family


def _own_fields(value: Any) -> list[tuple[str, Any]]:
    """An object's fields: its `__dict__` entries and the `__slots__` of its classes that are set, dunders left out."""
    own = _read(value, "__dict__")
    fields = [
        (name, item) for name, item in (own if isinstance(own, dict) else {}).items() if not name.startswith("__")
    ]
    for cls in type(value).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if (
                isinstance(name, str)
                and not name.startswith("__")
                and (item := _read(value, name, _UNSET)) is not _UNSET
            ):
                fields.append((name, item))
    return fields


_UNSET = object()


def _state_dict_protocol(value: Any) -> bool:
    """Whether `value.state_dict()` is torch's protocol: a method on its class (so no `__getattr__` runs) that takes
    no argument; another `state_dict` (one needing a path, a plain attribute) leaves the object read by its fields."""
    method = getattr(type(value), "state_dict", None)
    if not callable(method) or isinstance(value, type):
        return False
    try:
        inspect.signature(value.state_dict).bind()
    except TypeError:
        return False
    except ValueError:  # no signature to read (built in C): taken at its word
        pass
    return True


def _read(value: Any, name: str, default: Any = None) -> Any:
    """`value.name` as the object holds it: never through its class's `__getattr__` (a wrapper forwarding to what it
    wraps, warning as it does), which a plain `getattr` runs for a name it lacks or a slot left unset."""
    try:
        return object.__getattribute__(value, name)
    except AttributeError:
        return default


def _has_dict(value: Any) -> bool:
    return isinstance(_read(value, "__dict__"), dict)


def _pickled(value: Any) -> dict[str, Any] | None:
    """What pickling keeps of an object built in C with no fields to read (`__reduce_ex__`): the arguments it is
    rebuilt from, its state, its items; None when it cannot be pickled or keeps nothing but its class. A reducer
    registered with `copyreg` (a compiled pattern's) comes first, as in `pickle`."""
    if type(value).__module__ == "itertools":  # pickling them warns (deprecated since Python 3.12): a warning of ours
        return None
    try:
        reducer = copyreg.dispatch_table.get(type(value))
        reduced = reducer(value) if reducer is not None else value.__reduce_ex__(4)
        if not isinstance(reduced, tuple) or len(reduced) < 2:
            return None  # a string: a global, named by it
        parts = (*reduced, None, None, None)[1:5]
        args = [arg for arg in parts[0] or () if not isinstance(arg, type)]  # `copyreg.__newobj__` is handed the class
        kept = {"args": args, "state": parts[1], "items": list(parts[2] or ()), "pairs": dict(parts[3] or {})}
    except Exception:  # refused (a lock, a stream): nothing read, left out by name
        return None
    kept = {
        name: part for name, part in kept.items() if part is not None and not (type(part) in (list, dict) and not part)
    }
    return kept or None


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def numpy_tensor(value: Any) -> torch.Tensor | None:
    """A NumPy array as a CPU tensor of the same dtype, shape and bytes (None: not an array, or a dtype torch has no
    counterpart for: objects, strings, datetimes)."""
    if not type(value).__module__.startswith("numpy"):
        return None
    import numpy

    if (
        not isinstance(value, numpy.ndarray)
        or value.dtype.kind not in "biufc"
        or isinstance(value, numpy.ma.MaskedArray)
    ):
        return None  # a masked array's mask is more than its bytes (`_numpy_held`)
    array = numpy.ascontiguousarray(value)
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    try:
        return torch.from_numpy(array)
    except TypeError:  # a dtype torch does not have (uint32 in old torch, float128)
        return None


def plain_leaf(leaf: Any) -> Any:
    """A NumPy array as its tensor (`numpy_tensor`), a NumPy scalar as its Python value; anything else as it is."""
    if type(leaf).__module__.startswith("numpy") and not isinstance(leaf, (float, int)):
        tensor = numpy_tensor(leaf)
        if tensor is not None:
            return tensor
        item = getattr(leaf, "item", None)
        if callable(item) and getattr(leaf, "ndim", None) == 0:
            return item()
    return leaf


def an_object(value: Any) -> bool:
    """Whether `value` is an object a digest descends into (`object_state`), not a value digested as it is: one
    `_digestible` (None, a bool, number or string, a container, a tensor, a NumPy array or scalar, a device, dtype),
    a generator or a module."""
    return not (_digestible(value) or isinstance(value, (torch.Generator, torch.nn.Module)))
