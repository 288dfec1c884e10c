"""A loop that ends with `os._exit` is still recorded.

`os._exit` ends the process at once. Before, `python -m tripwire run` on such a script wrote no result and exited 0,
so `run --budget` checked nothing and passed. Now the loop's `os._exit` on the recording's thread ends the loop,
the result is written and checked, and `run` then ends its own process the same way (so threads the loop never
joins do not hang it). A forked child's `os._exit` still ends the child.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tripwire.outside.record import record
from tripwire.scenario import Iteration, Region, Scenario

LOOP = """
import os
import sys
import threading
import time

import torch

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # the loop's tensors are on its device


def step(w):
    return (w * 2).sum().item()


def main(code, extra, linger):
    if linger:  # a thread never joined, why loops reach for os._exit (only where run's own process records)
        threading.Thread(target=time.sleep, args=(3600,)).start()
    w = torch.ones(3, device=DEVICE)
    for _ in range(3):
        step(w)
        if extra:
            w.max().item()
    pid = os.fork()
    if pid == 0:
        os._exit(7)  # a forked child's exit ends the child, as always
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 7
    try:
        os._exit(code)
    except Exception:  # noqa: BLE001 - a loop's broad handler must not take the exit
        pass
    raise AssertionError("os._exit returned")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2] == "extra", sys.argv[3:] == ["linger"])
"""


def _scenario(code: int, extra: bool = False) -> Scenario:
    return Scenario(
        name="exits",
        script="loop.py",
        argv=[str(code), "extra" if extra else "plain"],
        regions=[Region("__main__:step", "step")],
        iteration=Iteration("__main__:step"),
    )


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "loop.py").write_text(LOOP, encoding="utf-8")
    return tmp_path


def test_a_loop_ending_with_os_exit_0_is_recorded_whole(tmp_path: Path) -> None:
    result = record(_scenario(0), _tree(tmp_path))
    assert result.status == "ok", result.cause
    assert result.syncs.counts_by_region()["step"] == 3
    assert len(result.syncs.iterations) == 3
    assert result.ended_by_exit


def test_a_nonzero_os_exit_is_a_crash_named_by_its_code(tmp_path: Path) -> None:
    result = record(_scenario(3), _tree(tmp_path))
    assert (result.status, result.cause) == ("crash", "os._exit(3)")


def _run(tmp_path: Path, code: int, extra: bool, *more: str) -> subprocess.CompletedProcess[str]:
    argv = ", ".join(repr(arg) for arg in [str(code), "extra" if extra else "plain", "linger"])
    scenario = tmp_path / f"scenario_{code}_{extra}.py"
    scenario.write_text(
        "from tripwire.scenario import Iteration, Region, Scenario\n"
        f"scenario = Scenario(name='exits', script='loop.py', argv=[{argv}], regions=[Region('__main__:step', "
        "'step')], iteration=Iteration('__main__:step'))\n",
        encoding="utf-8",
    )
    out = tmp_path / f"out_{code}_{extra}"
    command = [sys.executable, "-m", "tripwire", "run", str(scenario), "--root", str(tmp_path), "--out", str(out)]
    return subprocess.run([*command, *more], capture_output=True, text=True, timeout=120, check=False)


def test_run_writes_the_result_checks_the_budget_and_ends_despite_a_thread_left_running(tmp_path: Path) -> None:
    _tree(tmp_path)
    base = _run(tmp_path, 0, False)  # the loop leaves a thread sleeping for an hour: run must still end
    assert base.returncode == 0, base.stdout + base.stderr
    assert json.loads((tmp_path / "out_0_False" / "result.json").read_text())["status"] == "ok"
    budget = tmp_path / "budget.json"
    written = subprocess.run(
        [sys.executable, "-m", "tripwire", "budget", "write", str(tmp_path / "out_0_False"), str(budget)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert written.returncode == 0, written.stdout + written.stderr
    # the hazard: a sync added to a loop that ends with os._exit(0) fails its budget instead of passing unchecked
    head = _run(tmp_path, 0, True, "--budget", str(budget))
    assert head.returncode == 1, head.stdout + head.stderr
    assert "w.max().item()" in head.stdout
    crashed = _run(tmp_path, 5, False)
    assert crashed.returncode == 1 and "crash: os._exit(5)" in crashed.stdout


SWALLOWS = """
import os

import torch

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # the loop's tensors are on its device


def step(w):
    return (w * 2).sum().item()


def main():
    w = torch.ones(3, device=DEVICE)
    step(w)
    try:
        os._exit(4)
    except BaseException:  # noqa: BLE001 - a loop that takes every exit, os._exit's stand-in included
        pass
    step(w)  # a real run never gets here


main()
"""


def test_a_loop_that_catches_its_own_os_exit_is_said_to_have_run_on(tmp_path: Path) -> None:
    """Where the loop's `except BaseException` takes the exit, the recording cannot stop the loop: it ends with the
    exit's code, as the real run would, and says that what ran after the exit was recorded too."""
    (tmp_path / "loop.py").write_text(SWALLOWS, encoding="utf-8")
    scenario = Scenario(name="swallows", script="loop.py", regions=[Region("__main__:step", "step")])
    result = record(scenario, tmp_path)
    assert (result.status, result.cause) == ("crash", "os._exit(4)")
    assert result.ended_by_exit
    assert any("os._exit(4) at loop.py:17, caught the exit" in note for note in result.notes), result.notes


FROM_A_THREAD = """
import os
import threading

import torch

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # the loop's tensors are on its device


def step(w):
    return (w * 2).sum().item()


def watchdog():
    os._exit(0)  # the loop's way to end: from a thread of its own


w = torch.ones(3, device=DEVICE)
step(w)
done = threading.Thread(target=watchdog)
done.start()
done.join()
"""


def test_os_exit_on_another_thread_fails_run_with_a_line_instead_of_passing(tmp_path: Path) -> None:
    """An `os._exit(0)` on another thread of the loop ends the process while the recording is unfinished: before, `run`
    exited 0 with no result written, and `run --budget` passed with nothing checked."""
    (tmp_path / "loop.py").write_text(FROM_A_THREAD, encoding="utf-8")
    scenario = tmp_path / "scenario.py"
    scenario.write_text(
        "from tripwire.scenario import Region, Scenario\n"
        "scenario = Scenario(name='watchdog', script='loop.py', regions=[Region('__main__:step', 'step')])\n",
        encoding="utf-8",
    )
    out = tmp_path / "out"
    command = [sys.executable, "-m", "tripwire", "run", str(scenario), "--root", str(tmp_path), "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the loop called os._exit(0) on its thread 'Thread-1 (watchdog)' at loop.py:15" in done.stderr
    assert not (out / "result.json").exists()
