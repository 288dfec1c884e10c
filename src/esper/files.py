"""Whole-file writes: a file is either the old one or the complete new one, never half written."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO


def replace_atomically(target: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write through `write` into a temporary file beside `target`, fsync it, then rename it over `target`.

    On any failure (a full disk, an interrupt) the temporary file is removed and `target` is left as it was.
    """
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
