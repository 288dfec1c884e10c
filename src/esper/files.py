"""Whole-file writes: a file is either the old one or the complete new one, never half written."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

_NAME_MAX = 255  # bytes in one file name on the file systems a checkpoint goes to (ext4, xfs, btrfs, tmpfs, NFS)
_RANDOM_AND_SUFFIX = 8 + len(".tmp")  # what `mkstemp` adds after the prefix


def _host_tag() -> str:
    """Eight hex digits naming this machine, so that a temporary file on a shared file system is only ever judged
    stale by the machine whose process wrote it."""
    return hashlib.sha256(socket.gethostname().encode("utf-8", "surrogateescape")).hexdigest()[:8]


def _prefix(target: Path) -> str:
    """`.NAME.PID-HOST.`: a temporary file that names its writer, so a later save can tell it was left by a process
    that died (SIGKILL, power loss) mid-write. A name too long to carry it falls back to `.NAME.`."""
    owned = f".{target.name}.{os.getpid()}-{_host_tag()}."
    if len(os.fsencode(owned)) + _RANDOM_AND_SUFFIX <= _NAME_MAX:
        return owned
    return f".{target.name}."


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: another user's live process
        return True
    return True


def remove_stale_temporaries(target: Path) -> None:
    """Remove the temporary files of `target` left beside it by writers on this machine that are no longer running
    (a process killed during its save). A live writer's file, another machine's, and one whose writer is unknown
    (written before writers were named) are left alone; nothing here raises."""
    pattern = re.compile(rf"\.{re.escape(target.name)}\.([1-9][0-9]*)-{_host_tag()}\.[a-z0-9_]+\.tmp")
    with contextlib.suppress(OSError):
        for entry in os.scandir(target.parent):
            found = pattern.fullmatch(entry.name)
            if found is not None and not _alive(int(found.group(1))):
                with contextlib.suppress(OSError):  # another save may have removed it first
                    os.unlink(entry.path)


def replace_atomically(target: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write through `write` into a temporary file beside `target`, fsync it, then rename it over `target`.

    On any failure (a full disk, an interrupt) the temporary file is removed and `target` is left as it was. A
    process killed mid-save cannot remove its own: the next save of `target` on this machine removes it.
    """
    fd, tmp_name = tempfile.mkstemp(prefix=_prefix(target), suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    remove_stale_temporaries(target)
