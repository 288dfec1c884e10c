"""The reviewed exclusion list of the changed-line gate: code no scenario can run, each entry with its reason.

TOML, `[[unexercised]]` entries of `where = "path::function"` or `where = "path"`, and/or `pattern` (a regular
expression the statement's first line matches), each with a non-empty `reason`. An entry whose `where` names
nothing in the tree is an error, so the list does not outlive the code it excuses; the list and every file an entry
names are checked as inputs (`tripwire.gates.coverage_data.source_text`): inside the tree, regular, UTF-8.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tripwire.common.files import read_text, shown, within
from tripwire.gates.coverage_data import ExercisedError, source_text
from tripwire.gates.layout import layout

__all__ = ["Exclusion", "load_exclusions"]


@dataclass(frozen=True)
class Exclusion:
    """A reviewed entry of the exclusion list: code no scenario runs, and why."""

    where: str  # "path::qualname" (a function or class, and what it contains), "path" (a module), "" (anywhere)
    reason: str
    pattern: str = ""  # a regular expression the statement's first line must match (`^raise `), "" for any

    def covers(self, file: str, function: str, statement: str) -> bool:
        path, _, name = self.where.partition("::")
        if path and path != file:
            return False
        if name and function != name and not function.startswith(f"{name}."):
            return False
        return not self.pattern or re.search(self.pattern, statement) is not None


def load_exclusions(path: Path, root: Path) -> list[Exclusion]:
    """The reviewed exclusion list; a malformed entry, or one that names nothing in the tree, raises naming it."""
    if not os.path.lexists(path):
        return []
    text = read_text(path, "exclusion list", ExercisedError, "pass the TOML exclusion list ([[unexercised]] entries)")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ExercisedError(f"{shown(path)}: not valid TOML ({error}); fix the file") from None
    except RecursionError:
        raise ExercisedError(f"{shown(path)}: nested too deeply to be an exclusion list; fix the file") from None
    entries = data.get("unexercised", [])
    if not isinstance(entries, list):
        raise ExercisedError(
            f"{shown(path)}: `unexercised` must be a list of tables ([[unexercised]] where = ..., reason = ...)"
        )
    out = []
    for index, item in enumerate(entries, 1):
        entry: Mapping[str, Any] = item if isinstance(item, Mapping) else {}
        where, reason, pattern = entry.get("where", ""), entry.get("reason"), entry.get("pattern", "")
        named = isinstance(where, str) and isinstance(pattern, str) and bool(where or pattern)
        known = not set(entry) - {"where", "reason", "pattern"}
        if not named or not known or not isinstance(reason, str) or not reason.strip():
            needs = "needs `where` (file::function) or `pattern` (a regular expression), and a non-empty `reason`"
            raise ExercisedError(f"{shown(path)}: entry {index} {needs}")
        try:
            re.compile(pattern)
        except re.error as error:
            raise ExercisedError(
                f"{shown(path)}: entry {index}: `pattern` {pattern!r} is no regular expression ({error})"
            ) from None
        exclusion = Exclusion(where, reason.strip(), pattern)
        if where:
            _check_names_something(path, root, exclusion)
        out.append(exclusion)
    return out


def _check_names_something(path: Path, root: Path, exclusion: Exclusion) -> None:
    file, _, name = exclusion.where.partition("::")
    if not os.path.isabs(file) and within(root, root / file) and not os.path.lexists(root / file):
        raise ExercisedError(
            f"{shown(path)}: {exclusion.where!r} names no file of the tree (moved? update or drop the entry)"
        )
    source = source_text(root, file, f"{shown(path)}: entry {exclusion.where!r} names")
    if name and name not in set(layout(source).function.values()):
        raise ExercisedError(
            f"{shown(path)}: {exclusion.where!r} names no function in {file} (renamed? update the entry)"
        )
