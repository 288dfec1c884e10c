"""A loop that never seeds torch: said at `run`, and named by `compare` as what can explain a difference.

TorchRL's own MuJoCo PPO (`sota-implementations/ppo/ppo_mujoco.py`) seeds nothing. torch takes its default
generator's seed from the OS at import, so two recordings of one tree differed from their first checkpoint (the
initial weights) and `compare` showed a value change of 2e7 ULPs with nothing to say why. A result now keeps the seed
the run ended with and whether the loop drew with the seed it started with; `run` notes the second, and `compare`
names either beside a trajectory difference.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tripwire.outside.compare import compare_results
from tripwire.outside.record import record
from tripwire.outside.result import Result
from tripwire.scenario import Checkpoint, Scenario

LOOP = """
import sys

import torch


def init(seed):
    if seed is not None:
        torch.manual_seed(seed)
    return torch.nn.Linear(3, 2)


def train(model):
    return model(torch.ones(1, 3)).sum()


if __name__ == "__main__":
    seed = None if sys.argv[1] == "none" else int(sys.argv[1])
    model = init(seed)
    if sys.argv[2:] == ["draw"]:
        torch.rand(4)
    train(model)
"""


def _scenario(seed: str, *extra: str) -> Scenario:
    return Scenario(
        name="seeds",
        script="loop.py",
        argv=[seed, *extra],
        checkpoints=[Checkpoint("__main__:train", capture=("arg:model",))],
    )


def _record(tmp_path: Path, seed: str, *extra: str) -> Result:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "loop.py").write_text(LOOP, encoding="utf-8")
    result = record(_scenario(seed, *extra), tmp_path)
    assert result.status == "ok", result.cause
    return result


def _note(result: Result) -> list[str]:
    return [note for note in result.notes if "torch's default generator" in note]


def test_a_loop_that_draws_unseeded_is_noted_and_compare_says_so(tmp_path: Path) -> None:
    first, second = _record(tmp_path / "a", "none"), _record(tmp_path / "b", "none")
    assert first.unseeded == second.unseeded == ("torch",)
    assert _note(first) and f"({first.seed})" in _note(first)[0]
    trajectory = next(v for v in compare_results(first, second).verdicts if v.check == "trajectory")
    assert trajectory.status == "differs"  # one process: the second run drew on from where the first stopped
    assert trajectory.summary.endswith("; torch unseeded by the loop")
    assert any("A and B drew from torch's default generator" in line for line in trajectory.details)


def test_a_seeded_loop_has_no_note_and_compares_identical(tmp_path: Path) -> None:
    first, second = _record(tmp_path / "a", "7", "draw"), _record(tmp_path / "b", "7", "draw")
    assert not first.unseeded and first.seed == 7 and not _note(first)
    assert compare_results(first, second).ok


def test_runs_seeded_with_different_values_are_named_with_both_seeds(tmp_path: Path) -> None:
    first, second = _record(tmp_path / "a", "7"), _record(tmp_path / "b", "8")
    trajectory = next(v for v in compare_results(first, second).verdicts if v.check == "trajectory")
    assert trajectory.status == "differs" and trajectory.summary.endswith("; torch seeded differently")
    assert any("(A 7, B 8)" in line for line in trajectory.details)


QUIET = """
import sys

import torch


def train(scale):
    return torch.ones(2) * scale


if __name__ == "__main__":
    torch.manual_seed(int(sys.argv[1]))  # seeded with a value of its own each run, and never drawn from
    train(float(sys.argv[1]))
"""


def test_runs_seeded_differently_that_never_drew_are_not_told_it_is_the_cause(tmp_path: Path) -> None:
    """A difference of two CPU runs that drew nothing from torch's default generator is not the seed's: `compare`
    says the seeds differ but that neither drew, and tags nothing."""
    results = []
    for side, seed in (("a", "7"), ("b", "8")):
        (tmp_path / side).mkdir()
        (tmp_path / side / "loop.py").write_text(QUIET, encoding="utf-8")
        scenario = Scenario(name="quiet", script="loop.py", argv=[seed], checkpoints=[Checkpoint("__main__:train")])
        result = record(scenario, tmp_path / side)
        assert result.status == "ok", result.cause
        assert result.draw_threads == [] and result.cuda_used is False and result.children == {}
        results.append(result)
    first, second = results
    assert (first.seed, second.seed) == (7, 8)
    trajectory = next(v for v in compare_results(first, second).verdicts if v.check == "trajectory")
    assert trajectory.status == "differs" and "torch seeded differently" not in trajectory.summary
    assert any("(A 7, B 8), but neither drew from it" in line for line in trajectory.details)
    first.cuda_used = None  # recorded before CUDA's use was kept: its draws cannot be ruled out
    trajectory = next(v for v in compare_results(first, second).verdicts if v.check == "trajectory")
    assert trajectory.summary.endswith("; torch seeded differently")


def test_a_loop_that_draws_nothing_is_not_noted(tmp_path: Path) -> None:
    (tmp_path / "loop.py").write_text("import torch\n\n\ndef train():\n    return torch.ones(2).sum()\n\n\ntrain()\n")
    result = record(Scenario(name="quiet", script="loop.py", checkpoints=[Checkpoint("__main__:train")]), tmp_path)
    assert result.status == "ok" and not result.unseeded and not _note(result)
    assert result.seed == torch.initial_seed()


def test_the_seed_is_saved_and_a_result_from_before_loads_without_it(tmp_path: Path) -> None:
    result = _record(tmp_path / "tree", "none")
    loaded = Result.load(result.save(tmp_path / "saved"))
    assert (loaded.seed, loaded.unseeded) == (result.seed, ("torch",))
    data = json.loads((tmp_path / "saved" / "result.json").read_text())
    del data["seed"], data["unseeded"]
    (tmp_path / "saved" / "result.json").write_text(json.dumps(data))
    older = Result.load(tmp_path / "saved")
    assert (older.seed, older.unseeded) == (None, ())


@pytest.mark.parametrize("seed", ["none", "3"])
def test_two_processes_of_run_tell_an_unseeded_loop_from_a_seeded_one(tmp_path: Path, seed: str) -> None:
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "loop.py").write_text(LOOP, encoding="utf-8")
    (tmp_path / "scenario.py").write_text(
        "from tripwire.scenario import Checkpoint, Scenario\n"
        f"scenario = Scenario(name='seeds', script='loop.py', argv=[{seed!r}], "
        "checkpoints=[Checkpoint('__main__:train', capture=('arg:model',))])\n"
    )
    for out in ("a", "b"):
        done = subprocess.run(
            [sys.executable, "-m", "tripwire", "run", "scenario.py", "--root", "tree", "--out", out],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert ("ended the run with the seed it started with" in done.stdout) == (seed == "none")
    compared = subprocess.run(
        [sys.executable, "-m", "tripwire", "compare", "a", "b"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if seed == "none":  # torch's seed from the OS in each process: other initial weights
        assert compared.returncode == 1 and "torch unseeded by the loop" in compared.stdout
    else:
        assert compared.returncode == 0, compared.stdout


def test_a_loop_seeding_with_the_seed_the_process_already_had_is_not_taken_for_unseeded(tmp_path: Path) -> None:
    code = torch.random.manual_seed.__code__
    torch.manual_seed(7)  # a harness (or an earlier recording of the same loop) left torch seeded with the loop's seed
    result = _record(tmp_path, "7", "draw")
    assert result.seed == 7 and not result.unseeded and not _note(result)
    assert torch.random.manual_seed.__code__ is code  # the watch is taken off with the recording


def test_counts_that_follow_the_draws_carry_the_same_explanation(tmp_path: Path) -> None:
    loop = (
        "import torch\n\nDEVICE = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n\n\n"
        "def step(x):\n    return x.sum()\n\n\n"
        "for _ in range(int(torch.randint(1, 6, ()).item()) * 3):\n    step(torch.ones(2, device=DEVICE)).item()\n"
    )

    def episodes(seed: int) -> int:
        torch.manual_seed(seed)
        return int(torch.randint(1, 6, ()).item())

    # what the process was seeded with before each run (the loop seeds nothing): two seeds drawing other counts
    seeds = [0, next(seed for seed in range(1, 50) if episodes(seed) != episodes(0))]
    results = []
    for seed in seeds:
        (tmp_path / str(seed)).mkdir()
        (tmp_path / str(seed) / "loop.py").write_text(loop, encoding="utf-8")
        torch.manual_seed(seed)
        results.append(record(Scenario(name="episodes", script="loop.py"), tmp_path / str(seed)))
    assert results[0].syncs.total != results[1].syncs.total
    syncs = next(v for v in compare_results(*results).verdicts if v.check == "syncs")
    assert syncs.status == "differs" and syncs.summary.endswith("; torch unseeded by the loop")
    assert any("drew from torch's default generator without seeding it" in line for line in syncs.details)
