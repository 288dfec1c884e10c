"""The config golden catches what the scenario goldens cannot: injected config changes, each named in one line.

Most tests edit a copy of the snapshot; one changes a default in a patched copy of `src/esper` and builds the
snapshot in a subprocess, so the real code path (dataclass defaults, presets, `json_value`) is exercised.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from config_golden import (
    FORMAT,
    ConfigGoldenDiffers,
    check_config_golden,
    config_differences,
    effective_configs,
    format_differences,
    load_golden,
    task_specs,
    write_golden,
)

from esper.simic.training.config import TrainingConfig
from tripwire.common.errors import GoldenFileError, update_command

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("config_golden.py")
PRESETS = ["preset:cifar_baseline", "preset:cifar_baseline_stable", "preset:cifar_impaired", "preset:cifar_minimal"]


@pytest.fixture(scope="module")
def golden() -> dict[str, dict[str, Any]]:
    return effective_configs()


def snapshot_in_subprocess(tmp_path: Path, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_the_snapshot_holds_the_defaults_and_every_preset_with_every_field(golden: dict[str, Any]) -> None:
    assert list(golden) == ["defaults", *PRESETS]
    fields = list(golden["defaults"])
    assert fields == sorted(fields) and {"lr", "n_envs", "amp", "telemetry_level", "slots"} <= set(fields)
    assert all(list(values) == fields for values in golden.values())
    assert golden["defaults"]["amp"] == "off" and golden["defaults"]["telemetry_level"] == "normal"
    assert golden["defaults"]["slots"] == ["r0c1"]
    assert config_differences(golden, copy.deepcopy(golden)) == []


def test_a_changed_default_names_field_values_and_the_presets_that_inherit_it(golden: dict[str, Any]) -> None:
    current = copy.deepcopy(golden)
    for values in current.values():  # every preset inherits lr
        values["lr"] = 0.001
    current["defaults"]["entropy_coef"] = 0.07  # every preset overrides entropy_coef: the scenarios never see it
    assert config_differences(golden, current) == [
        "defaults: entropy_coef 0.05 -> 0.07 (no preset inherits it)",
        f"defaults: lr 0.0003 -> 0.001 (also {', '.join(PRESETS)})",
    ]


def test_a_preset_that_overrides_a_changed_default_differently_gets_its_own_line(golden: dict[str, Any]) -> None:
    current = copy.deepcopy(golden)
    for key in ("defaults", "preset:cifar_baseline", "preset:cifar_impaired", "preset:cifar_minimal"):
        current[key]["n_envs"] = 8
    current["preset:cifar_baseline_stable"]["n_envs"] = 2
    assert config_differences(golden, current) == [
        "defaults: n_envs 4 -> 8 (also preset:cifar_baseline, preset:cifar_impaired, preset:cifar_minimal)",
        "preset:cifar_baseline_stable: n_envs 4 -> 2",
    ]


def test_a_preset_change_is_named_with_its_preset(golden: dict[str, Any]) -> None:
    current = copy.deepcopy(golden)
    current["preset:cifar_impaired"]["n_envs"] = 8
    current["preset:cifar_impaired"]["task"] = "cifar_minimal"
    assert config_differences(golden, current) == [
        "preset:cifar_impaired: n_envs 4 -> 8",
        'preset:cifar_impaired: task "cifar_impaired" -> "cifar_minimal"',
    ]


def test_added_and_removed_fields_are_named(golden: dict[str, Any]) -> None:
    current = copy.deepcopy(golden)
    for values in current.values():
        values["warmup_rounds"] = 3
        del values["max_seeds"]
    current["preset:cifar_minimal"]["warmup_rounds"] = 0
    assert config_differences(golden, current) == [
        f"defaults: max_seeds removed (was null) (also {', '.join(PRESETS)})",
        "defaults: warmup_rounds added (3) (also preset:cifar_baseline, preset:cifar_baseline_stable, "
        "preset:cifar_impaired)",
        "preset:cifar_minimal: warmup_rounds added (0)",
    ]


def test_added_and_removed_presets_are_named(golden: dict[str, Any]) -> None:
    current = copy.deepcopy(golden)
    del current["preset:cifar_minimal"]
    current["preset:cifar_scale"] = copy.deepcopy(golden["defaults"])
    assert config_differences(golden, current) == [
        "preset:cifar_minimal: removed (in the golden, not in the current configs)",
        "preset:cifar_scale: added (not in the golden)",
    ]


def test_every_difference_is_in_one_message_defaults_first_ending_with_the_update_hint(
    golden: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stale = copy.deepcopy(golden)
    stale["preset:cifar_impaired"]["n_envs"] = 2  # the golden's preset differs: the current one reads 2 -> 4
    del stale["preset:cifar_minimal"]  # a preset added since the golden was written
    for values in stale.values():
        values["lr"] = 0.001  # the default changed since: 0.001 -> 0.0003, inherited by every preset
    path = tmp_path / "config" / "training_config.json"
    write_golden(path, stale)
    with pytest.raises(ConfigGoldenDiffers) as raised:
        check_config_golden(path, shown_path="baselines/config/training_config.json")
    lines = str(raised.value).splitlines()
    inheriting = ", ".join(key for key in PRESETS if key != "preset:cifar_minimal")
    assert lines == [
        "training config differs from its golden baselines/config/training_config.json in 3 place(s):",
        f"  defaults: lr 0.001 -> 0.0003 (also {inheriting})",
        "  preset:cifar_impaired: n_envs 2 -> 4",
        "  preset:cifar_minimal: added (not in the golden)",
        f"  change the value back, or if intended, regenerate with `{update_command()}` (refused under CI) and "
        "commit the diff",
    ]


def test_update_writes_a_sorted_golden_with_its_format_tag_that_then_passes(tmp_path: Path) -> None:
    path = tmp_path / "config" / "training_config.json"
    status, detail = check_config_golden(path, update=True)
    fields = len(dataclasses.fields(TrainingConfig))
    assert status == "updated" and detail.endswith(f"(defaults and 4 presets, {fields} fields each; 4 built-in tasks)")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["format"] == FORMAT and list(data) == ["configs", "format", "tasks"]
    assert path.read_text(encoding="utf-8") == json.dumps(data, indent=2, sort_keys=True) + "\n"
    assert load_golden(path) == effective_configs()
    assert check_config_golden(path) == ("passed", f"defaults and 4 presets, {fields} fields each; 4 built-in tasks")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (None, "config golden does not exist"),
        ('{"format": "esper-config/1", "configs": {', "not valid JSON"),
        ('{"format": "esper-config/0", "configs": {"defaults": {}}}', "not a config golden"),
        ('{"format": "esper-config/1", "configs": {"preset:x": {}}}', "not a config golden"),
        (b"\xff\xfe", "not UTF-8 text"),
    ],
    ids=["missing", "not-json", "other-format", "no-defaults", "binary"],
)
def test_a_missing_or_malformed_golden_is_one_line_naming_the_file_and_the_update_command(
    tmp_path: Path, text: str | bytes | None, says: str
) -> None:
    path = tmp_path / "training_config.json"
    if isinstance(text, bytes):
        path.write_bytes(text)
    elif text is not None:
        path.write_text(text, encoding="utf-8")
    with pytest.raises(GoldenFileError) as raised:
        check_config_golden(path)
    message = str(raised.value)
    assert len(message.splitlines()) == 1 and message.startswith(str(path))
    assert says in message and f"`{update_command()}`" in message and message.count(update_command()) == 1


def test_a_default_changed_in_the_source_is_caught_with_the_presets_that_inherit_it(
    golden: dict[str, Any], tmp_path: Path
) -> None:
    """The hazard itself: a refactor edits a default in config.py; the snapshot is built from the patched copy."""
    shutil.copytree(ROOT / "src" / "esper", tmp_path / "esper", ignore=shutil.ignore_patterns("__pycache__"))
    config_py = tmp_path / "esper" / "simic" / "training" / "config.py"
    source = config_py.read_text(encoding="utf-8")
    declared = '    lr: float = option(\n        3e-4,\n        "policy learning rate",'
    assert source.count(declared) == 1, "the lr declaration moved: update this test's text replacement"
    config_py.write_text(source.replace(declared, declared.replace("3e-4", "1e-3")), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    patched = snapshot_in_subprocess(tmp_path, env)
    assert patched["tasks"] == task_specs()
    lines = config_differences(golden, patched["configs"])
    message = format_differences("baselines/config/training_config.json", lines)
    print(message)  # shown with -s: the failure the gate reports
    assert lines == [f"defaults: lr 0.0003 -> 0.001 (also {', '.join(PRESETS)})"]


def test_the_snapshot_depends_on_no_environment_variable_or_working_directory(
    golden: dict[str, Any], tmp_path: Path
) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OMP_", "MKL_", "CUDA", "CUBLAS", "PYTHONHASHSEED", "ATEN_", "TORCH"))
    }
    env |= {"OMP_NUM_THREADS": "7", "PYTHONHASHSEED": "12345", "CUDA_VISIBLE_DEVICES": "", "HOME": str(tmp_path)}
    assert snapshot_in_subprocess(tmp_path, env) == {"configs": golden, "tasks": task_specs()}


def test_a_changed_built_in_task_spec_fails_naming_the_task_and_field(tmp_path: Path) -> None:
    # the spec is a module-level literal: coverage sees the edited line run at import, and no scenario uses the task
    path = tmp_path / "config" / "training_config.json"
    tasks = task_specs()
    assert set(tasks) == {"cifar_baseline", "cifar_impaired", "cifar_minimal", "cifar_scale"}
    stale = copy.deepcopy(tasks)
    stale["cifar_minimal"]["pool_layers"] = 1  # the golden's; the tree's reads 0
    del stale["cifar_scale"]
    write_golden(path, effective_configs(), stale)
    with pytest.raises(ConfigGoldenDiffers) as raised:
        check_config_golden(path)
    lines = str(raised.value).splitlines()
    assert lines[1:3] == ["  task:cifar_minimal: pool_layers 1 -> 0", "  task:cifar_scale: added (not in the golden)"]


def test_a_golden_written_before_tasks_were_golden_fails_until_recorded_again(tmp_path: Path) -> None:
    path = tmp_path / "config" / "training_config.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"configs": effective_configs(), "format": FORMAT}), encoding="utf-8")
    with pytest.raises(ConfigGoldenDiffers, match="task:cifar_baseline: added"):
        check_config_golden(path)


def test_a_task_registered_by_a_user_is_not_built_in(monkeypatch: pytest.MonkeyPatch) -> None:
    from esper.leyline import tasks

    monkeypatch.setitem(tasks.TASKS, "mine", dataclasses.replace(tasks.TASKS["cifar_baseline"], name="mine"))
    assert "mine" not in task_specs()
