"""Dotted names made distinct, so that no value is left out of a digest because another took its name.

A nested value is digested leaf by leaf under dotted names (`state.0.exp_avg`), and a key is named by `str(key)`
(`key_name`, below). Two leaves of one value can therefore get one name: a key `"a.b"` beside a key `a` holding
`{"b": ...}`, or a key `"'1'"` beside a key `"1"`. Flattened into a mapping, the later one would replace the
earlier, and a change to the earlier would pass unseen. `distinct` names the second `a.b#2`, the third `a.b#3`,
and so on, in the value's own order; a name no other leaf has keeps its name, so the names of every value without
such a clash are as before.

Across two runs, a key's type is kept in its name where the text alone would hide it (`key_name`): a string key
that spells a value of another kind (`"1"`, `"1.5"`, `"True"`, `"None"`, `"(0, 1)"`) is named quoted, `'1'`, so
a state whose int keys came back as strings (a checkpoint round-tripped through JSON) no longer compares identical
to the state it was. Every other key, an int key included, is named as before.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Sequence
from fnmatch import fnmatchcase
from typing import Any

__all__ = ["distinct", "excluded", "key_name", "listed", "matching", "unnumbered"]

_NUMBERED = re.compile(r"#\d+\Z")


def distinct(names: list[str]) -> list[str]:
    """`names` with each repeat numbered (`a.b`, `a.b#2`, ...), avoiding every name already in `names`; the list
    itself when no name repeats (a caller asks `is names` to know there was nothing to rename)."""
    if len(set(names)) == len(names):
        return names
    taken = set(names)
    out: list[str] = []
    seen: set[str] = set()
    for name in names:
        unique, count = name, 1
        while unique in seen or (unique != name and unique in taken):
            count += 1
            unique = f"{name}#{count}"
        seen.add(unique)
        out.append(unique)
    return out


def unnumbered(name: str) -> str:
    """The name `distinct` numbered (`a.b` from `a.b#2`); any other name as it is."""
    return _NUMBERED.sub("", name)


def excluded(path: str, patterns: Sequence[str]) -> bool:
    """True when `path` or an object above it (`data.a` above `data.a.b`) matches one of `patterns` (globs); a path
    numbered apart from another (`data.a.b#2`) matches as the path it shares."""
    prefixes = _prefixes(path)
    return any(fnmatchcase(prefix, pattern) for prefix in prefixes for pattern in patterns)


def matching(path: str, patterns: Sequence[str]) -> list[str]:
    """The patterns of `patterns` that exclude `path` (`excluded`), each once."""
    prefixes = _prefixes(path)
    return [pattern for pattern in patterns if any(fnmatchcase(prefix, pattern) for prefix in prefixes)]


def _prefixes(path: str) -> list[str]:
    parts = unnumbered(path).split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts) + 1)]


def key_name(key: Any) -> str:
    """A mapping key's part of a dotted name: `str(key)`, quoted (`'1'`) for a string that spells another kind's."""
    if type(key) is str:
        return repr(key) if key and key[0] in _LITERAL_STARTS and _spells_another_kind(key) else key
    return f"{key}"


_LITERAL_STARTS = frozenset("0123456789-+.([{'\"bTFNni")  # the first characters of the keys `_spells...` parses


def listed(names: Sequence[str], shown: int) -> str:
    """`a, b, c, ... and 4 more`: the first `shown` names, then how many more, for one line of a report or a note."""
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f", ... and {more} more" if more > 0 else "")


@functools.lru_cache(maxsize=4096)
def _spells_another_kind(key: str) -> bool:
    """Whether `key` is what `str` gives of a key of another kind: a number, bool, None, bytes, tuple, ..."""
    if key in ("nan", "inf", "-inf"):
        return True
    try:
        return not isinstance(ast.literal_eval(key), str)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
