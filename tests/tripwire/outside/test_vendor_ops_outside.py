"""`tripwire run` (`--vendor-ops`, the default): a recording notes the loop's CPU ops whose bits follow the CPU
vendor, on any of its threads, and where; a fault in that watch is named as tripwire's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tripwire.bitwise import vendor_ops
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

# CleanRL's, SB3's and Tianshou's optimizer, stepped on a worker thread: the default Adam takes a root on CPU
ADAM_LOOP = """import threading
import torch

def step(model, optimizer):
    model(torch.ones(4, 3)).sum().backward()
    optimizer.step()

def train():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    worker = threading.Thread(target=step, args=(model, optimizer))
    worker.start()
    worker.join()
    fused = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
    step(model, fused)
"""


def _tree(tmp_path: Path, source: str = LOOP) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir(exist_ok=True)
    (tree / "loop.py").write_text(source, encoding="utf-8")
    return tree


def _vendor_notes(notes: list[str]) -> list[str]:
    return [note for note in notes if note.startswith("CPU ops whose bits follow")]


def test_a_sqrt_in_the_loop_is_noted_with_its_line(tmp_path: Path) -> None:
    result = record(Scenario(name="norm", call="loop:train"), _tree(tmp_path))
    assert result.status == "ok", result.cause
    [note] = _vendor_notes(result.notes)
    assert "aten.sqrt.default float32 at loop.py:7 (3 calls)" in note, note
    assert "loop.py:8" not in note  # the portable spelling on line 8 is not noted


def test_the_default_adams_root_on_a_worker_thread_is_noted_through_the_optimizer(tmp_path: Path) -> None:
    result = record(Scenario(name="adam", call="loop:train"), _tree(tmp_path, ADAM_LOOP))
    assert result.status == "ok", result.cause
    [note] = _vendor_notes(result.notes)
    # the weight's and the bias's roots at the loop's `optimizer.step()`, once: the fused step (line 17) takes none
    assert "aten.sqrt.default float32 at loop.py:6 via torch/optim/adam.py (2 calls)" in note, note
    assert note.count(" at loop.py") == 1 and "fused=True" in note


def test_switched_off_or_without_the_op_nothing_is_noted(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    assert not _vendor_notes(record(Scenario(name="norm", call="loop:train"), tree, vendor_ops=False).notes)
    portable = _tree(tmp_path, LOOP.replace("/ torch.sqrt(x.var(0) + 1e-4)", "* torch.rsqrt(x.var(0) + 1e-4)"))
    assert not _vendor_notes(record(Scenario(name="norm", call="loop:train"), portable).notes)


def test_a_fault_in_the_watch_is_named_as_tripwires_and_the_loop_still_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(root: Path) -> str:
        raise RuntimeError("injected")

    monkeypatch.setattr(vendor_ops, "caller_line", broken)
    result = record(Scenario(name="norm", call="loop:train"), _tree(tmp_path))
    assert result.status == "ok", result.cause
    assert not _vendor_notes(result.notes)
    [fault] = [note for note in result.notes if "vendor-ops watch" in note]
    assert fault.startswith("tripwire's fault, not the loop's") and "RuntimeError: injected" in fault


def test_the_command_line_option(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    scenario = "from tripwire.scenario import Scenario\nscenario = Scenario(name='norm', call='loop:train')\n"
    (tree / "scenario.py").write_text(scenario, encoding="utf-8")
    out = tmp_path / "result"
    command = [sys.executable, "-m", "tripwire", "run", str(tree / "scenario.py"), "--root", str(tree)]
    command += ["--out", str(out)]
    for option, noted in (([], True), (["--vendor-ops"], True), (["--no-vendor-ops"], False)):
        done = subprocess.run([*command, *option], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        saved = json.loads((out / "result.json").read_text(encoding="utf-8"))
        found = [note for note in saved["notes"] if "aten.sqrt.default float32 at loop.py:7" in note]
        assert bool(found) == noted, (option, saved["notes"])
        assert ("aten.sqrt.default float32 at loop.py:7" in done.stdout + done.stderr) == noted  # said, not only kept


def test_with_torch_imported_through_links_its_frames_are_still_torchs(tmp_path: Path) -> None:
    """A site-packages made of links (a Nix environment, a venv that links a shared torch in): torch's frames carry
    the link's path while its target is where torch lies; both are torch's, so the root is still at the loop's line,
    through the optimizer (before, the note stopped at torch's own adam.py, under the link)."""
    import torch

    real = Path(torch.__file__).resolve().parents[1]
    forest = tmp_path / "linked-site-packages"
    forest.mkdir()
    for entry in real.iterdir():
        if not entry.name.startswith(("tripwire", "__editable__", "esper")):
            (forest / entry.name).symlink_to(entry)
    tree = _tree(tmp_path, ADAM_LOOP)
    code = (
        "import sys, torch; from pathlib import Path\n"
        "assert Path(torch.__file__).parent == Path(sys.argv[1]) / 'torch', torch.__file__\n"
        "from tripwire.outside.record import record; from tripwire.scenario import Scenario\n"
        "result = record(Scenario(name='adam', call='loop:train'), Path(sys.argv[2]))\n"
        "print('\\n'.join(result.notes))"
    )
    env = {"PYTHONPATH": str(forest), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code, str(forest), str(tree)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "aten.sqrt.default float32 at loop.py:6 via torch/optim/adam.py (2 calls)" in done.stdout, done.stdout
