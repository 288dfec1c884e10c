"""A child forked while a watch runs never waits on a lock of tripwire's that another thread held at the fork.

A fork copies a held lock as held, and no thread of the child will release it. A loop that forks (a DataLoader's
fork-started workers, Hogwild processes) while one of its threads is inside tripwire's bookkeeping would otherwise
hang its child at the first counted import, backward, region or noted op: tripwire changing what the loop does.
Each lock is held here on purpose at the fork, and the child must take it within seconds."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tripwire.bitwise import vendor_ops
from tripwire.sync import explicit, installation
from tripwire.sync import state as sync_state
from tripwire.sync.counter import SyncCounter

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="forked children: POSIX only")

LOCKS: dict[str, Callable[[], Any]] = {
    "sync state (regions)": lambda: sync_state._STATE.lock,
    "counted backward passes": lambda: installation._BACKWARDS_LOCK,
    "place-keeping stand-ins": lambda: explicit._WAITING_LOCK,
    "torch's own functions shown (imports, handlers)": lambda: explicit._OWN_LOCK,
    "vendor-bound op watch": lambda: vendor_ops._WATCH.lock,
}


def _fork_and_wait(in_child: Callable[[], None], seconds: float = 30.0) -> int:
    """Run `in_child` in a forked child and return its exit code: 0 when it returned, 1 when it raised, and -9 when
    it was still running after `seconds` (killed: a hang fails the test, never hangs it)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            in_child()
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.parametrize("name", sorted(LOCKS))
def test_a_lock_held_at_the_fork_is_free_in_the_child(name: str) -> None:
    def take() -> None:
        if not LOCKS[name]().acquire(timeout=5):
            raise TimeoutError(name)

    with SyncCounter(), vendor_ops.VendorBoundOps(), LOCKS[name]():
        code = _fork_and_wait(take)
    assert code == 0, f"a child forked while the {name} lock was held could not take it"


def test_a_child_imports_while_another_thread_was_importing_at_the_fork(tmp_path: Path) -> None:
    """End to end: the counter shields imports from its stand-ins under a lock; a child forked while it was held
    imports a module of its own and computes with torch, as a DataLoader worker would."""
    (tmp_path / "fresh_module_for_the_child.py").write_text("VALUE = 3\n", encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    try:

        def work() -> None:
            import fresh_module_for_the_child  # type: ignore[import-not-found]

            assert torch.ones(2).sum().item() + fresh_module_for_the_child.VALUE == 5

        with SyncCounter(), explicit._OWN_LOCK:
            code = _fork_and_wait(work)
    finally:
        sys.path.remove(str(tmp_path))
    assert code == 0, "the child hung (or failed) importing a module"


def test_a_child_notes_a_root_while_another_thread_was_noting_one_at_the_fork() -> None:
    """End to end for the vendor-op watch: the child's `torch.sqrt` needs the watch's lock to note the call."""

    def root() -> None:
        torch.sqrt(torch.ones(3))

    # the lock held as if another thread were noting a root at the moment of the fork
    with vendor_ops.VendorBoundOps() as seen, vendor_ops._WATCH.lock:
        code = _fork_and_wait(root)
    assert code == 0, "the forked child hung on the watch's lock"
    assert not seen.faults
