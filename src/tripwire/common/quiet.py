"""One warning ignored while tripwire does something that raises it, and the loop's warnings left as they were.

`warnings.catch_warnings` (and `warnings.filterwarnings`) tell Python that the filters changed, and a change clears
every module's record of the warnings it has shown once per line (Python's default filter). Done at a counter's start,
a loop's own warning showed again at every start: once a step where a counter is started each step. `ignoring` puts
one `ignore` filter first in `warnings.filters`, which Python reads at each warning, and takes it out by identity
after, without that notice: the loop's records stay, a filter the loop added meanwhile stays, and the loop's own
filters (`-W error` included) still decide every other warning. Not for threads racing on the filters: neither is
`catch_warnings`.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["ignoring", "take_out"]


@contextmanager
def ignoring(message: str, category: type[Warning] = UserWarning, module: str = "") -> Iterator[None]:
    """Ignore the warnings of `category` whose text matches `message` (a regular expression, matched from the start
    across lines) raised from modules matching `module` (from the start; any module when empty)."""
    entry = ("ignore", re.compile(message, re.DOTALL), category, re.compile(module) if module else None, 0)
    filters: list[Any] = warnings.filters  # type: ignore[assignment]  # a list, typed as a Sequence
    filters.insert(0, entry)
    try:
        yield
    finally:
        take_out(entry)


def take_out(entry: Any) -> None:
    """Remove the filter `entry` from `warnings.filters` by identity (an equal filter of the loop's stays), without
    telling `warnings` its filters changed; nothing when it is gone already."""
    filters: list[Any] = warnings.filters  # type: ignore[assignment]  # a list, typed as a Sequence
    at = next((index for index, item in enumerate(filters) if item is entry), None)
    if at is not None:
        del filters[at]
