"""The runner end to end on the cheapest guardrail (import contracts): it reports what really fired."""

from __future__ import annotations

from pathlib import Path

import pytest
from catalogue import HAZARDS, IMPORTS, Edit, Hazard
from runner import ROOT, copy_tree, run_hazard


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_tree(ROOT, tmp_path_factory.mktemp("hazards") / "clean")


def test_the_import_hazard_is_caught_by_the_named_contract(clean: Path, tmp_path: Path) -> None:
    hazard = next(h for h in HAZARDS if h.run == "imports")
    outcome = run_hazard(hazard, clean, tmp_path / "goldens", tmp_path)
    assert outcome.verdict == "caught"
    assert outcome.fired == {IMPORTS: "extracted training modules never import simic.training.vectorized BROKEN"}


def test_a_harmless_patch_is_reported_missed_not_caught(clean: Path, tmp_path: Path) -> None:
    harmless = Hazard(
        "comment_only",
        "a comment added",
        (
            Edit(
                "src/esper/simic/training/action_execution.py",
                "\nfrom __future__ import annotations\n",
                "\n# a comment\nfrom __future__ import annotations\n",
            ),
        ),
        IMPORTS,
        "imports",
    )
    outcome = run_hazard(harmless, clean, tmp_path / "goldens", tmp_path)
    assert (outcome.verdict, outcome.fired) == ("MISSED", {})
