"""Import contracts (import-linter) hold on the real tree, and a violation on a copy is named."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tripwire.gates.pytest_plugin import GateLog

pytestmark = pytest.mark.guardrail

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=cwd, capture_output=True, text=True, env=env, timeout=120
    )


def test_import_contracts_are_kept(gate_log: GateLog) -> None:
    done = lint_imports(ROOT, ROOT / "src")
    kept = [line for line in done.stdout.splitlines() if line.endswith("KEPT")]
    gate_log.add(
        "import contracts", "src/", "passed" if done.returncode == 0 else "FAILED", done.stdout.splitlines()[-1]
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert kept, "lint-imports reported no kept contract: is [tool.importlinter] still in pyproject.toml?"


@pytest.mark.skipif(shutil.which("nox") is None, reason="nox is not installed on this machine")
def test_baselines_session_refuses_to_run_under_ci() -> None:
    env = {**os.environ, "CI": "true"}
    done = subprocess.run(["nox", "-s", "baselines"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode != 0
    assert "refused: CI is set" in done.stdout + done.stderr
