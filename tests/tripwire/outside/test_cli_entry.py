"""`python -m tripwire`: one entry point with subcommands; unknown commands are one-line usage errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tripwire.__main__ import COMMANDS, main


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)


def test_an_unknown_command_is_a_one_line_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["benchh"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "unknown command 'benchh'" in err and "bench-ab" in err


def test_a_subcommand_runs_its_tool(tmp_path: Path) -> None:
    (tmp_path / "base").mkdir()
    (tmp_path / "head").mkdir()
    command = [sys.executable, "-m", "tripwire", "baselines-diff", str(tmp_path / "base"), str(tmp_path / "head")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    missing = subprocess.run(
        [*command[:4], str(tmp_path / "nope"), str(tmp_path / "head")], capture_output=True, text=True
    )
    assert missing.returncode == 2 and "base folder" in missing.stderr
