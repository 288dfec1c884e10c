"""The refactor plans' users run `uv run pytest ...`; uv syncs the `dev` dependency group by default, so that group
must bring the test tools (verified by hand from a fresh copy: `UV_CACHE_DIR=.uv-cache uv run pytest -q
tests/test_import_isolation.py` built .venv with torch 2.14.1 and passed 12 tests in 29 s)."""

from __future__ import annotations

import tomllib
from pathlib import Path

PYPROJECT = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text(encoding="utf-8"))


def test_uv_run_gets_the_test_tools_through_the_default_dev_group() -> None:
    dev_group = PYPROJECT["dependency-groups"]["dev"]
    assert "esper[test,lint]" in dev_group
    assert any(
        requirement.startswith("pytest>=") for requirement in PYPROJECT["project"]["optional-dependencies"]["test"]
    )
    default_groups = PYPROJECT.get("tool", {}).get("uv", {}).get("default-groups", ["dev"])
    assert "dev" in default_groups
