"""tripwire is a distribution of its own: torch and numpy only, every other import behind the extra that brings it.

Verified by hand in a fresh virtual environment holding only torch (docs/tripwire.md, "Install"): installing
src/tripwire brought numpy and nothing else (no esper, torchvision or rich), and the guide's example ran there.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).parents[2]
TRIPWIRE = tomllib.loads((ROOT / "src" / "tripwire" / "pyproject.toml").read_text(encoding="utf-8"))
ESPER = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))

# The import name of each distribution an extra may bring.
IMPORT_NAMES = {"pytest": "pytest", "syrupy": "syrupy", "pytest-benchmark": "pytest_benchmark", "scipy": "scipy"}
IMPORT_NAMES |= {"matplotlib": "matplotlib", "rich": "rich", "torch": "torch", "numpy": "numpy", "tripwire-gate": ""}
IMPORT_NAMES |= {"coverage": "coverage"}
# Which extra a module's imports come from (the rest of tripwire needs only the base dependencies).
EXTRA_OF = {
    "tripwire.gates.pytest_plugin": "pytest",
    "tripwire.telemetry.snapshot": "pytest",
    "tripwire.bench": "bench",
}
EXTRA_OF |= {
    "tripwire.history": "history",
    "tripwire.gates.exercised": "coverage",
    "tripwire.gates.coverage_data": "coverage",
    "tripwire.compile.traced": "coverage",
}


def _names(requirements: list[str]) -> set[str]:
    return {IMPORT_NAMES[req.split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip()] for req in requirements}


def _extra_of(module: str) -> str:
    matches = (extra for prefix, extra in EXTRA_OF.items() if module == prefix or module.startswith(prefix + "."))
    return next(matches, "")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("tripwire", include_external_packages=True)


def test_tripwire_depends_on_torch_and_numpy_only_and_registers_its_pytest_plugin() -> None:
    assert _names(TRIPWIRE["project"]["dependencies"]) == {"torch", "numpy"}
    assert TRIPWIRE["project"]["entry-points"]["pytest11"] == {"tripwire": "tripwire.gates.pytest_plugin"}
    assert "pytest11" not in ESPER["project"].get("entry-points", {})  # registered once, by tripwire's own dist


def test_the_reference_trainer_depends_on_tripwire_not_the_other_way() -> None:
    assert "tripwire-gate" in ESPER["project"]["dependencies"]
    assert ESPER["tool"]["uv"]["sources"]["tripwire-gate"] == {"path": "src/tripwire", "editable": True}
    assert "tripwire*" not in str(ESPER["tool"]["setuptools"]["packages"]["find"].get("include"))


def test_every_external_import_of_tripwire_is_a_dependency_or_in_its_modules_extra(graph: grimp.ImportGraph) -> None:
    extras = {name: _names(reqs) for name, reqs in TRIPWIRE["project"]["optional-dependencies"].items()}
    base = _names(TRIPWIRE["project"]["dependencies"])
    stdlib = set(sys.stdlib_module_names)
    misplaced = []
    for module in sorted(m for m in graph.modules if m.startswith("tripwire")):
        allowed = base | extras.get(_extra_of(module), set())
        for imported in graph.find_modules_directly_imported_by(module):
            top = imported.split(".")[0]
            if top != "tripwire" and top not in stdlib and top not in allowed:
                misplaced.append(f"{module} imports {imported} (allowed: {sorted(allowed)})")
    assert not misplaced, "\n".join(misplaced)


def test_each_extra_holds_only_what_its_modules_import(graph: grimp.ImportGraph) -> None:
    for extra, requirements in TRIPWIRE["project"]["optional-dependencies"].items():
        if extra == "all":
            continue
        modules = [m for m in graph.modules if _extra_of(m) == extra]
        imported = {i.split(".")[0] for m in modules for i in graph.find_modules_directly_imported_by(m)}
        # pytest runs the bench suite and the plugin; pytest-benchmark is the pytest plugin the bench suite runs under
        unused = _names(requirements) - imported - {"pytest", "pytest_benchmark"}
        assert not unused, f"extra {extra!r} brings {sorted(unused)}, which none of its modules imports"


def test_esper_tests_get_every_extra_of_tripwire() -> None:
    test_extra = " ".join(ESPER["project"]["optional-dependencies"]["test"])
    assert "tripwire-gate[pytest,bench,history,coverage]" in test_extra
    assert "grimp" in test_extra  # tests/test_import_isolation.py and this file import it
