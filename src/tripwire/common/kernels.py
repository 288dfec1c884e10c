"""Kernels registered over ops' own (`torch.library`), for a watch that must see an op on every thread at the cost of
that op alone: the sync counter's implicit-sync kernels (`tripwire.sync.implicit`) and the vendor-bound op watch
(`tripwire.bitwise.vendor_ops`).

`override_kernels` registers, for each `(op, dispatch key)`, the kernel `make(op, key, original)` returns, where
`original` is the op's own kernel at that key (`torch.library.get_kernel`, torch 2.9 and later; call it with
`original.call_boxed(keyset, *args, **kwargs)`); all of them or none. `restore_kernels` destroys what it registered,
which puts every op's own kernel back. `cpu_overloads` lists the registered ops a watch of CPU kernels covers.

A kernel registered from Python is handed its arguments as Python objects, and torch hands a tensor marked a wrapped
number (a Python number a C++ caller gave for a tensor: a constant of a `torch.jit.trace`d graph, `t.copy_(2.5)`,
TorchScript's own passes comparing constants with `aten::equal`) as the number again, which the op's own kernel
refuses ("Expected a value of type 'Tensor'"). `numbers_as_tensors` hands such numbers on as the 0-d host tensor
torch made of them, before the pass-through: the same dtype and value, without the wrapped-number mark (Python cannot
set it), which only a 0-d by 0-d op's type promotion reads.

torch 2.13 and before warn, once a process, on the first kernel registered over another ("Overriding a previously
registered kernel"): on purpose here, so that warning alone is ignored while registering (`tripwire.common.quiet`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from tripwire.common.quiet import ignoring

__all__ = [
    "NUMBERS",
    "cpu_overloads",
    "numbers_as_tensors",
    "override_kernels",
    "restore_kernels",
    "tensor_positions",
    "wrapped",
]

# every dispatch key by name, read once: `get_kernel` given a key's name builds this table again (about 8 µs: torch's
# 145 keys as a Python dict) at each call, and a counter's start asks for about 800 kernels
_KEYS: dict[str, Any] = dict(torch._C.DispatchKey.__members__)


def cpu_overloads(selected: Callable[[str], bool]) -> tuple[str, ...]:
    """Every registered op (`namespace::name.overload`) that `selected` takes and that has a CPU kernel of its own,
    sorted. Walking every op name costs about 3 ms: a watch whose list is fixed once torch is imported keeps it."""
    return tuple(
        sorted(
            full
            for full in torch._C._dispatch_get_all_op_names()
            if selected(full) and torch._C._dispatch_has_kernel_for_dispatch_key(full, "CPU")
        )
    )


def override_kernels(
    targets: Iterable[tuple[str, str]], make: Callable[[str, str, Any], Callable[..., Any]]
) -> list[torch.library.Library]:
    """Register `make(op, key, original)` over each op (`namespace::name.overload`) at its dispatch key; the kernel
    takes the dispatch keyset first. Returns the libraries holding them (one per namespace), for `restore_kernels`.
    Where a registration fails, the ones made before it are undone and the error is raised."""
    libraries: dict[str, torch.library.Library] = {}
    try:
        with ignoring(".*Overriding a previously registered kernel"):
            for full, key in targets:
                namespace, _, name = full.partition("::")
                library = libraries.get(namespace)
                if library is None:
                    library = libraries[namespace] = torch.library.Library(namespace, "IMPL")
                original = torch.library.get_kernel(full, _KEYS[key])
                library.impl(name, make(full, key, original), key, with_keyset=True)
    except BaseException:
        restore_kernels(list(libraries.values()))
        raise
    return list(libraries.values())


def restore_kernels(libraries: list[torch.library.Library]) -> None:
    """Put back every op's own kernel under the overrides these libraries hold (emptying the list)."""
    while libraries:
        libraries.pop()._destroy()


_FROM_NUMPY = torch.from_numpy  # torch's own, taken before any stand-in stands there
# the dtype of the 0-d host tensor torch makes of a Python number given for a tensor
_WRAPPED: dict[type, type] = {bool: np.bool_, int: np.int64, float: np.float64, complex: np.complex128}
NUMBERS = frozenset(_WRAPPED)


def wrapped(number: Any) -> Any:
    """A number given for a tensor, as the 0-d host tensor torch made of it: the number's own dtype, in host memory,
    built without an op a dispatch mode would see (`from_numpy` wraps NumPy's memory)."""
    try:
        return _FROM_NUMPY(np.array(number, dtype=_WRAPPED[type(number)]))
    except (OverflowError, TypeError):  # past int64: handed on as it came, to fail as the op itself would
        return number


@functools.cache  # read once per op: a counter's start asks it of about 800 kernels, 7 ms a start uncached
def tensor_positions(full: str) -> tuple[int, ...]:
    """The positions of the arguments of `full` (`namespace::name.overload`) that are a tensor (`Tensor`, `Tensor?`)
    and can be given by position: where a wrapped number can reach a Python kernel as a number."""
    namespace, _, rest = full.partition("::")
    name, _, overload = rest.partition(".")
    schema = torch._C._get_schema(f"{namespace}::{name}", overload)
    positions = []
    for index, argument in enumerate(schema.arguments):
        if argument.kwarg_only:
            break
        kind = argument.type
        if isinstance(kind, torch.OptionalType):
            kind = kind.getElementType()
        if isinstance(kind, torch.TensorType):
            positions.append(index)
    return tuple(positions)


def numbers_as_tensors(args: tuple[Any, ...], positions: tuple[int, ...]) -> tuple[Any, ...]:
    """`args` with a number at one of `positions` (a wrapped number torch handed on as a number) made the tensor
    again (`wrapped`); `args` itself when there is none, the usual case."""
    for position in positions:
        if position < len(args) and type(args[position]) in NUMBERS:
            break
    else:
        return args
    return tuple(
        wrapped(arg) if position in positions and type(arg) in NUMBERS else arg for position, arg in enumerate(args)
    )
