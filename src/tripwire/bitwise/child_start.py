"""The start of the vendor-op watch in a child that `multiprocessing` spawned or a fork server started.

A forked child inherits the watch's kernels; a spawned one (the `spawn` start method, and `forkserver`, Python
3.14's default on Linux and the only kind macOS and Windows start) begins with a bare interpreter. While a watch is
active, `tripwire.bitwise.vendor_ops` adds one entry to the preparation data multiprocessing sends such a child, and
unpickling it runs this file's source (`exec`, so that nothing of tripwire's is imported for it) before the child
prepares its main module or reads the process it is to run.

It imports nothing of torch's or tripwire's until the child has torch: at once where it already does (a fork server
that preloaded it), else right after the child's own first `import torch` completes (a finder first on
`sys.meta_path` that hands the import to the finders after it, then leaves). A child that never imports torch (a
gymnasium env worker) pays one finder call per module it imports and nothing else. Then it imports
`tripwire.bitwise.vendor_ops` (from the folder the parent's tripwire came from, where the child's own path lacks it)
and joins one watcher per parent watcher, which hands its notes back to the parent's spool folder at exit. Whatever
goes wrong here is written to that folder as the child's fault, for the parent's watch to report as tripwire's; the
child itself runs on as it would have.

Stdlib only, and only names defined here: the parent reads this file and the child runs its text.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any

Watchers = list[tuple[str, str, int]]  # (spool folder, root, the pid of the process that entered the watch)


def start(watchers: Watchers, home: str) -> None:
    """Watch this child's vendor-bound ops for `watchers`, now if it has torch, else once it imports it."""
    try:
        if "torch" in sys.modules:
            _join(watchers, home)
        else:
            sys.meta_path.insert(0, _AfterTorch(watchers, home))
    except Exception as error:  # never the child's trouble
        _fault(watchers, f"could not start the watch: {type(error).__name__}: {error}")


def _join(watchers: Watchers, home: str) -> None:
    try:
        sys.path.insert(0, home)  # the parent's tripwire, if the child's path does not reach it
        try:
            from tripwire.bitwise import vendor_ops
        finally:
            if sys.path and sys.path[0] == home:
                del sys.path[0]
        vendor_ops.watch_spawned_child(watchers)
    except Exception as error:
        _fault(watchers, f"could not start the watch: {type(error).__name__}: {error}")


class _AfterTorch:
    """First on `sys.meta_path` until the child imports torch: finds torch through the finders after it, and has
    the loader join the watch once torch's own module has run (its `exec_module`, wrapped on the loader instance
    for that one call and then put back)."""

    def __init__(self, watchers: Watchers, home: str) -> None:
        self.watchers = watchers
        self.home = home

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # safe: the import stops at the spec returned here, or goes on without it
        spec = None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if find is not None:
                spec = find(name, path, target)
                if spec is not None:
                    break
        if spec is None:
            return None  # no torch here: the import fails as it would have
        loader = spec.loader
        run = getattr(loader, "exec_module", None)
        if run is None:
            kind = type(loader).__name__
            _fault(self.watchers, f"could not start the watch: torch's loader {kind} has no exec_module")
            return spec
        watchers, home = self.watchers, self.home

        def exec_module(module: Any) -> None:
            with contextlib.suppress(AttributeError):
                del loader.exec_module  # the loader as it was, for whoever asks it again
            run(module)
            _join(watchers, home)

        try:
            loader.exec_module = exec_module
        except Exception as error:
            _fault(watchers, f"could not start the watch: {type(error).__name__}: {error}")
        return spec


def _fault(watchers: Watchers, text: str) -> None:
    """What went wrong, as this child's notes in each spool folder (written whole, then renamed)."""
    record = json.dumps({"calls": [], "faults": [f"in child process {os.getpid()}: {text}"]})
    for spool, _root, _pid in watchers:
        try:
            partial = os.path.join(spool, f".{os.getpid()}.start.json.partial")
            with open(partial, "w", encoding="utf-8") as file:
                file.write(record)
            os.replace(partial, os.path.join(spool, f"{os.getpid()}.start.json"))
        except Exception:  # the parent's watch already ended
            pass
