"""The effective TrainingConfig values (defaults and every preset) against their committed golden.

A changed default the scenarios never see (each one's preset overrides it) still fails here, naming the field,
its old and new value, and the presets that inherit it. `--tripwire-update` rewrites the golden.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from config_golden import GOLDEN, ConfigGoldenDiffers, check_config_golden

from tripwire.common.errors import GoldenFileError
from tripwire.gates.goldens import GoldenStore
from tripwire.gates.pytest_plugin import GateLog

pytestmark = pytest.mark.guardrail

ROOT = Path(__file__).resolve().parents[2]


def _shown(path: Path, root: Path) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def test_training_config_matches_golden(
    tripwire_goldens: GoldenStore, gate_log: GateLog, pytestconfig: pytest.Config
) -> None:
    path = tripwire_goldens.root / GOLDEN
    shown = _shown(path, tripwire_goldens.root.parent)
    note = ""
    if pytestconfig.getoption("tripwire_against", "") and not tripwire_goldens.update and not path.exists():
        # Against a base tree whose recording left no config golden: the values depend on no machine, so the
        # committed golden applies (a pull request that changes a default changes it too, in a reviewed diff).
        path = ROOT / "baselines" / GOLDEN
        shown, note = _shown(path, ROOT), " (committed golden: the base recorded none)"
    try:
        status, detail = check_config_golden(path, update=tripwire_goldens.update, shown_path=shown)
    except ConfigGoldenDiffers as error:
        differences = [line.strip() for line in str(error).splitlines()[1:-1]]  # between the head and the hint
        more = f" (+{len(differences) - 1} more)" if len(differences) > 1 else ""
        gate_log.add("config golden", "TrainingConfig", "FAILED", differences[0] + more)
        raise
    except GoldenFileError as error:  # missing or malformed: one line naming the file and the update command
        gate_log.add("config golden", "TrainingConfig", "FAILED", str(error))
        raise
    gate_log.add("config golden", "TrainingConfig", status, detail + note)
