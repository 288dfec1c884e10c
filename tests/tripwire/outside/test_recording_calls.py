"""`benchmarks/recording_calls.py` counts what a recording adds while the loop runs, on CleanRL's `ppo.py`.

Its counts are figures and are not checked against values here; that they hold what the script says is: the loop's
own calls on both sides, tripwire's stand-ins among the recorded side's, and nothing of the recording's own start
and end (the counter installed before the script runs, and stopped after it), which would count the same for any
loop and hide what one costs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "recording_calls.py"


def test_the_count_holds_the_loop_and_not_the_recording_around_it(tmp_path: Path) -> None:
    out = tmp_path / "calls.json"
    command = [sys.executable, str(SCRIPT), "--loop", "cleanrl-short", "--top", "3", "--json", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(out.read_text())
    assert 0 < figures["plain"] < figures["recorded"]
    assert 0 < figures["tripwire"] < figures["recorded"]
    by_function = figures["tripwire_by_function"]
    assert by_function["watched.py:WatchedMethod.__get__"] > 0  # the stand-ins of the loop's ops
    assert by_function["state.py:deliver"] > 0  # its syncs
    start_and_end = {"hooks.py:install", "hooks.py:uninstall", "counter.py:SyncCounter.__enter__"}
    start_and_end |= {"counter.py:SyncCounter.__exit__", "record.py:record"}
    assert start_and_end.isdisjoint(by_function)
    assert done.stdout.startswith("cleanrl-short: plain ")
