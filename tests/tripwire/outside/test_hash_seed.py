"""A loop whose events follow Python's string hashing: `compare` names the hashing when the same events came in
another order.

rsl_rl's logger writes its episode scalars in the order of a set of their names (`for key in {k for ep_info in
self.ep_extras for k in ep_info}`). Python hashes strings with a seed each process draws unless `PYTHONHASHSEED` is
set, so two recordings of one tree wrote the same events in another order, and `compare` reported a changed order
with nothing to say why. A result keeps the seed its process hashed with; `compare` tags an order change when the
events are the same and a side hashed at random, or the two with different seeds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tripwire.outside.compare import chance, compare_results
from tripwire.outside.result import Result

LOOP = """
import torch

torch.manual_seed(0)  # torch's seed alone would differ between processes, and `compare` would name it too
NAMES = [f"metric_{i}" for i in range(16)]


def emit(tag, value):
    return value


def log(step):
    for name in set(NAMES):  # the order of their hashes
        emit(name, step)


for step in range(2):
    log(step)
"""

SCENARIO = """
from tripwire.scenario import EventCall, Scenario

scenario = Scenario(name="hashed", script="loop.py", event_calls=[EventCall("__main__:emit", label="tag")])
"""


def _env(seed: str | None) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONHASHSEED"}
    if seed is not None:
        env["PYTHONHASHSEED"] = seed
    return env


@pytest.mark.parametrize(("given", "read"), [(None, "random"), ("random", "random"), ("0", "0"), ("7", "7")])
def test_the_seed_a_process_hashes_with_is_read_as_it_started(given: str | None, read: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from tripwire.outside.seeds import hash_seed; print(hash_seed())"],
        env=_env(given),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.strip() == read


def _run(tmp_path: Path, out: str, seed: str | None) -> Result:
    tree = tmp_path / "tree"
    tree.mkdir(exist_ok=True)
    (tree / "loop.py").write_text(LOOP, encoding="utf-8")
    (tmp_path / "scenario.py").write_text(SCENARIO, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "tripwire", "run", "scenario.py", "--root", "tree", "--out", out],
        cwd=tmp_path,
        env=_env(seed),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return Result.load(tmp_path / out)


def test_runs_hashing_at_random_that_reorder_the_same_events_are_told_why(tmp_path: Path) -> None:
    first, second = _run(tmp_path, "a", None), _run(tmp_path, "b", None)
    assert first.hash_seed == second.hash_seed == "random"
    verdicts = {verdict.check: verdict for verdict in compare_results(first, second).verdicts}
    # 16 names in the order of their hashes: two processes meet them in the same order once in 16! runs
    assert verdicts["telemetry"].status == "differs" and verdicts["payloads"].status == "differs"
    for check in ("telemetry", "payloads"):
        assert verdicts[check].summary.endswith("; string hashing not fixed"), verdicts[check].summary
        assert any("A and B hashed strings with a seed of their own" in line for line in verdicts[check].details)


def test_runs_with_different_hash_seeds_are_named_and_a_fixed_seed_compares_identical(tmp_path: Path) -> None:
    one, two, again = _run(tmp_path, "one", "1"), _run(tmp_path, "two", "2"), _run(tmp_path, "again", "1")
    assert (one.hash_seed, two.hash_seed) == ("1", "2")
    telemetry = next(v for v in compare_results(one, two).verdicts if v.check == "telemetry")
    assert telemetry.status == "differs" and telemetry.summary.endswith("; string hashing not fixed")
    assert any("different seeds (PYTHONHASHSEED 1 and 2)" in line for line in telemetry.details)
    assert compare_results(one, again).ok


def _snapshot(*order: str) -> dict[str, object]:
    by_type: dict[str, int] = {}
    for label in order:
        by_type[label] = by_type.get(label, 0) + 1
    return {"total": len(order), "by_type": by_type, "by_round": {}, "by_env": {}, "sequence_round_0": list(order)}


def test_hashing_is_not_offered_for_other_events_nor_for_fixed_seeds() -> None:
    """Only the same events in another order: an event added or dropped is the loop's change whatever the hashing,
    and two runs that hashed with one fixed seed met their strings in one order."""
    reordered = (_snapshot("x", "y", "z"), _snapshot("y", "x", "z"))
    added = (_snapshot("x", "y"), _snapshot("y", "x", "z"))
    cases = [
        (reordered, ("random", "0"), True),
        (reordered, ("3", "4"), True),
        (reordered, ("0", "0"), False),
        (reordered, (None, "random"), False),  # a result recorded before the seed was kept: nothing known
        (added, ("random", "random"), False),
        ((_snapshot("x", "y"), _snapshot("x", "y")), ("random", "random"), False),
    ]
    for (a, b), (seed_a, seed_b), tagged in cases:
        tag, lines = chance(
            Result("s", "ok", telemetry=a, hash_seed=seed_a), Result("s", "ok", telemetry=b, hash_seed=seed_b)
        )
        assert ("string hashing not fixed" in tag) == tagged, (a, b, seed_a, seed_b, tag)
        assert bool(lines) == tagged


def test_the_hash_seed_is_saved_and_a_result_from_before_loads_without_it(tmp_path: Path) -> None:
    saved = Result("s", "ok", hash_seed="random").save(tmp_path / "r")
    assert Result.load(saved).hash_seed == "random"
    text = (saved / "result.json").read_text().replace('"hash_seed": "random",', "")
    (saved / "result.json").write_text(text)
    assert Result.load(saved).hash_seed is None
