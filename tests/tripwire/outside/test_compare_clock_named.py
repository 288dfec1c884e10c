"""A trajectory that differs only in values named like wall-clock readings: `compare` says so and names the exclusion.

SB3's `Monitor` keeps each episode's seconds since its start (`episode.t`) in the vector env's infos and in the
algorithm's `ep_info_buffer`; a checkpoint of the whole algorithm (`capture=("self",)`) digests them, and two runs of
SB3's seeded A2C differed at update 101 in `self.env.buf_infos.0.episode.t` alone, a value change like any other.
"""

from __future__ import annotations

from pathlib import Path

from tripwire.outside.compare import compare_results
from tripwire.outside.record import record
from tripwire.outside.result import Result
from tripwire.scenario import Checkpoint, Scenario

LOOP = """
import sys
import time

import torch

START = time.perf_counter()


def update(state):
    return state


if __name__ == "__main__":
    torch.manual_seed(0)
    weight = torch.randn(3) + float(sys.argv[1])
    for step in range(3):
        time.sleep(0.001)
        update({"weight": weight, "infos": [{"episode": {"r": 1.0, "t": time.perf_counter() - START}}], "steps": step})
"""


def _record(tree: Path, shift: str) -> Result:
    tree.mkdir(parents=True, exist_ok=True)
    (tree / "loop.py").write_text(LOOP, encoding="utf-8")
    result = record(
        Scenario(name="clock", script="loop.py", argv=[shift], checkpoints=[Checkpoint("__main__:update")]), tree
    )
    assert result.status == "ok", result.cause
    return result


def test_only_an_episodes_seconds_differ_and_compare_says_so_with_the_exclusion(tmp_path: Path) -> None:
    verdict = compare_results(_record(tmp_path, "0"), _record(tmp_path, "0")).verdict("trajectory")
    assert verdict.status == "differs"
    assert verdict.summary.endswith("; only wall-clock-named values differ"), verdict.summary
    said = [line for line in verdict.details if line.startswith("every value that differs there has a wall-clock")]
    assert len(said) == 1 and "(return.infos.0.episode.t)" in said[0]
    assert "exclude=('return.infos.*.episode.t',)" in said[0]


def test_a_value_that_differs_beside_them_is_not_passed_off_as_the_clock(tmp_path: Path) -> None:
    verdict = compare_results(_record(tmp_path, "0"), _record(tmp_path, "1")).verdict("trajectory")
    assert verdict.status == "differs" and "wall-clock" not in verdict.summary
    assert not any("wall-clock name" in line for line in verdict.details)
