"""Copies of loops kept as published (tests/tripwire/third_party, tests/tripwire/loops), edited for one test: the
published files are never touched."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from tripwire.outside.result import Result


def checkout(folder: Path, script: Path, *changes: tuple[str, str], beside: Sequence[Path] = ()) -> Path:
    """A copy of `script` in `folder`, with each change applied (every occurrence of its old text), and a copy of
    each folder in `beside` (a package the script imports) next to it."""
    folder.mkdir(parents=True)
    for package in beside:
        shutil.copytree(package, folder / package.name)
    text = script.read_text(encoding="utf-8")
    for old, new in changes:
        assert old in text, old
        text = text.replace(old, new)
    (folder / script.name).write_text(text, encoding="utf-8")
    return folder


def ran(result: Result) -> Result:
    assert result.status == "ok", result.cause
    return result
