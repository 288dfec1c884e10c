"""Kernels registered over ops' own (`torch.library`), for a watch that must see an op on every thread at the cost of
that op alone: the sync counter's implicit-sync kernels (`tripwire.sync.implicit`) and the vendor-bound op watch
(`tripwire.bitwise.vendor_ops`).

`override_kernels` registers, for each `(op, dispatch key)`, the kernel `make(op, key, original)` returns, where
`original` is the op's own kernel at that key (`torch.library.get_kernel`, torch 2.9 and later; call it with
`original.call_boxed(keyset, *args, **kwargs)`); all of them or none. `restore_kernels` destroys what it registered,
which puts every op's own kernel back. `cpu_overloads` lists the registered ops a watch of CPU kernels covers.

torch 2.13 and before warn, once a process, on the first kernel registered over another ("Overriding a previously
registered kernel"): on purpose here, so that warning alone is ignored while registering (`tripwire.common.quiet`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from tripwire.common.quiet import ignoring

__all__ = ["cpu_overloads", "override_kernels", "restore_kernels"]

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
