"""Installing and removing the sync counter's hooks, on the counting thread and on the threads it carries.

A counter counts through four mechanisms, each in a module of its own:

- `tripwire.sync.explicit`: `.item()`, `.cpu()`, `bool(t)`, host-bound copies and the other explicit host pulls,
  seen by stand-ins on the watched tensor methods and torch functions (or the function mode behind
  `explicit.use_patches = False`); `tripwire.sync.copies` classifies the copies;
- `tripwire.sync.implicit`: data-dependent aten ops (`nonzero`, boolean masks, ...), by kernels registered over those
  ops, or by a dispatch mode where kernels cannot count;
- `tripwire.sync.patches`: the synchronize entry points and `torch.distributed`'s collectives;
- `tripwire.sync.threads`: the threads and pool tasks the counted code starts (started by the counter itself).

`install` puts in place what is not yet installed (modes on this thread, patches process-wide) into one
`tripwire.sync.installation.Installation`, and `uninstall` removes exactly that. `thread_modes` makes a worker
thread count (`carried` work); `take_modes_off` / `put_modes_back` lift this thread's counting modes while
`ignore_syncs` runs.

Under torch.compile the hooks stay out of what is compiled: while dynamo traces an op into a graph the function mode
and the kernels pass it through (`torch.compiler.is_compiling()`), the dispatch mode declares
`ignore_compile_internals`, and tripwire's frames are on dynamo's skip list (`tripwire.sync.dynamo`). Syncs in a
compiled function's eager parts (at its graph breaks) are counted as anywhere else.

Reading failures: an event's kind names the hook that saw it (`tripwire.sync.kinds` says what each means);
`implicit:<op>` names the aten op.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.overrides import TorchFunctionMode, _get_current_function_mode, _pop_mode, _push_mode
from torch.utils import _python_dispatch as dispatch
from torch.utils._python_dispatch import TorchDispatchMode

from tripwire.sync import explicit
from tripwire.sync import implicit as implicit_module
from tripwire.sync import state as sync
from tripwire.sync.dynamo import dynamo_skips_tripwire
from tripwire.sync.installation import Installation, restore
from tripwire.sync.packed import watch_packed
from tripwire.sync.patches import patch_sync_functions

__all__ = ["Installation", "install", "put_modes_back", "take_modes_off", "thread_modes", "uninstall"]

_LOCAL = sync._LOCAL

_implicit_by = ""  # how implicit syncs are counted now: "kernels", "mode" or "" (not at all)
_explicit_by = ""  # how explicit syncs are counted now: "stand-ins", "mode" or "" (no counter)


def install(*, implicit: bool) -> Installation:
    """Install what is not yet installed: modes on this thread, patches process-wide."""
    global _implicit_by, _explicit_by
    installation = Installation()
    try:
        installation.skipping.enter_context(dynamo_skips_tripwire())
        if not sync._STATE.counters:
            sync._set_skip_prefixes(sync.skip_prefixes_for(torch.__file__))
            patch_sync_functions(installation)
            watch_packed(installation)  # a packed sequence's batch sizes and lengths: host memory
            explicit.read_settings()
            if explicit.use_patches:
                explicit.install_stand_ins(installation)
                _LOCAL.counting += 1
                installation.counting = True
                _explicit_by = "stand-ins"
            else:
                explicit.patch_unrouted_dunders(installation)
                installation.function_mode = explicit.ExplicitSyncMode()
                installation.function_mode.__enter__()
                _explicit_by = "mode"
        if implicit and not _implicit_by:
            if implicit_module.kernels_here():
                _LOCAL.implicit += 1
                try:
                    installation.kernels = implicit_module.ImplicitKernels(installation)
                except BaseException:
                    _LOCAL.implicit -= 1
                    raise
                _implicit_by = "kernels"
            else:
                installation.dispatch_mode = implicit_module.ImplicitSyncMode()
                installation.dispatch_mode.__enter__()
                if implicit_module.kernels_available():  # the ops the mode meets decomposed: counted whole
                    installation.kernels = implicit_module.ImplicitKernels(installation, whole_only=True)
                _implicit_by = "mode"
    except BaseException:
        uninstall(installation)
        raise
    return installation


@contextlib.contextmanager
def thread_modes(*, implicit: bool) -> Iterator[None]:
    """Push the counting modes on the current (worker) thread; torch modes are thread-local, patches are not.

    Once per thread: carried work inside a thread that already counts (a thread the counter's watch started runs
    a pool task its loop wrapped in `carried`) pushes nothing more, or each implicit sync would count twice."""
    if _LOCAL.carrying:
        yield
        return
    _LOCAL.carrying += 1
    with contextlib.ExitStack() as modes:
        modes.callback(_not_carrying)
        if _explicit_by == "stand-ins":
            _LOCAL.counting += 1
            modes.callback(_not_counting)
        else:
            modes.enter_context(explicit.ExplicitSyncMode())
        if implicit and _implicit_by == "kernels":
            _LOCAL.implicit += 1
            modes.callback(_thread_done)
        elif implicit:
            modes.enter_context(implicit_module.ImplicitSyncMode())
        yield


def _not_carrying() -> None:
    _LOCAL.carrying -= 1


def _thread_done() -> None:
    _LOCAL.implicit -= 1


def _not_counting() -> None:
    _LOCAL.counting -= 1


Taken = tuple[list[TorchFunctionMode], list[TorchDispatchMode]]


def take_modes_off() -> Taken:
    """Take this thread's counting modes off the top of torch's mode stacks (`ignore_syncs` does, while a counter
    is active): under a mode every torch call, and every read of a tensor property (`.shape`, `.dtype`), makes a
    trip through Python, and a digest makes dozens per tensor, all ignored anyway. A mode someone pushed above
    ours stays, and so do ours beneath it. `put_modes_back` restores exactly what was taken."""
    functions: list[TorchFunctionMode] = []
    dispatches: list[TorchDispatchMode] = []
    while isinstance(_get_current_function_mode(), explicit.ExplicitSyncMode):
        functions.append(_pop_mode())
    while isinstance(dispatch._get_current_dispatch_mode(), implicit_module.ImplicitSyncMode):
        dispatches.append(dispatch._pop_mode())
    return functions, dispatches


def put_modes_back(taken: Taken) -> None:
    """Push back what `take_modes_off` took, in the order they were."""
    functions, dispatches = taken
    for dispatch_mode in reversed(dispatches):
        dispatch._push_mode(dispatch_mode)
    for function_mode in reversed(functions):
        _push_mode(function_mode)


def uninstall(installation: Installation) -> None:
    """Undo `install` in reverse order; patches are restored even if popping a mode fails."""
    global _implicit_by, _explicit_by
    try:
        if installation.kernels is not None:
            if installation.dispatch_mode is None:  # the kernels counted: this thread's depth was taken with them
                _implicit_by = ""
                _LOCAL.implicit -= 1
            installation.kernels.close()
            installation.kernels = None
        if installation.dispatch_mode is not None:
            _implicit_by = ""
            installation.dispatch_mode.__exit__(None, None, None)
        if installation.function_mode is not None:
            _explicit_by = ""
            installation.function_mode.__exit__(None, None, None)
        if installation.counting:
            _explicit_by = ""
            installation.counting = False
            _LOCAL.counting -= 1
    finally:
        explicit.forget_waiting(installation)
        explicit.forget_namespace(installation)
        restore(installation)
        for swap in reversed(installation.swaps):
            swap.restore()
        installation.swaps.clear()
        installation.skipping.close()
