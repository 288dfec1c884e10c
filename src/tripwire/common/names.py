"""Dotted names made distinct, so that no value is left out of a digest because another took its name.

A nested value is digested leaf by leaf under dotted names (`state.0.exp_avg`), and a key is named by `str(key)`.
Two leaves of one value can therefore get one name: a key `"a.b"` beside a key `a` holding `{"b": ...}`, or a key
`1` beside a key `"1"`. Flattened into a mapping, the later one would replace the earlier, and a change to the
earlier would pass unseen. `distinct` names the second `a.b#2`, the third `a.b#3`, and so on, in the value's own
order; a name no other leaf has keeps its name, so the names of every value without such a clash are as before.
"""

from __future__ import annotations

import re

__all__ = ["distinct", "unnumbered"]

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
