"""One-line error messages: the part of an exception that goes into them, and the streams they are written to."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager


def first_line(error: BaseException, limit: int | None = None, *, fallback: str | None = None) -> str:
    """The first non-blank line of `error`'s message (`fallback`, else the exception's type name, when it has none),
    shortened at a word boundary with " ..." when longer than `limit`: never cut mid-word."""
    try:
        message = str(error)
    except Exception:  # a message that cannot be printed (its __str__ raises) must not turn one line into a traceback
        message = f"<{type(error).__name__} whose message cannot be printed>"
    line = next((text.strip() for text in message.splitlines() if text.strip()), None)
    if line is None:
        return type(error).__name__ if fallback is None else fallback
    if limit is None or len(line) <= limit:
        return line
    return line[:limit].rsplit(" ", 1)[0].rstrip(" ,;:") + " ..."


def escape(text: str) -> str:
    """`text` with every control character written as Python's repr writes it (`\\n`, `\\r`, `\\t`, `\\x1b`, ...),
    so a value holding one (a path with a line break, an escape sequence) cannot split a one-line message or drive
    the terminal. Backslashes are kept as they are; printable text, non-ASCII letters included, is unchanged."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else repr(ch)[1:-1] for ch in text)


@contextmanager
def warnings_folded() -> Iterator[None]:
    """Hold the warnings raised inside (numpy's, PIL's, a user loader's). If the block raises an exception whose
    message is one string, the first warning is folded into that message, so a refusal stays one line; otherwise,
    and when the block succeeds, they are shown as they would have been."""
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:  # the process's filters still decide what is caught
            yield
    except Exception as error:
        if caught and len(error.args) == 1 and isinstance(error.args[0], str):
            first = caught[0]
            more = f" and {len(caught) - 1} more" if len(caught) > 1 else ""
            where = f"{os.path.basename(first.filename)}:{first.lineno}"
            told = first_line(first.message, 160) if isinstance(first.message, Warning) else str(first.message)
            error.args = (f"{error.args[0]} [it warned first: {first.category.__name__} at {where}: {told}{more}]",)
            caught = []
        raise
    finally:
        for held in caught:
            warnings.showwarning(held.message, held.category, held.filename, held.lineno)


class StandardStreams:
    """The process's stdout and stderr (file descriptors 1 and 2, and Python's `sys.stdout` / `sys.stderr`) as they
    are now, held so that user code (a `--dataset` loader) that closes or replaces them cannot silence the run's
    one-line messages: `restore()` puts back whatever changed and names it."""

    def __init__(self) -> None:
        self._saved = {fd: _held(fd) for fd in (1, 2)}
        self._objects = (sys.stdout, sys.stderr)

    def restore(self) -> str:
        """Put back every stream that was closed or replaced; "" when none was, else which (`standard error (fd 2)`).
        The held copies are released either way."""
        touched = []
        for fd, (identity, copy) in self._saved.items():
            if copy is not None and _identity(fd) != identity:
                os.dup2(copy, fd)
                touched.append(f"{'standard output' if fd == 1 else 'standard error'} (fd {fd})")
            if copy is not None:
                os.close(copy)
        self._saved = {}
        for name, held in zip(("stdout", "stderr"), self._objects, strict=True):
            if held is not None and (getattr(sys, name) is not held or held.closed):
                setattr(sys, name, held if not held.closed else _reopened(name))
                touched.append(f"sys.{name}")
        return " and ".join(touched)


def _identity(fd: int) -> tuple[int, int] | None:
    """(device, inode) of what `fd` refers to, or None when it is closed."""
    try:
        status = os.fstat(fd)
    except OSError:
        return None
    return status.st_dev, status.st_ino


def _held(fd: int) -> tuple[tuple[int, int] | None, int | None]:
    """`fd`'s identity and a duplicate of it to restore from (None when it is closed already)."""
    identity = _identity(fd)
    return identity, (os.dup(fd) if identity is not None else None)


def _reopened(name: str) -> object:
    """A fresh text stream on fd 1 or 2 for `sys.stdout` / `sys.stderr` when the old object was closed."""
    return open(1 if name == "stdout" else 2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
