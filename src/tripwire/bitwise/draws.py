"""Draws from torch's default CPU generator, by thread: where several threads draw, the OS orders their draws.

A seeded loop draws the same numbers in every run only if it draws them in the same order. torch's default generator
is one per process, shared by every thread: a loop that draws from it on two threads at once (a thread pool sampling
a replay buffer ahead while the main thread samples actions) hands each thread whichever numbers come next, in the
order the OS's scheduler lets the threads run. TorchRL's own SAC (`sota-implementations/sac/sac.py`, v0.10.1), seeded,
samples its replay buffer on a prefetching thread pool (`prefetch=3`): two runs of it differed from the 978th of
2,500 updates, and with `prefetch=0` the two agree.

`DrawThreads` notes each draw from that generator on any thread while it is active: a kernel of its own over the CPU
kernel of each of torch's random ops (`uniform_`, `normal_`, `random_`, `bernoulli_`, `multinomial`, `randperm`,
...; `torch.rand`, `randn`, `randint` and dropout reach them), through `tripwire.common.kernels` as
`tripwire.bitwise.vendor_ops` does, so the ops it does not list run untouched, and a listed op called by another
(`multinomial`'s `exponential_`) is noted once. A draw given a generator of its own (`generator=g`) is not one.
`threads` holds, per thread that drew, its name, its draws and the line of its first (a thread that ended and one
that took its id after are two). The CUDA generators are not
watched (a CPU run draws a GPU loop's numbers on the CPU generator, and is seen), nor NumPy's or Python's.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

import torch

from tripwire.common.kernels import (
    cpu_overloads,
    numbers_as_tensors,
    override_kernels,
    restore_kernels,
    tensor_positions,
)

__all__ = ["DrawThreads"]

# torch's random ops whose CPU kernels draw from a generator (the factories `rand`, `randn`, `randint`, the `*_like`
# forms and `torch.normal(mean, std, size)` are composites that call these)
RANDOM_OPS = frozenset(
    {
        "uniform_",
        "normal_",
        "normal",
        "random_",
        "bernoulli",
        "bernoulli_",
        "multinomial",
        "randperm",
        "exponential_",
        "geometric_",
        "cauchy_",
        "log_normal_",
        "_standard_gamma",
        "_sample_dirichlet",
        "poisson",
        "binomial",
        "rrelu_with_noise",
        "rrelu_with_noise_",
        "native_dropout",
    }
)


@functools.cache
def _watched_overloads() -> tuple[str, ...]:
    """Every overload of a listed op with a CPU kernel of its own (aten's, fixed once torch is imported: read once,
    not at every recording's start, where walking every op name costs about 3 ms)."""
    return cpu_overloads(lambda full: full.startswith("aten::") and full[len("aten::") :].split(".")[0] in RANDOM_OPS)


def _own_generator(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether the call was given a generator other than the default one."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Generator):
            return value is not torch.default_generator
    return False


class DrawThreads:
    """`with DrawThreads(caller) as draws:` notes the draws from torch's default CPU generator on every thread while
    active; `draws.threads` is `[name, draws, first line]` per thread that drew (`caller()` names the line, called at
    a thread's first draw only), `draws.faults` what went wrong in tripwire's own noting (the op still ran). Each draw
    costs a trip through Python; every other op nothing."""

    def __init__(self, caller: Callable[[], str]) -> None:
        self.caller = caller
        self.threads: list[list[Any]] = []
        self.faults: list[str] = []
        self._local = threading.local()  # `inside`: a noted op's kernel is running on this thread; `record`: its entry
        self._libraries: list[torch.library.Library] = []
        self._active = False

    def __enter__(self) -> DrawThreads:
        self._libraries = override_kernels([(full, "CPU") for full in _watched_overloads()], self._kernel)
        self._active = True
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._active = False
        restore_kernels(self._libraries)

    def drawing(self) -> list[list[Any]]:
        """The threads that drew, most draws first: `[name, draws, first line]` each."""
        return sorted(self.threads, key=lambda entry: -entry[1])

    def _kernel(self, full: str, _key: str, original: Any) -> Callable[..., Any]:
        call = original.call_boxed
        local = self._local
        positions = tensor_positions(full)

        def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
            args = numbers_as_tensors(args, positions)  # a wrapped number a C++ caller gave (`common.kernels`)
            if not self._active or getattr(local, "inside", False):
                return call(keyset, *args, **kwargs)  # pass-through
            local.inside = True
            try:
                self._note(args, kwargs)
                return call(keyset, *args, **kwargs)  # pass-through
            finally:
                local.inside = False

        return kernel

    def _note(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            if _own_generator(args, kwargs):
                return
            record = getattr(self._local, "record", None)
            if record is None:  # this thread's first draw: its entry, written by this thread alone from now on
                try:
                    line = self.caller()
                except Exception as error:  # tripwire's fault: kept once, the thread named without its line
                    line = "<unknown>"
                    self.faults.append(f"{type(error).__name__}: {error}")
                record = self._local.record = [threading.current_thread().name, 0, line]
                self.threads.append(record)
            record[1] += 1
        except Exception as error:  # tripwire's fault, never the loop's: the op runs, and the fault is kept
            self.faults.append(f"{type(error).__name__}: {error}")
