"""One-line error messages: the part of an exception that goes into them."""

from __future__ import annotations


def first_line(error: BaseException, limit: int | None = None, *, fallback: str | None = None) -> str:
    """The first non-blank line of `error`'s message (`fallback`, else the exception's type name, when it has none),
    shortened at a word boundary with " ..." when longer than `limit`: never cut mid-word."""
    line = next((text.strip() for text in str(error).splitlines() if text.strip()), None)
    if line is None:
        return type(error).__name__ if fallback is None else fallback
    if limit is None or len(line) <= limit:
        return line
    return line[:limit].rsplit(" ", 1)[0].rstrip(" ,;:") + " ..."
