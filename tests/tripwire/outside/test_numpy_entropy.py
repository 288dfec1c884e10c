"""A loop that makes NumPy generators from OS entropy: kept with the loop's line, and named by `compare`.

skrl 2.0.0's CartPole DQN (`examples/gymnasium/torch_gymnasium_cartpole_dqn.py`, `--seed 42`) explores through its
action space's `sample()`, and the space is never seeded: gymnasium made its generator from OS entropy, so three
recordings of eleven took other random actions, and `compare` showed a value change from the first checkpoint
with nothing to say why. A result now keeps where NumPy made such generators (`Result.entropy`), and only those that
keep the entropy: a copied, unpickled or legacy-seeded generator is made unseeded and given its state right after.
`run` does not note them (gymnasium makes one for every space it batches, mostly never drawn from: CleanRL's vector
env makes two); `compare` names them where two runs of one tree differ.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import numpy.random.bit_generator as bit_generator
import pytest

from tripwire.outside import record as record_module
from tripwire.outside import seeds
from tripwire.outside.compare import Verdict, compare_results
from tripwire.outside.record import record
from tripwire.outside.result import Result
from tripwire.scenario import Checkpoint, Scenario

LOOP = """
import copy
import pickle
import sys

import numpy as np
import torch


def make(kind):
    if kind == "entropy":
        return np.random.default_rng()  # line 12
    if kind == "helper":
        return helper()  # a helper whose own seed is None
    if kind == "seeded":
        return np.random.default_rng(3)
    if kind == "legacy":
        return np.random.RandomState(3)  # made unseeded by NumPy, then seeded the legacy way
    if kind == "copies":
        seeded = np.random.default_rng(3)
        return pickle.loads(pickle.dumps(copy.deepcopy(seeded)))  # each rebuilt unseeded, then given the state
    if kind == "jumped":
        return np.random.Generator(np.random.PCG64(3).jumped())  # made unseeded, then given the parent's state
    raise SystemExit(kind)


def helper(seed=None):
    return np.random.default_rng(seed)  # line 28


def train(model):
    return model(torch.ones(1, 3)).sum()


if __name__ == "__main__":
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    rng = make(sys.argv[1])
    draw = rng.random((2, 3)) if isinstance(rng, np.random.Generator) else rng.random_sample((2, 3))
    with torch.no_grad():
        model.weight += torch.from_numpy(draw).float()
    train(model)
"""


def _record(folder: Path, kind: str) -> Result:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "loop.py").write_text(LOOP, encoding="utf-8")
    scenario = Scenario(
        name="entropy",
        script="loop.py",
        argv=[kind],
        checkpoints=[Checkpoint("__main__:train", capture=("arg:model",))],
    )
    result = record(scenario, folder)
    assert result.status == "ok", result.cause
    return result


def _noted(result: Result) -> bool:
    return any("NumPy generator" in note for note in result.notes)


def _trajectory(a: Result, b: Result) -> Verdict:
    return next(verdict for verdict in compare_results(a, b).verdicts if verdict.check == "trajectory")


@pytest.mark.parametrize(("kind", "line"), [("entropy", "loop.py:12"), ("helper", "loop.py:28")])
def test_a_generator_made_from_os_entropy_is_kept_at_the_loops_line_and_compare_names_it(
    tmp_path: Path, kind: str, line: str
) -> None:
    first, second = _record(tmp_path, kind), _record(tmp_path, kind)  # two runs of one tree
    assert first.entropy == second.entropy == [(line, 1)]
    assert not _noted(first)  # kept, not said at `run`
    assert not first.unseeded  # torch was seeded: the NumPy generator alone explains the difference
    trajectory = _trajectory(first, second)
    assert trajectory.status == "differs"
    assert trajectory.summary.endswith("; NumPy generators from OS entropy")
    assert any(text.startswith(f"A made NumPy generators from OS entropy ({line} (1))") for text in trajectory.details)


def test_between_two_trees_the_generators_are_not_offered_as_the_cause(tmp_path: Path) -> None:
    """Between two source folders, or two commits of one, a difference is the change's to explain."""
    first, elsewhere = _record(tmp_path / "a", "entropy"), _record(tmp_path / "b", "entropy")
    assert first.entropy == elsewhere.entropy == [("loop.py:12", 1)]
    assert "NumPy" not in _trajectory(first, elsewhere).summary
    second = _record(tmp_path / "a", "entropy")
    second.source = {**second.source, "commit": "b" * 40}
    first.source = {**first.source, "commit": "a" * 40}
    trajectory = _trajectory(first, second)
    assert trajectory.status == "differs" and "NumPy" not in trajectory.summary
    assert not any("NumPy" in line for line in trajectory.details)


@pytest.mark.parametrize("kind", ["seeded", "legacy", "copies", "jumped"])
def test_a_generator_given_its_state_is_not_taken_for_one_made_from_entropy(tmp_path: Path, kind: str) -> None:
    """A seeded generator, a `RandomState(seed)` and copies of a seeded one (each rebuilt unseeded by NumPy, which
    draws entropy for it, and then given its state): nothing noted, and two runs compare identical."""
    first, second = _record(tmp_path, kind), _record(tmp_path, kind)
    assert first.entropy == [] and not _noted(first)
    assert compare_results(first, second).ok


def test_a_gymnasium_space_never_seeded_is_named_at_the_loops_line_via_gymnasium(tmp_path: Path) -> None:
    gymnasium = pytest.importorskip("gymnasium")
    del gymnasium
    (tmp_path / "loop.py").write_text(
        "import gymnasium as gym\n\n\ndef act(space):\n    return space.sample()\n\n\n"
        "space = gym.spaces.Discrete(4)\nseeded = gym.spaces.Discrete(4, seed=1)\n"
        "for _ in range(3):\n    act(space), act(seeded)\n"
        "gym.vector.utils.batch_space(gym.spaces.Discrete(3), 2).sample()\n",  # line 12, through functools' dispatch
        encoding="utf-8",
    )
    result = record(Scenario(name="space", script="loop.py", checkpoints=[Checkpoint("__main__:act")]), tmp_path)
    assert result.status == "ok", result.cause
    # the unseeded space's generator, once (its first draw), and the batched space's source's (copied for the batch)
    assert result.entropy == [
        ("loop.py:12 via gymnasium/vector/utils/spaces.py", 1),  # the library the loop called, not `functools`
        ("loop.py:5 via gymnasium/spaces/discrete.py", 1),
    ]


def test_the_stand_in_is_taken_out_after_the_recording_even_when_the_loop_fails(tmp_path: Path) -> None:
    original = bit_generator.randbits
    (tmp_path / "loop.py").write_text("import numpy as np\n\nnp.random.default_rng()\nraise ValueError('boom')\n")
    result = record(Scenario(name="crash", script="loop.py"), tmp_path)
    assert result.status == "crash" and result.entropy == [("loop.py:3", 1)]
    assert bit_generator.randbits is original


def test_a_stand_in_the_loop_put_there_itself_is_left_in_place(tmp_path: Path) -> None:
    original = bit_generator.randbits
    (tmp_path / "loop.py").write_text(
        "import numpy.random.bit_generator as b\n\nb.randbits = lambda bits: 7\n", encoding="utf-8"
    )
    try:
        result = record(Scenario(name="own", script="loop.py"), tmp_path)
        assert result.status == "ok", result.cause
        assert bit_generator.randbits(128) == 7  # the loop's own change stands, as it left it
    finally:
        bit_generator.randbits = original


def test_a_fault_in_tripwires_noting_is_named_as_tripwires_and_the_generator_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(root: str) -> str:
        raise RuntimeError("injected")

    monkeypatch.setattr(record_module, "loop_line", broken)
    result = _record(tmp_path, "entropy")
    assert result.entropy == []  # nothing could be noted
    faults = [note for note in result.notes if note.startswith("tripwire's fault, not the loop's")]
    assert len(faults) == 1 and "RuntimeError: injected" in faults[0] and "NumPy" in faults[0]
    assert result.trajectory is not None and len(result.trajectory) == 1  # the loop ran to its end


def test_generators_made_on_another_thread_are_seen() -> None:
    def make() -> None:
        np.random.default_rng()

    with seeds.OsEntropy(lambda: "here") as made:
        worker = threading.Thread(target=make)
        worker.start()
        worker.join()
        np.random.default_rng(1)
    assert made.watched and made.made() == [("here", 1)] and not made.faults


def test_a_numpy_that_cannot_be_watched_is_said_unwatched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(seeds, "numpy_entropy", lambda: None)
    result = _record(tmp_path, "entropy")
    assert result.entropy is None and not _noted(result)  # not watched: not "none made"


def test_the_sites_are_saved_and_a_result_from_before_loads_without_them(tmp_path: Path) -> None:
    result = _record(tmp_path / "tree", "entropy")
    loaded = Result.load(result.save(tmp_path / "saved"))
    assert loaded.entropy == [("loop.py:12", 1)]
    data = json.loads((tmp_path / "saved" / "result.json").read_text())
    del data["entropy"]
    (tmp_path / "saved" / "result.json").write_text(json.dumps(data))
    older = Result.load(tmp_path / "saved")
    assert older.entropy is None
    trajectory = next(v for v in compare_results(older, older).verdicts if v.check == "trajectory")
    assert "NumPy" not in trajectory.summary
