"""`python -m tripwire baselines-diff` flags every golden a pull request moved, with what moved in it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tripwire.gates.baselines_diff import main, render


def write(root: Path, relative: str, data: Any) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")


def budget(train_pass: int) -> dict[str, Any]:
    return {"context": {"device": "cpu"}, "regions": {"train_pass": train_pass, "epoch_transfer": 10}, "sites": {}}


def test_identical_folders_report_no_changes(tmp_path: Path) -> None:
    for side in ("base", "head"):
        write(tmp_path / side, "sync_budgets/a.json", budget(0))
    assert render(tmp_path / "base", tmp_path / "head") == "### baselines/\n\nno changes under baselines/\n"


def test_a_raised_sync_budget_is_flagged_with_the_region_and_delta(tmp_path: Path) -> None:
    write(tmp_path / "base", "sync_budgets/a.json", budget(0))
    write(tmp_path / "head", "sync_budgets/a.json", budget(40))
    text = render(tmp_path / "base", tmp_path / "head")
    assert "this pull request changes baselines/" in text
    assert "- changed `sync_budgets/a.json`\n  - region `train_pass`: 0 -> 40 (+40)" in text
    assert "epoch_transfer" not in text


def test_a_changed_telemetry_count_is_named_by_event_type(tmp_path: Path) -> None:
    snapshot = {"by_type": {"EPOCH_COMPLETED": 5}, "by_round": {}, "by_env": {}}
    write(tmp_path / "base", "telemetry/t/s.json", snapshot)
    write(tmp_path / "head", "telemetry/t/s.json", {**snapshot, "by_type": {"EPOCH_COMPLETED": 6}})
    assert "EPOCH_COMPLETED: 5 -> 6 (+1)" in render(tmp_path / "base", tmp_path / "head")


def test_trajectory_changes_name_the_first_checkpoint_with_new_digests(tmp_path: Path) -> None:
    old = {"context": {}, "checkpoints": [["r0/e1/env0/train", {"w": "aa"}], ["r0/e1/env0/reward", {"": "bb"}]]}
    new = {"context": {}, "checkpoints": [["r0/e1/env0/train", {"w": "aa"}], ["r0/e1/env0/reward", {"": "cc"}]]}
    write(tmp_path / "base", "trajectories/a/cpu.json", old)
    write(tmp_path / "head", "trajectories/a/cpu.json", new)
    assert "1 of 2 checkpoints have new digests, first `r0/e1/env0/reward`" in render(
        tmp_path / "base", tmp_path / "head"
    )


def test_added_and_removed_goldens_are_listed(tmp_path: Path) -> None:
    write(tmp_path / "base", "sync_budgets/old.json", budget(0))
    write(tmp_path / "head", "sync_budgets/new.json", budget(0))
    text = render(tmp_path / "base", tmp_path / "head")
    assert "- added `sync_budgets/new.json`" in text and "- removed `sync_budgets/old.json`" in text


def test_a_missing_folder_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "head").mkdir()
    assert main([str(tmp_path / "base"), str(tmp_path / "head")]) == 2
    assert "base folder" in capsys.readouterr().err


def test_moved_call_sites_are_listed_even_when_the_counts_hold(tmp_path: Path) -> None:
    write(tmp_path / "base", "sync_budgets/a.json", {**budget(0), "sites": {"<outside>": {"src/m.py:10": 3}}})
    write(tmp_path / "head", "sync_budgets/a.json", {**budget(0), "sites": {"<outside>": {"src/m.py:12": 3}}})
    text = render(tmp_path / "base", tmp_path / "head")
    assert "call sites in `<outside>`: -`src/m.py:10`, +`src/m.py:12`" in text
    assert "region `" not in text


def test_a_grown_static_audit_count_is_named_by_file_function_and_kind(tmp_path: Path) -> None:
    static = {"format": "tripwire-static-sync/1", "sites": {"src/e.py": {"Engine.train_pass [item]": 0}}}
    grown = {"format": "tripwire-static-sync/1", "sites": {"src/e.py": {"Engine.train_pass [item]": 1}}}
    write(tmp_path / "base", "static_sync/hot_path.json", static)
    write(tmp_path / "head", "static_sync/hot_path.json", grown)
    assert "`src/e.py`: Engine.train_pass [item] 0 -> 1" in render(tmp_path / "base", tmp_path / "head")
