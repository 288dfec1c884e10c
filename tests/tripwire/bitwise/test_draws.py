"""Draws from torch's default generator on several threads (`tripwire.bitwise.draws`).

TorchRL's SAC, seeded, samples its replay buffer on a prefetching thread pool while the main thread samples actions,
both from torch's one default generator: two runs differed from the 978th of 2,500 updates, and agreed with
`prefetch=0`. The watch names each thread that drew and its first line; a recording notes it and `compare` names it.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from tripwire.bitwise.draws import DrawThreads, _watched_overloads
from tripwire.outside.compare import compare_results
from tripwire.outside.record import record
from tripwire.outside.result import Result
from tripwire.scenario import Checkpoint, Scenario


def _line() -> str:
    return "here"


def _draw_on_a_thread(draw, generator: torch.Generator | None = None) -> None:
    thread = threading.Thread(target=draw, args=(generator,) if generator is not None else (), name="worker")
    thread.start()
    thread.join()


@pytest.mark.parametrize(
    "draw",
    [
        lambda: torch.rand(3),
        lambda: torch.randn(3),
        lambda: torch.randint(5, (3,)),
        lambda: torch.randperm(4),
        lambda: torch.multinomial(torch.ones(4), 2),
        lambda: torch.bernoulli(torch.full((3,), 0.5)),
        lambda: torch.nn.functional.dropout(torch.ones(4), 0.5, training=True),
        lambda: torch.empty(3).exponential_(),
        lambda: torch.normal(torch.zeros(3), torch.ones(3)),
        lambda: torch.distributions.Normal(torch.zeros(2), torch.ones(2)).sample(),
    ],
    ids=[
        "rand",
        "randn",
        "randint",
        "randperm",
        "multinomial",
        "bernoulli",
        "dropout",
        "exponential",
        "normal",
        "dist",
    ],
)
def test_a_draw_on_another_thread_is_noted_with_its_thread_and_line(draw) -> None:
    with DrawThreads(_line) as draws:
        draw()
        _draw_on_a_thread(draw)
    assert [(name, count > 0, line) for name, count, line in draws.drawing()] == [
        (threading.current_thread().name, True, "here"),
        ("worker", True, "here"),
    ]
    assert [count for _name, count, _line in draws.drawing()] == [1, 1]  # an op's inner draws are its own


def test_a_generator_of_the_threads_own_is_not_a_draw_from_the_default_one() -> None:
    with DrawThreads(_line) as draws:
        torch.rand(2)
        _draw_on_a_thread(lambda generator: torch.rand(2, generator=generator), torch.Generator().manual_seed(1))
    assert [name for name, _count, _line in draws.drawing()] == [threading.current_thread().name]


def test_the_watch_changes_no_draw_and_leaves_nothing_behind() -> None:
    torch.manual_seed(3)
    plain = (torch.rand(4), torch.randn(4), torch.randperm(6), torch.multinomial(torch.ones(5), 3))
    torch.manual_seed(3)
    with DrawThreads(_line) as draws:
        watched = (torch.rand(4), torch.randn(4), torch.randperm(6), torch.multinomial(torch.ones(5), 3))
    assert all(torch.equal(a, b) for a, b in zip(plain, watched, strict=True))
    torch.rand(2)
    assert sum(count for _name, count, _line in draws.drawing()) == 4
    assert _watched_overloads() and all(
        torch.library.get_kernel(full, "CPU") is not None for full in _watched_overloads()
    )


LOOP = """
import sys
import threading

import torch


def step(model):
    return model(torch.rand(2, 3)).sum()


if __name__ == "__main__":
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    if sys.argv[1] == "threads":
        barrier = threading.Barrier(2)

        def sample():
            barrier.wait()
            for _ in range(2000):
                torch.rand(1)

        worker = threading.Thread(target=sample, name="sampler")
        worker.start()
        barrier.wait()
    for _ in range(2000):
        step(model)
    if sys.argv[1] == "threads":
        worker.join()
"""


def _record(tmp_path: Path, mode: str) -> Result:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "loop.py").write_text(LOOP, encoding="utf-8")
    scenario = Scenario(
        name="draws", script="loop.py", argv=[mode], checkpoints=[Checkpoint("__main__:step", capture=("return",))]
    )
    result = record(scenario, tmp_path)
    assert result.status == "ok", result.cause
    return result


def test_a_recording_notes_a_loop_drawing_on_two_threads_and_compare_names_it(tmp_path: Path) -> None:
    first = _record(tmp_path / "a", "threads")
    assert first.draw_threads is not None
    assert sorted(name for name, _count, _line in first.draw_threads) == ["MainThread", "sampler"]
    assert {line for _name, _count, line in first.draw_threads} == {"loop.py:14", "loop.py:21"}
    (note,) = [note for note in first.notes if "on 2 threads" in note]
    assert "'sampler' 2,000 (first at loop.py:21)" in note
    loaded = Result.load(first.save(tmp_path / "saved"))
    assert loaded.draw_threads == first.draw_threads
    single = _record(tmp_path / "b", "single")
    assert [name for name, _count, _line in single.draw_threads or []] == ["MainThread"]
    assert not [note for note in single.notes if "threads:" in note]
    trajectory = next(v for v in compare_results(single, first).verdicts if v.check == "trajectory")
    assert trajectory.status == "differs" and "; torch drawn on several threads" in trajectory.summary
    assert any(line.startswith("B drew from torch's default generator on 2 threads") for line in trajectory.details)


def test_a_fault_in_the_watch_is_kept_as_its_own_and_the_draw_still_runs() -> None:
    def broken() -> str:
        raise RuntimeError("no frame")

    torch.manual_seed(5)
    plain = torch.rand(3)
    torch.manual_seed(5)
    with DrawThreads(broken) as draws:
        watched = torch.rand(3)
        torch.rand(3)
    assert torch.equal(plain, watched)
    assert draws.faults == ["RuntimeError: no frame"]  # once, not once a draw
    assert draws.drawing() == [[threading.current_thread().name, 2, "<unknown>"]]
