"""Loops written as source text by a test and imported from a file, so sync sites have a real file and line."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def load(folder: Path, source: str) -> ModuleType:
    """Write `source` as loop.py (always the same file) and import a fresh copy of it."""
    path = folder / "loop.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("loop", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tree_with_loop(folder: Path, source: str) -> Path:
    """A source tree for a recording from outside: `folder/tree` holding `source` as loop.py."""
    root = folder / "tree"
    root.mkdir()
    (root / "loop.py").write_text(source, encoding="utf-8")
    return root
