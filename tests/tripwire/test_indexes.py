"""Indexes that cannot drift: each folder of tripwire names every module it holds and says it is internal, and every
module of tripwire.sync is a layer of the contract that keeps it free of import cycles."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import tripwire

ROOT = Path(__file__).resolve().parents[2]
TRIPWIRE = ROOT / "src" / "tripwire"
FOLDERS = sorted(path for path in TRIPWIRE.iterdir() if (path / "__init__.py").is_file())


def _modules(folder: Path) -> list[str]:
    return sorted(path.stem for path in folder.glob("*.py") if path.stem not in ("__init__", "__main__"))


def _unnamed(folder: Path) -> list[str]:
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))) or ""
    return [name for name in _modules(folder) if not re.search(rf"`(tripwire\.{folder.name}\.)?{name}`", doc)]


def test_every_folder_index_names_every_module() -> None:
    assert {folder.name: _unnamed(folder) for folder in FOLDERS} == {folder.name: [] for folder in FOLDERS}


def test_a_module_missing_from_its_index_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "__init__.py").write_text('"""- `kept`: one thing."""\n')
    (folder / "kept.py").write_text("")
    (folder / "forgotten.py").write_text("")
    assert _unnamed(folder) == ["forgotten"]


def test_every_folder_outside_the_public_modules_says_it_is_internal() -> None:
    names = {folder.name for folder in FOLDERS}
    public_folders = {name.split(".")[1] for name in tripwire.PUBLIC_MODULES if name.count(".") == 1} & names
    for folder in FOLDERS:
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))) or ""
        assert "internal" in doc.lower(), f"{folder.name}/__init__.py does not say its modules are internal"
    assert public_folders == {"sync"}, "tripwire.sync's package is public (the regions); its modules are not"


def test_every_sync_module_is_a_layer_of_the_acyclic_contract() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "tripwire-sync-acyclic")
    layered = {name.strip() for layer in contract["layers"] for name in layer.split("|")}
    assert set(_modules(TRIPWIRE / "sync")) == layered
