"""One-line error messages: the part of an exception that goes into them."""

from __future__ import annotations

import os
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
