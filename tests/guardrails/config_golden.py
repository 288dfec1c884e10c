"""The configuration golden: the effective value of every TrainingConfig field, for the defaults and every preset,
and every field of each built-in task spec.

A refactor that changes a default is invisible to the scenario goldens when every scenario's preset overrides that
field; this golden is not. A built-in task's spec (`esper.leyline.tasks.TASKS`) is a literal that runs at import, so
changed-line coverage sees an edit to it as run, and no scenario uses every task: it is golden here too (`"tasks"`,
`task_specs()`, named `task:<name>` in the differences). `effective_configs()` builds the snapshot (`"defaults"`:
`TrainingConfig()`, `"preset:<name>"`: `preset_config(name)` for each name in `PRESETS`, every field as the config
module's own JSON spelling, `json_value`), `config_differences(golden, current)` names what changed, one line each,
and `check_config_golden(path, update=...)` is the gate's check (or, with `update`, rewrites the golden).

Run as a script, it prints `snapshot()` as JSON (the hazard test runs it on a patched copy of `src/esper`).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tripwire.common.errors import GoldenFileError, GuardrailFailure, read_golden_json, update_command

FORMAT = "esper-config/1"
GOLDEN = Path("config") / "training_config.json"  # under the baselines directory
DEFAULTS = "defaults"
PRESET = "preset:"
TASK = "task:"

# Fields left out of the golden, each with why its value may differ between machines. None today: every default
# and preset value is a literal (device "cpu", env_workers 1, every path None), never read from the machine (CPU
# count, environment, working directory); tests/guardrails/test_config_golden_unit.py checks the snapshot is the
# same under another environment and working directory.
EXCLUDED_FIELDS: dict[str, str] = {}

_MISSING = object()  # a field or config absent on one side


class ConfigGoldenDiffers(GuardrailFailure):
    """The effective configuration values differ from the golden; the message names every difference."""


def effective_configs() -> dict[str, dict[str, Any]]:
    """Every config's effective values: {"defaults" | "preset:<name>": {field: JSON value}}, keys sorted."""
    from esper.simic.training.config import PRESETS, TrainingConfig, json_value, preset_config

    configs = {DEFAULTS: TrainingConfig(), **{f"{PRESET}{name}": preset_config(name) for name in PRESETS}}
    snapshot = {
        key: {
            spec.name: json_value(getattr(config, spec.name))
            for spec in sorted(dataclasses.fields(config), key=lambda spec: spec.name)
            if spec.name not in EXCLUDED_FIELDS
        }
        for key, config in sorted(configs.items())
    }
    # Round-trip through JSON so the snapshot compares equal to the golden read back (lists, not tuples).
    loaded: dict[str, dict[str, Any]] = json.loads(json.dumps(snapshot, allow_nan=False))
    return loaded


def task_specs() -> dict[str, dict[str, Any]]:
    """Every built-in task's spec: {name: {field: JSON value}} (tasks a user registers are not built in)."""
    from esper.leyline.tasks import TASKS, VALID_TASKS

    specs = {name: dataclasses.asdict(TASKS[name]) for name in sorted(VALID_TASKS)}
    loaded: dict[str, dict[str, Any]] = json.loads(json.dumps(specs, sort_keys=True, allow_nan=False))
    return loaded


def golden_payload(
    configs: Mapping[str, Mapping[str, Any]], tasks: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    return {"configs": configs, "format": FORMAT, "tasks": task_specs() if tasks is None else tasks}


def write_golden(
    path: Path, configs: Mapping[str, Mapping[str, Any]], tasks: Mapping[str, Mapping[str, Any]] | None = None
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(golden_payload(configs, tasks), indent=2, sort_keys=True, allow_nan=False) + "\n"
    path.write_text(text, encoding="utf-8")


def load_golden(path: Path) -> dict[str, dict[str, Any]]:
    """The golden's configs; a missing or malformed file raises a one-line `GoldenFileError` naming it."""
    return _load(path)[0]


def load_golden_tasks(path: Path) -> dict[str, dict[str, Any]]:
    """The golden's task specs ({} in a golden written before they were golden: every task then reads added)."""
    return _load(path)[1]


def _load(path: Path) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    regenerate = f"regenerate it with `{update_command()}` and review the diff"
    try:
        data = read_golden_json(path, f"config golden does not exist (record it with `{update_command()}`)")
    except GoldenFileError as error:
        if update_command() in str(error):
            raise
        raise GoldenFileError(f"{error}; {regenerate}") from None
    configs = data.get("configs") if isinstance(data, dict) and data.get("format") == FORMAT else None
    if (
        not isinstance(configs, dict)
        or not isinstance(configs.get(DEFAULTS), dict)
        or not all(isinstance(values, dict) for values in configs.values())
    ):
        raise GoldenFileError(
            f'{path}: not a config golden (expected "format": "{FORMAT}" and "configs" with "{DEFAULTS}"); {regenerate}'
        )
    tasks = data.get("tasks", {})
    if not isinstance(tasks, dict) or not all(isinstance(spec, dict) for spec in tasks.values()):
        raise GoldenFileError(f'{path}: "tasks" is not an object of task specs; {regenerate}')
    return configs, tasks


def _shown(value: Any) -> str:
    return json.dumps(value)


def _change(field: str, old: Any, new: Any) -> str:
    if old is _MISSING:
        return f"{field} added ({_shown(new)})"
    if new is _MISSING:
        return f"{field} removed (was {_shown(old)})"
    return f"{field} {_shown(old)} -> {_shown(new)}"


def _changes(golden: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """field -> (old, new) for every field whose value differs, was added or was removed."""
    return {
        field: (golden.get(field, _MISSING), current.get(field, _MISSING))
        for field in sorted(set(golden) | set(current))
        if golden.get(field, _MISSING) != current.get(field, _MISSING)
    }


def config_differences(golden: Mapping[str, Mapping[str, Any]], current: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Every difference between two snapshots, one line each: the defaults' rows first, then presets by name.

    A changed default names the presets that inherit the change (the same old and new value) on its own line,
    `defaults: lr 0.0003 -> 0.001 (also preset:cifar_baseline, preset:cifar_impaired)`, or says that no preset
    inherits it; a preset's own change reads `preset:cifar_impaired: n_envs 4 -> 8`. Added or removed fields and
    configs are named as such.
    """
    shared = [key for key in sorted(set(golden) & set(current)) if key != DEFAULTS]
    changes = {key: _changes(golden[key], current[key]) for key in shared}
    lines: list[str] = []
    if DEFAULTS in golden and DEFAULTS in current:
        for field, change in _changes(golden[DEFAULTS], current[DEFAULTS]).items():
            inheriting = [key for key in shared if changes[key].get(field) == change]
            for key in inheriting:
                del changes[key][field]
            also = f"also {', '.join(inheriting)}" if inheriting else "no preset inherits it"
            lines.append(f"{DEFAULTS}: {_change(field, *change)} ({also})")
    elif DEFAULTS in golden or DEFAULTS in current:
        lines.append(f"{DEFAULTS}: {'removed' if DEFAULTS in golden else 'added'}")
    for key in sorted((set(golden) | set(current)) - {DEFAULTS}):
        if key not in current:
            lines.append(f"{key}: removed (in the golden, not in the current configs)")
        elif key not in golden:
            lines.append(f"{key}: added (not in the golden)")
        else:
            lines.extend(f"{key}: {_change(field, *change)}" for field, change in changes[key].items())
    return lines


def task_differences(golden: Mapping[str, Mapping[str, Any]], current: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Every difference between two sets of task specs, one line each: `task:cifar_minimal: pool_layers 0 -> 1`."""
    lines = []
    for name in sorted(set(golden) | set(current)):
        key = f"{TASK}{name}"
        if name not in current:
            lines.append(f"{key}: removed (in the golden, not among the built-in tasks)")
        elif name not in golden:
            lines.append(f"{key}: added (not in the golden)")
        else:
            lines.extend(
                f"{key}: {_change(field, *change)}" for field, change in _changes(golden[name], current[name]).items()
            )
    return lines


def describe(configs: Mapping[str, Mapping[str, Any]]) -> str:
    """`defaults and 4 presets, 41 fields each` (or `..., 40-41 fields` when their field sets differ)."""
    presets = sum(key.startswith(PRESET) for key in configs)
    sizes = sorted({len(values) for values in configs.values()})
    fields = f"{sizes[0]} fields each" if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]} fields"
    return f"{DEFAULTS} and {presets} preset{'s' if presets != 1 else ''}, {fields}"


def format_differences(shown_path: str, lines: list[str]) -> str:
    head = f"training config differs from its golden {shown_path} in {len(lines)} place(s):"
    hint = (
        f"  change the value back, or if intended, regenerate with `{update_command()}` (refused under CI) and "
        "commit the diff"
    )
    return "\n".join([head, *(f"  {line}" for line in lines), hint])


def check_config_golden(path: Path, *, update: bool = False, shown_path: str | None = None) -> tuple[str, str]:
    """Compare the effective configs with the golden at `path` (status "passed"), or rewrite it when `update`
    (status "updated"); returns (status, detail). Differences raise `ConfigGoldenDiffers` naming all of them."""
    current, tasks = effective_configs(), task_specs()
    shown = f"{describe(current)}; {len(tasks)} built-in tasks"
    if update:
        write_golden(path, current, tasks)
        return "updated", f"wrote {shown_path or path} ({shown})"
    golden, golden_tasks = _load(path)
    lines = config_differences(golden, current) + task_differences(golden_tasks, tasks)
    if lines:
        raise ConfigGoldenDiffers(format_differences(shown_path or str(path), lines))
    return "passed", shown


def snapshot() -> dict[str, Any]:
    """What the golden holds: {"configs": effective_configs(), "tasks": task_specs()}."""
    return {"configs": effective_configs(), "tasks": task_specs()}


def snapshot_differences(golden: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Every difference between two `snapshot()`s, configs first, then tasks."""
    configs = config_differences(golden["configs"], current["configs"])
    return configs + task_differences(golden["tasks"], current["tasks"])


if __name__ == "__main__":
    sys.stdout.write(json.dumps(snapshot(), indent=2, sort_keys=True) + "\n")
