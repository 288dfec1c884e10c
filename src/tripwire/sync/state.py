"""The shared state of sync accounting: region stacks, active counters and the delivery of one sync event.

`tripwire.sync.regions`, `tripwire.sync.counter` and `tripwire.sync.hooks` (the torch modes and patches that
see syncs) all read and write it; keeping it here, with no torch import, means none imports another at
module level: the hooks deliver events here, the counter installs the hooks when it starts.
"""

from __future__ import annotations

import linecache
import os
import sys
import threading
from dataclasses import dataclass
from types import FrameType
from typing import Any

OUTSIDE = "<outside>"
# Frames in any tripwire module are skipped when the call site of a sync is looked up.
_TRIPWIRE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


@dataclass(frozen=True)
class SyncEvent:
    """One host synchronization: what synced, in which region, from which call site."""

    kind: str
    region: str
    site: str
    function: str
    region_path: str = OUTSIDE
    # The torch code that synced on the user's behalf ("torch/optim/adam.py:_single_tensor_adam"), when the user's
    # line did not sync itself (Adam's step counters, a distribution's argument validation); "" otherwise.
    via: str = ""
    path: str = ""  # the call site's absolute file name, for reading its source line (`site_text`)

    @property
    def line(self) -> int:
        """The call site's line number (0 when unknown)."""
        number = self.site.rsplit(":", 1)[-1]
        return int(number) if number.isdigit() else 0

    @property
    def text(self) -> str:
        """The call site's source line, stripped ("" when the file cannot be read): what identifies a site across
        commits whose line numbers moved."""
        return site_text(self.path, self.line)


class _GlobalState:
    """Process-wide switches read on the hot path; plain attributes, so a check is one lookup."""

    def __init__(self) -> None:
        self.active = 0  # number of active SyncCounters (all threads)
        self.pushed = 0  # hot_path entries currently on some thread's region stack
        self.counters: list[Any] = []  # the active tripwire.sync.SyncCounter objects
        self.root = ""
        self.skip_prefixes: tuple[str, ...] = (_TRIPWIRE_DIR,)
        self.lock = threading.Lock()  # guards `pushed` when regions are entered on several threads


class _ThreadState(threading.local):
    """Per-thread region stack, suppression depth and relabelling."""

    def __init__(self) -> None:
        self.regions: list[tuple[object, str]] = []  # (the tripwire.sync.hot_path object, its name)
        self.suppress = 0
        self.label: str | None = None


_STATE = _GlobalState()
_LOCAL = _ThreadState()


def deliver(kind: str, *, implicit: bool = False) -> None:
    """Record one sync of `kind` at the current call site to every active counter (hook entry)."""
    local = _LOCAL
    if local.suppress:
        return
    if local.label is not None:
        kind = local.label
    site, function, via, filename = _call_site()
    regions = local.regions
    region = regions[-1][1] if regions else OUTSIDE
    path = "/".join(name for _, name in regions) if regions else OUTSIDE
    event = SyncEvent(kind, region, site, function, path, via, filename)
    for counter in list(_STATE.counters):
        if implicit and not counter.implicit:
            continue
        counter.events.append(event)


# torch's own dispatch machinery: never "the torch code behind a sync", only the road to the hook.
_MACHINERY = ("overrides.py", "_tensor.py", "_ops.py", "_python_dispatch.py", "_jit_internal.py")


def _call_site() -> tuple[str, str, str, str]:
    """`(file:line, function, via, absolute file)`: the innermost frame outside torch and tripwire, and the innermost
    torch frame (not dispatch machinery) between it and the hook, named `torch/<file>:<function>`."""
    frame: FrameType | None = sys._getframe(1)
    prefixes = _STATE.skip_prefixes
    via = ""
    while frame is not None and frame.f_code.co_filename.startswith(prefixes):
        filename = frame.f_code.co_filename
        if not via and not filename.startswith(_TRIPWIRE_DIR) and not filename.endswith(_MACHINERY):
            via = f"{_torch_relative(filename)}:{frame.f_code.co_qualname}"
        frame = frame.f_back
    if frame is None:
        return "<unknown>", "<unknown>", via, ""
    filename = frame.f_code.co_filename
    return f"{relative_path(filename)}:{frame.f_lineno}", frame.f_code.co_qualname, via, filename


def site_text(filename: str, line: int) -> str:
    """The stripped source line `line` of `filename` ("" when unreadable)."""
    if not filename or line <= 0:
        return ""
    return linecache.getline(filename, line).strip()


def _torch_relative(filename: str) -> str:
    marker = f"{os.sep}torch{os.sep}"
    return "torch/" + filename.rsplit(marker, 1)[1].replace(os.sep, "/") if marker in filename else filename


def relative_path(filename: str) -> str:
    """`filename` relative to the counter's root directory (its `root`, else the working directory) when under it;
    else relative to the longest `sys.path` entry holding it (the path its import uses, the same on every machine);
    else unchanged. Keys relative to a declared root match between two checkouts of one project in two folders."""
    root = _STATE.root
    if root and filename.startswith(root):
        return filename[len(root) :]
    entries = [os.path.join(os.path.abspath(entry), "") for entry in sys.path if entry]
    holders = [entry for entry in entries if filename.startswith(entry)]
    if holders:
        return filename[len(max(holders, key=len)) :]
    return filename


def _set_skip_prefixes(prefixes: tuple[str, ...]) -> None:
    """Set the directories whose frames are never a call site (hook installer use)."""
    _STATE.skip_prefixes = prefixes
