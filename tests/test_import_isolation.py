"""Import contracts, each checked in a fresh interpreter by inspecting `sys.modules` after one import.

Contracts point down (leyline <- kasmina/tamiyo/nissa <- tolaria <- simic <- scripts): a lower layer never
drags in a higher one, and the contract packages load no torch.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

PROBE = """
import json, sys
import {module}
print(json.dumps(sorted(sys.modules)))
"""


def modules_loaded_by(module: str, src: Path | None = None) -> set[str]:
    env = {**os.environ, "PYTHONPATH": str(src)} if src else None
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, f"import {module} failed: {done.stderr.strip().splitlines()[-1:]}"
    return set(json.loads(done.stdout))


def loaded_from(modules: set[str], *prefixes: str) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


# Imports each named module in one fresh interpreter where torch, torchvision and numpy cannot be imported; prints
# {module: "what it tried to import, from which file:line"} for each module that failed.
BLOCKED_PROBE = """
import importlib, json, sys, traceback
BLOCKED = {"torch", "torchvision", "numpy"}
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            ours = [f for f in traceback.extract_stack() if "/esper/" in f.filename.replace(chr(92), "/")]
            where = f"{ours[-1].filename}:{ours[-1].lineno}" if ours else "?"
            raise ImportError(f"imports {name} ({where})")
        return None
sys.meta_path.insert(0, Blocker())
failures = {}
for module in sys.argv[1:]:
    try:
        importlib.import_module(module)
    except ImportError as error:
        failures[module] = str(error)
    leaked = sorted(m for m in sys.modules if m.startswith("esper.") and not m.startswith("esper.leyline"))
    if leaked:
        failures[module] = f"imports another esper package: {leaked}"
print(json.dumps(failures))
"""


def leyline_modules(src: Path) -> list[str]:
    """Every module under esper/leyline in `src`, found on disk (a new module is covered without a test edit)."""
    package = src / "esper" / "leyline"
    return sorted(
        "esper." + ".".join(path.relative_to(src / "esper").with_suffix("").parts).removesuffix(".__init__")
        for path in package.rglob("*.py")
    )


def leyline_torch_imports(src: Path) -> dict[str, str]:
    """{module: why} for each leyline module under `src` that cannot load without torch (empty when all can)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    command = [sys.executable, "-c", BLOCKED_PROBE, *leyline_modules(src)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=src)
    assert done.returncode == 0, done.stderr[-2000:]
    failures: dict[str, str] = json.loads(done.stdout)
    return failures


def test_leyline_loads_no_torch_and_no_other_esper_package() -> None:
    loaded = modules_loaded_by("esper.leyline")

    assert loaded_from(loaded, "torch") == []
    assert [m for m in loaded_from(loaded, "esper") if not m.startswith("esper.leyline")] == ["esper"]
    modules = leyline_modules(SRC)
    assert "esper.leyline.records" in modules and len(modules) >= 8
    failures = leyline_torch_imports(SRC)
    assert failures == {}, "; ".join(f"{module} {why}" for module, why in failures.items())


def test_a_leyline_module_outside_the_package_init_that_imports_torch_is_named(tmp_path: Path) -> None:
    shutil.copytree(SRC / "esper", tmp_path / "esper", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "esper" / "leyline" / "extra_specs.py").write_text(
        '"""A contract module nobody imports from the package init."""\n\nimport torch  # noqa: F401\n',
        encoding="utf-8",
    )
    # Importing the package alone still looks clean: only a per-module import finds it.
    assert loaded_from(modules_loaded_by("esper.leyline", tmp_path), "torch") == []
    failures = leyline_torch_imports(tmp_path)
    assert list(failures) == ["esper.leyline.extra_specs"]
    assert "imports torch" in failures["esper.leyline.extra_specs"] and "extra_specs.py:3" in failures[
        "esper.leyline.extra_specs"
    ].replace("\\", "/")


def test_tolaria_package_loads_no_torch_nissa_or_vectorized_trainer() -> None:
    loaded = modules_loaded_by("esper.tolaria")

    assert loaded_from(loaded, "torch", "esper.nissa", "esper.simic") == []


def test_tolaria_engine_does_not_reach_up_into_simic_or_nissa() -> None:
    loaded = modules_loaded_by("esper.tolaria.engine")

    assert loaded_from(loaded, "esper.simic", "esper.nissa", "esper.scripts") == []


# One interpreter per group: if importing them all together loads nothing forbidden, neither does each alone.
SIMIC_PACKAGES = "esper.simic, esper.simic.training, esper.simic.agent, esper.simic.rewards"
# Which modules load without torch (nissa, tamiyo, simic, the config, the CLI, ...) is declared once, in
# pyproject.toml [tool.tripwire.loads-without], and checked module by module by the gate:
# tests/guardrails/test_guardrail_loads_without.py.


def test_simic_packages_do_not_pull_in_the_vectorized_trainer() -> None:
    loaded = modules_loaded_by(SIMIC_PACKAGES)

    assert loaded_from(loaded, "esper.simic.training.vectorized", "esper.simic.training.trainer") == []


def test_kasmina_and_tamiyo_do_not_import_the_layers_above_them() -> None:
    loaded = modules_loaded_by("esper.kasmina, esper.tamiyo.policy, esper.tamiyo.masks, esper.tamiyo.features")

    assert loaded_from(loaded, "esper.tolaria", "esper.simic", "esper.nissa", "esper.scripts") == []


def test_tripwire_never_imports_esper() -> None:
    loaded = modules_loaded_by(
        "tripwire, tripwire.sync, tripwire.sync.counter, tripwire.bitwise.digest, tripwire.sync.budget, tripwire.timing"
    )

    assert loaded_from(loaded, "esper") == []


def test_tamiyo_package_re_exports_nothing_so_static_tools_see_every_import() -> None:
    import esper.tamiyo as tamiyo

    public = [
        name
        for name, value in vars(tamiyo).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)  # submodules appear once imported
    ]
    assert public == [], f"esper.tamiyo re-exports {public}: import from the submodule instead"


@pytest.mark.parametrize("package", ["tripwire", "esper"])
def test_no_import_cycle(package: str) -> None:
    import grimp

    graph = grimp.build_graph(package)
    cycles = sorted(
        (importer, imported)
        for importer in graph.modules
        for imported in graph.find_modules_directly_imported_by(importer)
        if graph.chain_exists(importer=imported, imported=importer)
    )
    assert cycles == [], f"import cycles in {package}: {cycles}"


def test_the_regions_a_trainer_imports_load_no_torch_and_none_of_the_gates() -> None:
    loaded = modules_loaded_by("tripwire.sync")

    assert loaded_from(loaded, "torch", "tripwire.sync.counter", "tripwire.sync.budget", "tripwire.sync.hooks") == []
    assert "tripwire.sync.regions" in loaded
