"""Syncs in the threads the counted code starts.

torch's function and dispatch modes are thread-local, and so is the stand-ins' `counting` mark: a counter sees the
thread that entered it and work wrapped with `carried(fn)`. A loop that trains, prefetches or logs in a thread of its
own (a `threading.Thread`, a `ThreadPoolExecutor`) would have its `.item()` and `.cpu()` there go uncounted, and a
region placed on a function that thread runs would report zero syncs: green while blind.

`ThreadWatch`, active while a `SyncCounter` counts (`threads=True`, the default) and so while a recording runs,
closes that gap without the loop's help: a thread the loop starts runs under the counting modes with the regions
its starter was in (`carried` semantics: what a thread started inside `rollout` does
counts under `rollout`, unless the thread enters regions of its own), and a function submitted to a thread pool runs
with the regions of the submitting call, whichever pool thread takes it. Threads tripwire starts for itself (its
digest workers) and those torch.compile's machinery starts are not counted. A thread that was already running
when counting began (a pool from before it) still counts only the work submitted to it while it runs.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import os
import sys
import sysconfig
import threading
from collections.abc import Callable
from multiprocessing.pool import Pool, ThreadPool
from types import FrameType, TracebackType
from typing import Any
from unittest import mock

from tripwire.sync.regions import carried
from tripwire.sync.state import _LOCAL, _STATE, _TRIPWIRE_DIRS

_STDLIB = os.path.join(sysconfig.get_paths()["stdlib"], "")
# the pools' own files, which start their worker threads, and the methods through which a loop hands a
# multiprocessing pool its work (`apply`, `map`, `starmap` and their `_async` forms call these)
_POOL_FILES = (os.path.join("concurrent", "futures", "thread.py"), os.path.join("multiprocessing", "pool.py"))
_POOL_SUBMITS = ("apply_async", "_map_async", "imap", "imap_unordered")
_MARK = "_tripwire_counted_run"  # set on a Thread by start(): the wrapped work its new thread runs
# torch.compile's own helpers (inductor's compile workers, the C++ compiler, its cache's hashing): they compute
# none of the loop's values, and how many start depends on the compile cache, not on the loop
_COMPILER_MACHINERY = tuple(
    os.sep + os.path.join(*parts)
    for parts in (
        ("torch", "_inductor", ""),
        ("torch", "_dynamo", ""),
        ("torch", "_functorch", ""),
        ("torch", "utils", "cpp_extension.py"),
        ("triton", ""),
    )
)


class ThreadWatch:
    """While active, threads the loop starts, and work it submits to thread pools, count syncs as the loop's own."""

    def __init__(self) -> None:
        self._patches = contextlib.ExitStack()
        self.threads = 0  # threads started by the loop while active (counted)

    def __enter__(self) -> ThreadWatch:
        watch = self
        start_original = threading.Thread.__dict__["start"]
        bootstrap_original = threading.Thread.__dict__["_bootstrap_inner"]
        submit_original = concurrent.futures.ThreadPoolExecutor.__dict__["submit"]

        def start(thread: threading.Thread) -> None:
            # A thread pool's own threads are left alone: each task is carried instead, with the regions of the call
            # that submitted it (the thread would run every later task, counted or not, under the counting modes of
            # the call that happened to start it). So is a nested watch's start, called by the outer one (a tripwire
            # frame): carried once.
            if _the_loops(sys._getframe(1), thread_start=True):
                watch.threads += 1
                setattr(thread, _MARK, carried(lambda: bootstrap_original(thread)))
            start_original(thread)  # pass-through

        def bootstrap_inner(thread: threading.Thread) -> None:
            run = thread.__dict__.pop(_MARK, None)
            if run is None:
                bootstrap_original(thread)  # pass-through
            else:
                run()

        def submit(executor: Any, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
            if _the_loops(sys._getframe(1)):
                fn = carried(fn)
            return submit_original(executor, fn, *args, **kwargs)  # pass-through

        self._patches.enter_context(mock.patch.object(threading.Thread, "start", start))
        self._patches.enter_context(mock.patch.object(threading.Thread, "_bootstrap_inner", bootstrap_inner))
        self._patches.enter_context(mock.patch.object(concurrent.futures.ThreadPoolExecutor, "submit", submit))
        for name in _POOL_SUBMITS:  # multiprocessing's ThreadPool: `apply`, `map`, `starmap`, `imap` and the rest
            self._patches.enter_context(mock.patch.object(Pool, name, _carried_in_thread_pools(Pool.__dict__[name])))
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._patches.close()


def _carried_in_thread_pools(original: Callable[..., Any]) -> Callable[..., Any]:
    """`multiprocessing.pool.Pool`'s method `original`, carrying the function a loop hands a `ThreadPool` (a process
    pool's function is pickled to a child, which no counter sees: left as it is)."""

    @functools.wraps(original)
    def submit(pool: Any, func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        if isinstance(pool, ThreadPool) and _the_loops(sys._getframe(1)):
            func = carried(func)
        return original(pool, func, *args, **kwargs)  # pass-through

    return submit


def _the_loops(frame: Any, *, thread_start: bool = False) -> bool:
    """Whether a thread or a pool task is started by the loop: not by a thread an earlier recording left running,
    the first frame outside the standard library (which starts a pool's threads for whoever submitted) is not
    tripwire's own, and torch.compile's machinery is not on the stack. With `thread_start`, not a thread pool's own
    thread either (its tasks are carried one by one)."""
    if _LOCAL.generation not in (None, _STATE.generation):  # a thread an earlier recording left running
        return False
    caller = frame
    while caller is not None and caller.f_code.co_filename.startswith(_STDLIB):
        if thread_start and caller.f_code.co_filename.endswith(_POOL_FILES):
            return False
        caller = caller.f_back
    if caller is not None and caller.f_code.co_filename.startswith(_TRIPWIRE_DIRS):
        return False
    return not in_compiler(frame)


def in_compiler(frame: FrameType | None) -> bool:
    """Whether torch.compile's machinery, not the loop, is starting the process."""
    while frame is not None:
        if any(part in frame.f_code.co_filename for part in _COMPILER_MACHINERY):
            return True
        frame = frame.f_back
    return False


__all__ = ["ThreadWatch", "in_compiler"]
