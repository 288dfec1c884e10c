"""The hazard catalogue stays applicable to the real tree, and the runner's verdicts mean what they say."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from catalogue import (
    BENCH,
    CLOCK,
    COMPILE_BUDGET,
    CONFIG,
    DETERMINISM,
    EXERCISED,
    HAZARDS,
    IMPORTS,
    LOADS_WITHOUT,
    NOTHING,
    STATIC_AUDIT,
    SYNC_BUDGET,
    TELEMETRY,
    TRAJECTORY,
    AnchorError,
    Edit,
    Hazard,
    Move,
    apply_edits,
)
from runner import judge, select, table

ROOT = Path(__file__).resolve().parents[2]
IDS = [hazard.name for hazard in HAZARDS]


@pytest.mark.parametrize("hazard", HAZARDS, ids=IDS)
def test_every_hazard_applies_to_a_copy_of_the_real_tree_and_changes_it(hazard: Hazard, tmp_path: Path) -> None:
    touched = sorted({edit.path for edit in hazard.edits})
    for path in touched:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, tmp_path / path)
    apply_edits(tmp_path, hazard.edits)
    for path in touched:
        assert (tmp_path / path).read_text(encoding="utf-8") != (ROOT / path).read_text(encoding="utf-8")
        compile((tmp_path / path).read_text(encoding="utf-8"), path, "exec")  # the patch is valid Python


def test_a_missing_anchor_is_an_error_naming_the_file_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / "module.py").write_text("x = 1\n", encoding="utf-8")
    with pytest.raises(AnchorError, match=r"module.py: anchor 'y = 2' found 0 times .* tests/hazards/catalogue.py"):
        apply_edits(tmp_path, (Edit("module.py", "y = 2\n", "y = 3\n"),))


def test_an_ambiguous_anchor_is_refused(tmp_path: Path) -> None:
    (tmp_path / "module.py").write_text("x = 1\nx = 1\n", encoding="utf-8")
    with pytest.raises(AnchorError, match="found 2 times"):
        apply_edits(tmp_path, (Edit("module.py", "x = 1\n", "x = 2\n"),))


def test_the_catalogue_exercises_every_guardrail() -> None:
    expected = {TELEMETRY, SYNC_BUDGET, TRAJECTORY, IMPORTS, STATIC_AUDIT, CONFIG, LOADS_WITHOUT, BENCH, COMPILE_BUDGET}
    expected |= {EXERCISED, NOTHING, DETERMINISM, CLOCK}  # a changed line no scenario ran; controls; a setting; a unit
    assert {hazard.expected for hazard in HAZARDS} == expected
    assert len(set(IDS)) == len(IDS)


HAZARD = Hazard("h", "", (), TRAJECTORY, "a_baseline", tolerated=(TELEMETRY,))


def test_the_expected_guardrail_firing_is_caught() -> None:
    assert judge(HAZARD, {TRAJECTORY: "diverged"}) == "caught"
    assert judge(HAZARD, {TRAJECTORY: "diverged", TELEMETRY: "counts moved"}) == "caught"


def test_nothing_firing_is_missed() -> None:
    assert judge(HAZARD, {}) == "MISSED"


def test_only_another_guardrail_or_an_untolerated_one_is_the_wrong_guardrail() -> None:
    assert judge(HAZARD, {TELEMETRY: "counts moved"}) == "WRONG GUARDRAIL"
    assert judge(HAZARD, {TRAJECTORY: "diverged", SYNC_BUDGET: "over"}) == "WRONG GUARDRAIL"


def test_unknown_hazard_names_are_refused_with_the_choices() -> None:
    with pytest.raises(SystemExit, match=r"unknown hazard.*no_such.*choose from"):
        select(["no_such"])


def test_the_table_escapes_pipes_in_details() -> None:
    from runner import Outcome

    rows = table([Outcome("h", TRAJECTORY, {TRAJECTORY: "a | b"}, "caught", 1.0)])
    assert rows[-1] == "| h | trajectory | trajectory | caught | a \\| b | 1 |"


def test_a_hazard_whose_anchor_is_gone_is_an_error_row_not_a_crash(tmp_path: Path) -> None:
    from runner import run_hazard

    (tmp_path / "clean" / "src").mkdir(parents=True)
    (tmp_path / "clean" / "src" / "module.py").write_text("x = 1\n", encoding="utf-8")
    stale = Hazard("stale", "", (Edit("src/module.py", "y = 2\n", "y = 3\n"),), TRAJECTORY, "a_baseline")
    outcome = run_hazard(stale, tmp_path / "clean", tmp_path / "goldens", tmp_path)
    assert (outcome.verdict, outcome.fired) == ("ERROR", {})


CONTROL = Hazard("c", "", (), NOTHING, "static+a_baseline")


def test_a_control_is_clean_only_when_nothing_fires() -> None:
    assert CONTROL.runs == ("static", "a_baseline")
    assert judge(CONTROL, {}) == "clean"
    assert judge(CONTROL, {STATIC_AUDIT: "NEW src/x.py:3 in f [item 0 -> 1]"}) == "FALSE ALARM"


def test_a_move_carries_the_function_verbatim_with_the_imports_and_re_exports_it(tmp_path: Path) -> None:
    package = tmp_path / "src" / "pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "old.py").write_text(
        "from __future__ import annotations\n\nimport math\n\n\n@staticmethod\ndef area(r):\n"
        "    return math.pi * r * r\n\n\ndef kept():\n    return area(1.0)\n",
        encoding="utf-8",
    )
    apply_edits(tmp_path, (Move("src/pkg/old.py", "area", "src/pkg/new.py"),))
    moved = (package / "new.py").read_text(encoding="utf-8")
    assert "import math\n" in moved and "@staticmethod\ndef area(r):\n    return math.pi * r * r\n" in moved
    old = (package / "old.py").read_text(encoding="utf-8")
    assert "from pkg.new import area" in old and "def area" not in old and "def kept" in old
    with pytest.raises(AnchorError, match="top-level function 'area' found 0 times"):
        apply_edits(tmp_path, (Move("src/pkg/old.py", "area", "src/pkg/other.py"),))
