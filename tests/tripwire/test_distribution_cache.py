"""The map of installed distributions a result names is kept in tripwire's cache folder, and any install changes it."""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path

import pytest

from tripwire.common import context


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("TRIPWIRE_CACHE_DIR", str(folder))
    context._owners.cache_clear()
    yield folder
    context._owners.cache_clear()


def _install(site: Path, name: str, module: str) -> None:
    """A distribution as an installer leaves it: its module and a metadata folder naming it."""
    (site / module).mkdir(parents=True)
    (site / module / "__init__.py").write_text("")
    meta = site / f"{name}-1.0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (meta / "RECORD").write_text(f"{module}/__init__.py,,\n{meta.name}/METADATA,,\n")


def test_the_cached_map_is_the_computed_one(cache: Path) -> None:
    first = context._owners()
    assert len(list(cache.glob("owners-*.json"))) == 1
    context._owners.cache_clear()
    assert context._owners() == first == importlib.metadata.packages_distributions()


def test_an_install_is_seen_at_once(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hazard: a cached map read after an install would not know the new distribution."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setattr(sys, "path", [str(site), *sys.path])
    assert "fresh_module" not in context._owners()
    context._owners.cache_clear()
    _install(site, "fresh-dist", "fresh_module")
    assert context._owners()["fresh_module"] == ["fresh-dist"]
    assert len(list(cache.glob("owners-*.json"))) == 2


def test_an_unwritable_cache_only_costs_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("TRIPWIRE_CACHE_DIR", str(blocked / "cache"))
    context._owners.cache_clear()
    try:
        assert context._owners() == importlib.metadata.packages_distributions()
    finally:
        context._owners.cache_clear()


def test_the_cache_folder_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRIPWIRE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere")
    assert context.cache_folder() == os.path.join("/somewhere", "tripwire")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert context.cache_folder() == os.path.join(os.path.expanduser("~"), ".cache", "tripwire")
