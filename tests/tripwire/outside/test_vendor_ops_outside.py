"""`tripwire run --vendor-ops`: a recording notes the loop's CPU ops whose bits follow the CPU vendor, and where."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tripwire.outside.record import record
from tripwire.scenario import Scenario

LOOP = """import torch

def train():
    torch.manual_seed(0)
    x = torch.rand(256, 8) * 4 + 1
    for _ in range(3):
        y = (x - x.mean(0)) / torch.sqrt(x.var(0) + 1e-4)
    return torch.rsqrt(x).sum() + y.sum()
"""


def _tree(tmp_path: Path, source: str = LOOP) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir(exist_ok=True)
    (tree / "loop.py").write_text(source, encoding="utf-8")
    return tree


def _vendor_notes(notes: list[str]) -> list[str]:
    return [note for note in notes if note.startswith("CPU ops whose bits follow")]


def test_a_sqrt_in_the_loop_is_noted_with_its_line(tmp_path: Path) -> None:
    result = record(Scenario(name="norm", call="loop:train"), _tree(tmp_path), vendor_ops=True)
    assert result.status == "ok", result.cause
    [note] = _vendor_notes(result.notes)
    assert "aten.sqrt.default float32 at loop.py:7 (3 calls)" in note, note
    assert "loop.py:8" not in note  # the portable spelling on line 8 is not noted


def test_without_the_option_or_the_op_nothing_is_noted(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    assert not _vendor_notes(record(Scenario(name="norm", call="loop:train"), tree).notes)
    portable = _tree(tmp_path, LOOP.replace("/ torch.sqrt(x.var(0) + 1e-4)", "* torch.rsqrt(x.var(0) + 1e-4)"))
    assert not _vendor_notes(record(Scenario(name="norm", call="loop:train"), portable, vendor_ops=True).notes)


def test_the_command_line_option(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    scenario = "from tripwire.scenario import Scenario\nscenario = Scenario(name='norm', call='loop:train')\n"
    (tree / "scenario.py").write_text(scenario, encoding="utf-8")
    out = tmp_path / "result"
    command = [sys.executable, "-m", "tripwire", "run", str(tree / "scenario.py"), "--root", str(tree)]
    command += ["--out", str(out)]
    done = subprocess.run([*command, "--vendor-ops"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    saved = json.loads((out / "result.json").read_text(encoding="utf-8"))
    assert any("aten.sqrt.default float32 at loop.py:7" in note for note in saved["notes"]), saved["notes"]
