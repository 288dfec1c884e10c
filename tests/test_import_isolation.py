"""Import contracts, each checked in a fresh interpreter by inspecting `sys.modules` after one import.

Contracts point down (leyline <- kasmina/tamiyo/nissa <- tolaria <- simic <- scripts): a lower layer never
drags in a higher one, the contract packages load no torch, and the lazy exports of `esper.tamiyo` work.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import json, sys
import {module}
print(json.dumps(sorted(sys.modules)))
"""


def modules_loaded_by(module: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"import {module} failed: {done.stderr.strip().splitlines()[-1:]}"
    return set(json.loads(done.stdout))


def loaded_from(modules: set[str], *prefixes: str) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


def test_leyline_loads_no_torch_and_no_other_esper_package() -> None:
    loaded = modules_loaded_by("esper.leyline")

    assert loaded_from(loaded, "torch") == []
    assert [m for m in loaded_from(loaded, "esper") if not m.startswith("esper.leyline")] == ["esper"]


def test_tolaria_package_loads_no_torch_nissa_or_vectorized_trainer() -> None:
    loaded = modules_loaded_by("esper.tolaria")

    assert loaded_from(loaded, "torch", "esper.nissa", "esper.simic") == []


def test_tolaria_engine_does_not_reach_up_into_simic_or_nissa() -> None:
    loaded = modules_loaded_by("esper.tolaria.engine")

    assert loaded_from(loaded, "esper.simic", "esper.nissa", "esper.scripts") == []


# One interpreter per group: if importing them all together loads nothing forbidden, neither does each alone.
SIMIC_PACKAGES = "esper.simic, esper.simic.training, esper.simic.agent, esper.simic.rewards"
TORCH_FREE = (
    "esper.nissa, esper.tamiyo, esper.simic, esper.simic.training, esper.simic.training.config, esper.scripts.train"
)


def test_simic_packages_do_not_pull_in_the_vectorized_trainer() -> None:
    loaded = modules_loaded_by(SIMIC_PACKAGES)

    assert loaded_from(loaded, "esper.simic.training.vectorized", "esper.simic.training.vectorized_trainer") == []


def test_nissa_lazy_tamiyo_config_and_cli_load_without_torch() -> None:
    assert loaded_from(modules_loaded_by(TORCH_FREE), "torch") == []


def test_kasmina_and_tamiyo_do_not_import_the_layers_above_them() -> None:
    loaded = modules_loaded_by("esper.kasmina, esper.tamiyo.policy, esper.tamiyo.masks, esper.tamiyo.features")

    assert loaded_from(loaded, "esper.tolaria", "esper.simic", "esper.nissa", "esper.scripts") == []


def test_tripwire_never_imports_esper() -> None:
    loaded = modules_loaded_by("tripwire, tripwire.sync, tripwire.digest, tripwire.budget, tripwire.timing")

    assert loaded_from(loaded, "esper") == []


LAZY_PROBE = """
import json, sys
import esper.tamiyo as tamiyo
before = "torch" in sys.modules
cls = tamiyo.FactoredRecurrentActorCritic
cached = "FactoredRecurrentActorCritic" in vars(tamiyo) and tamiyo.FactoredRecurrentActorCritic is cls
print(json.dumps({"before": before, "after": "torch" in sys.modules, "cached": cached,
                  "dir_has_all": set(tamiyo.__all__) <= set(dir(tamiyo)), "module": cls.__module__}))
"""


def test_tamiyo_lazy_exports_load_on_first_use_and_are_cached() -> None:
    done = subprocess.run([sys.executable, "-c", LAZY_PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr

    facts = json.loads(done.stdout)
    assert facts == {
        "before": False,
        "after": True,
        "cached": True,
        "dir_has_all": True,
        "module": "esper.tamiyo.policy",
    }


def test_tamiyo_unknown_attribute_raises_attribute_error() -> None:
    import esper.tamiyo as tamiyo

    with pytest.raises(AttributeError, match="no attribute 'NotAThing'"):
        tamiyo.NotAThing  # noqa: B018
