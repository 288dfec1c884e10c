"""Stable-Baselines3's `SubprocVecEnv` under `python -m tripwire run`, from a fresh process each: the env workers are
started by a fork server (spawned where there is none) and run the main script's env wrapper, which cloudpickle sent
them by value. Every vendor-bound op of the run is in those workers, so before tripwire watched spawned children
the result had no vendor note at all: a golden that verifies only on this CPU's vendor passed as portable."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tripwire.outside.result import Result

LOOPS = Path(__file__).resolve().parents[1] / "loops"
SCRIPT = LOOPS / "sb3_subproc_script.py"
ROOT_LINE = (
    SCRIPT.read_text(encoding="utf-8")
    .splitlines()
    .index("        return torch.sqrt(torch.as_tensor(np.abs(observation))).numpy()")
    + 1
)


def _run(tmp_path: Path, how: str) -> Result:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / SCRIPT.name).write_text(SCRIPT.read_text(encoding="utf-8"), encoding="utf-8")
    scenario = tmp_path / "scenario.py"
    scenario.write_text(
        "import dataclasses\n"
        "from tripwire.scenario import load_scenario\n"
        f"base = load_scenario({str(LOOPS / 'sb3_script_scenario.py')!r})\n"
        f"scenario = dataclasses.replace(base, script={SCRIPT.name!r}, argv=[{how!r}])\n",
        encoding="utf-8",
    )
    command = [
        sys.executable,
        "-m",
        "tripwire",
        "run",
        str(scenario),
        "--root",
        str(tree),
        "--out",
        str(tmp_path / "r"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return Result.load(tmp_path / "r")


def _vendor_note(result: Result) -> str:
    [note] = [note for note in result.notes if note.startswith("CPU ops whose bits follow the CPU's vendor")]
    return note


def test_the_env_workers_roots_are_counted_and_named_by_the_wrapper(tmp_path: Path) -> None:
    result = _run(tmp_path, "close")
    assert result.ok and result.children == {"multiprocessing": 2}, (result.cause, result.children)
    note = _vendor_note(result)
    site = re.escape(f"aten.sqrt.default float32 at Rooted.observation (cloudpickled):{ROOT_LINE}")
    found = re.search(site + r" \((\d+) calls\)", note)
    assert found, note
    assert int(found.group(1)) >= 256 + 2  # each of the 2 workers' 128 steps, and at least one reset each
    assert "had not handed their counts back" not in note and "adam" not in note


def test_workers_left_running_are_still_named_and_their_counts_called_partial(tmp_path: Path) -> None:
    """SB3's own quick start never closes its vector env: the workers are still running when the recording ends, and
    are killed at the interpreter's exit, so they never hand their counts back."""
    note = _vendor_note(_run(tmp_path, "open"))
    assert f"aten.sqrt.default float32 at Rooted.observation (cloudpickled):{ROOT_LINE} (2 calls)" in note, note
    assert "2 child process(es) had not handed their counts back when the recording ended" in note
