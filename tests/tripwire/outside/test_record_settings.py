"""A recording sets the scenario's thread count and determinism for the run and gives the caller's back; it freezes the
heap from before the loop while the loop runs and thaws it after."""

from __future__ import annotations

import dataclasses
import gc
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tripwire.outside.record import _FROZEN_BY_INTERPRETER, _torch_settings, record
from tripwire.scenario import Region, Scenario


@pytest.mark.parametrize("before", [False, True])
@pytest.mark.parametrize("wanted", [False, True])
def test_determinism_is_the_scenarios_inside_and_the_callers_after(before: bool, wanted: bool) -> None:
    scenario = dataclasses.replace(Scenario(name="settings", call="loop:train"), deterministic=wanted, threads=1)
    threads = torch.get_num_threads()
    torch.use_deterministic_algorithms(before)
    try:
        with _torch_settings(scenario):
            assert torch.are_deterministic_algorithms_enabled() is wanted
            assert torch.get_num_threads() == 1
        assert torch.are_deterministic_algorithms_enabled() is before
        assert torch.get_num_threads() == threads
    finally:
        torch.use_deterministic_algorithms(False)


def test_warn_only_is_not_kept_for_the_run() -> None:
    """A caller's warn-only determinism is not the scenario's: the run gets plain determinism off."""
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with _torch_settings(Scenario(name="settings", call="loop:train")):
            assert not torch.are_deterministic_algorithms_enabled()
            assert not torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


def _frozen_while_running(tmp_path: Path) -> int:
    """Record a loop that writes how many objects the garbage collector had frozen while it ran; return it."""
    seen = tmp_path / "frozen.txt"
    tree = tmp_path / "tree"
    tree.mkdir(exist_ok=True)
    (tree / "loop.py").write_text(
        f"import gc\n\ndef train():\n    open({str(seen)!r}, 'w').write(str(gc.get_freeze_count()))\n", encoding="utf-8"
    )
    result = record(Scenario(name="frozen", call="loop:train"), tree)
    assert result.status == "ok", result.cause
    return int(seen.read_text(encoding="utf-8"))


def test_the_heap_from_before_the_loop_is_frozen_while_it_runs_and_thawed_after(tmp_path: Path) -> None:
    """A full collection inside the loop walks only the loop's own objects, not torch's and tripwire's (about 150 ms
    a pass with torch imported); the caller's collector is as it was afterwards, and a caller's own freeze is kept."""
    assert gc.get_freeze_count() <= _FROZEN_BY_INTERPRETER  # 0, or on Python 3.12 the interpreter's own
    assert _frozen_while_running(tmp_path) > 10_000  # torch's modules and functions, at least
    assert gc.get_freeze_count() <= _FROZEN_BY_INTERPRETER
    gc.freeze()
    try:
        assert _frozen_while_running(tmp_path) > 10_000
        assert gc.get_freeze_count() > 10_000  # not thawed by the recording: the caller froze it
    finally:
        gc.unfreeze()


def test_an_interpreter_that_starts_with_objects_frozen_still_gets_its_heap_frozen(tmp_path: Path) -> None:
    """Python 3.12 starts with a few hundred objects frozen (375 on 3.12.1). The recording took any frozen object
    for a caller's own freeze and never froze the heap there, so every full pass walked torch's objects again
    (CleanRL's 2,048-step run on 3.12.1: whole process 1.09x plain before, 0.99x after). Here a freeze before
    tripwire is imported stands in for 3.12's."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "loop.py").write_text(
        f"import gc\n\ndef train():\n    open({str(tmp_path / 'seen')!r}, 'w').write(str(gc.get_freeze_count()))\n",
        encoding="utf-8",
    )
    script = (
        "import gc, sys\n"
        "gc.freeze()  # what the interpreter has frozen before anything of tripwire is imported\n"
        "startup = gc.get_freeze_count()\n"
        "from pathlib import Path\n"
        "from tripwire.outside.record import record\n"
        "from tripwire.scenario import Scenario\n"
        f"result = record(Scenario(name='frozen', call='loop:train'), Path({str(tree)!r}))\n"
        "assert result.status == 'ok', result.cause\n"
        "print(startup, gc.get_freeze_count())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    startup, after = (int(word) for word in done.stdout.split())
    assert int((tmp_path / "seen").read_text(encoding="utf-8")) > startup + 10_000  # torch and tripwire, frozen too
    assert after == 0  # thawed, the interpreter's own with the rest


def test_settings_the_loop_changes_itself_are_recorded_and_compared(tmp_path: Path) -> None:
    """A loop that sets its own thread count (from the machine's, say) computes other bits on another machine while
    the context from before it started reads the same: what it set is kept beside it, noted, and compared."""
    from tripwire.outside.compare import compare_results

    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "loop.py").write_text(
        "import torch\n\ndef two():\n    torch.set_num_threads(2)\n\ndef three():\n    torch.set_num_threads(3)\n"
        "\ndef none():\n    pass\n",
        encoding="utf-8",
    )
    threads = torch.get_num_threads()
    two, three, none = (
        record(Scenario(name="threads", call=f"loop:{name}"), tree) for name in ("two", "three", "none")
    )
    assert torch.get_num_threads() == threads  # the caller's, given back
    assert two.context["changed_by_loop"] == {"threads": [1, 2]}
    assert "changed_by_loop" not in none.context
    assert any(note.startswith("the loop changed threads 1 -> 2 while it ran") for note in two.notes), two.notes
    context = compare_results(two, three).verdict("context")
    assert context.status == "note"
    assert context.details == (
        "changed_by_loop.threads: [1, 2] -> [1, 3] (another thread count splits reductions differently)",
    )


def test_a_cudnn_flag_the_loop_sets_is_named_at_its_line(tmp_path: Path) -> None:
    """`torch.backends.cudnn.benchmark = True` changes nothing on a CPU, and breaks the reproducibility of every GPU
    run: the recording names the setting and its line, on CPU."""
    (tmp_path / "loop.py").write_text(
        "import torch\n\n\ndef main():\n    torch.backends.cudnn.benchmark = True\n    return torch.ones(2).sum()\n\n\n"
        "if __name__ == '__main__':\n    main()\n"
    )
    try:
        result = record(Scenario(name="flags", script="loop.py", regions=[Region("__main__:main", "main")]), tmp_path)
    finally:
        torch.backends.cudnn.benchmark = False
    assert result.ok
    assert (
        "the loop changed determinism settings: torch.backends.cudnn.benchmark False -> True at loop.py:5 in main"
        in (result.notes)
    )


SETTER = """import os
import torch

def train():
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = True
    torch.set_float32_matmul_precision("medium")
    torch.use_deterministic_algorithms(True, warn_only=True)
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
"""


def test_what_the_loop_set_is_put_back_so_the_next_recording_sees_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CleanRL's scripts set `cudnn.deterministic = True`: left in force, a later recording in the process (a test
    suite's, a walk's) of a loop that sets it too saw no change and said nothing; whether it was said depended on
    which loop was recorded first."""
    from tripwire.bitwise.settings import determinism_settings

    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    (tmp_path / "loop.py").write_text(SETTER, encoding="utf-8")
    before = determinism_settings()
    first, second = (record(Scenario(name="setter", call="loop:train"), tmp_path) for _ in range(2))
    assert determinism_settings() == before
    assert first.ok and second.ok and first.notes == second.notes
    [note] = [note for note in first.notes if note.startswith("the loop changed determinism settings")]
    for said in ("cudnn.deterministic False -> True at loop.py:5", "cudnn.benchmark False -> True at loop.py:6"):
        assert said in note, note
    assert "float32_matmul_precision 'highest' -> 'medium' at loop.py:7" in note
    assert "CUBLAS_WORKSPACE_CONFIG '' -> ':4096:8'" in note
