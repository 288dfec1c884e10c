"""Syncs in the threads a recorded loop starts are counted, in the regions they belong to.

torch's modes are thread-local: before `ThreadWatch`, a loop whose train steps ran in a `threading.Thread` recorded
0 syncs in the step region while each step called `.item()`. The loop below does the same work on the main thread,
in a thread it starts, in a thread started inside a region, and through a thread pool; every way must count what
the main-thread way counts, at the same lines and in the same regions.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from loop_modules import tree_with_loop

from tripwire.outside.compare import compare_results
from tripwire.outside.record import record
from tripwire.outside.result import Result
from tripwire.scenario import Region, Scenario
from tripwire.sync.counter import SyncCounter
from tripwire.sync.threads import ThreadWatch

# where the read tensors live: built on the run's device, as a GPU loop's are (a tensor built in host memory, on a GPU
# run too, is read without a wait, and not counted)
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")

LOOP = """
import threading
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.pool import ThreadPool

import torch

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def train_step(w, i):
    loss = (w * i).sum()
    kept = torch.nonzero(w > i)
    return loss.item() + len(kept)


def steps(w):
    for i in range(4):
        train_step(w, float(i))


def sums(w):
    return [(w * i).sum().item() for i in range(3)]


def rollout(w, how):
    if how == "region-thread":  # started inside the region: the thread's work counts there
        worker = threading.Thread(target=sums, args=(w,))
        worker.start()
        worker.join()
    else:
        sums(w)


def main(how):
    w = torch.arange(4.0, device=DEVICE)  # on the run's device: a tensor built in host memory is read without a wait
    if how == "main":
        steps(w)
    elif how == "pool":
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda i: train_step(w, float(i)), range(4)))
    elif how == "thread-pool":  # multiprocessing's, started before the steps' region opens
        with ThreadPool(2) as pool:
            pool.map(lambda i: train_step(w, float(i)), range(2))
            pool.apply_async(train_step, (w, 2.0)).get()
            list(pool.imap(lambda i: train_step(w, float(i)), [3]))
    else:
        worker = threading.Thread(target=steps, args=(w,))
        worker.start()
        worker.join()
    rollout(w, how)
"""


def _record(tree: Path, how: str) -> Result:
    regions = [Region("loop:train_step", "step"), Region("loop:rollout", "rollout")]
    (tree / "entry.py").write_text(f"import loop\n\ndef run():\n    loop.main({how!r})\n", encoding="utf-8")
    scenario = Scenario(name="threads", call="entry:run", regions=regions)
    result = record(scenario, tree)
    assert result.ok, result.cause
    return result


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return tree_with_loop(tmp_path, LOOP)


def _by_line(result: Result) -> dict[tuple[str, str, str], int]:
    return {(site.region, site.kind, site.text): site.count for site in result.syncs.records}


@pytest.mark.parametrize("how", ["thread", "pool", "thread-pool", "region-thread"])
def test_work_on_another_thread_counts_as_it_does_on_the_main_one(tree: Path, how: str) -> None:
    main, threaded = _record(tree, "main"), _record(tree, how)
    assert main.syncs.counts_by_region() == {"rollout": 3, "step": 8}  # 4 x (.item() and nonzero), 3 x .item()
    assert threaded.syncs.counts_by_region() == main.syncs.counts_by_region()
    # the pool runs train_step through a lambda on its own line: the same step lines, from another caller
    assert _by_line(threaded) == _by_line(main)


def test_a_new_sync_in_a_thread_is_named_at_its_line(tree: Path) -> None:
    """The hazard: a `.item()` added to the code a thread runs. Before threads were counted it changed nothing."""
    base = _record(tree, "thread")
    loop = tree / "loop.py"
    loop.write_text(
        loop.read_text(encoding="utf-8").replace(
            "        train_step(w, float(i))\n", "        train_step(w, float(i))\n        w.max().item()\n"
        ),
        encoding="utf-8",
    )
    head = _record(tree, "thread")
    syncs = compare_results(base, head).verdict("syncs")
    assert syncs.status == "differs"
    assert "NEW   '<outside>' loop.py:20 in steps  ×4 [item]  `w.max().item()`" in syncs.details


def test_threads_started_outside_a_watch_and_after_it_count_nothing() -> None:
    """The watch counts threads started while it is active; it puts `Thread.start` back when it ends. (The counter
    runs without its own watch here: `threads=False`.)"""
    import threading

    import torch

    start = threading.Thread.start
    seen = []
    with SyncCounter(threads=False) as counter:
        with ThreadWatch() as watch:
            inside = threading.Thread(target=lambda: seen.append(torch.ones(1, device=DEVICE).item()))
            inside.start()
            inside.join()
        after = threading.Thread(target=lambda: seen.append(torch.ones(1, device=DEVICE).item()))
        after.start()
        after.join()
    assert threading.Thread.start is start
    assert watch.threads == 1 and len(seen) == 2
    assert counter.total == 1


@pytest.mark.parametrize("stand_ins", [True, False])
def test_carried_work_in_a_counted_thread_is_counted_once(monkeypatch: pytest.MonkeyPatch, stand_ins: bool) -> None:
    """A loop that wraps its own pool work with `carried` (our trainer's env workers do), recorded from outside:
    the thread already counts when the carried call pushes its own counting on top, and each sync counts once."""
    import threading

    import torch

    from tripwire.sync import carried, explicit

    monkeypatch.setattr(explicit, "use_patches", stand_ins)
    with SyncCounter() as counter, ThreadWatch():  # a second watch inside the counter's own: nothing twice
        worker = threading.Thread(target=carried(lambda: torch.ones(2, device=DEVICE).sum().item()))
        worker.start()
        worker.join()
    assert counter.total == 1


LEFT_RUNNING = """
import threading
import time
from pathlib import Path

import torch

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def poll(stop):
    while not Path(stop).exists():
        torch.ones(2, device=DEVICE).sum().item()
        time.sleep(0.002)


def start_and_leave(stop):
    torch.ones(1, device=DEVICE).item()
    threading.Thread(target=poll, args=(stop,), name="left-running", daemon=True).start()


def three_syncs():
    for _ in range(3):
        torch.ones(1, device=DEVICE).item()
    time.sleep(0.2)  # the left thread syncs about 100 times meanwhile
"""


def test_a_thread_left_running_by_one_recording_counts_nothing_in_the_next(tmp_path: Path) -> None:
    """Several recordings in one process (tests, the pytest plugin): a daemon thread the first loop started and never
    stopped still runs under the counting it was given. It must not count in a later recording, which never
    started it, at the later recording's regions or anywhere else."""
    import threading
    import time

    tree = tree_with_loop(tmp_path, LEFT_RUNNING)
    stop = tmp_path / "stop"
    (tree / "entry.py").write_text(
        f"import loop\n\ndef first():\n    loop.start_and_leave({str(stop)!r})\n\n"
        "def second():\n    loop.three_syncs()\n",
        encoding="utf-8",
    )
    try:
        first = record(Scenario(name="first", call="entry:first"), tree)
        assert first.ok, first.cause
        second = record(Scenario(name="second", call="entry:second", regions=[Region("loop:three_syncs", "s")]), tree)
        assert second.ok, second.cause
    finally:
        stop.touch()
        deadline = time.monotonic() + 10
        while any(t.name == "left-running" for t in threading.enumerate()) and time.monotonic() < deadline:
            time.sleep(0.01)
    assert first.syncs.total >= 1
    assert second.syncs.counts_by_region() == {"s": 3}
    assert second.syncs.total == 3


def test_an_in_process_counter_counts_the_threads_its_code_starts() -> None:
    """`SyncCounter()` as the pytest plugin's `sync_counter` and a test use it, no recording: a `.item()` in a thread
    or a pool task the counted code starts counts, in the starter's region. With `threads=False` (the counters before
    this change) the same code counted 1 of its 4 syncs, with a budget on it green while blind."""
    import asyncio
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from tripwire.sync import hot_path

    async def handed_over() -> None:
        # the event loop's default thread pool
        await asyncio.to_thread(lambda: torch.ones(4, device=DEVICE).min().item())

    def work() -> None:
        torch.ones(1, device=DEVICE).item()
        with hot_path("step"):
            worker = threading.Thread(target=lambda: torch.ones(2, device=DEVICE).sum().item())
            worker.start()
            worker.join()
            with ThreadPoolExecutor(1) as pool:
                pool.submit(lambda: torch.ones(3, device=DEVICE).max().item()).result()
            asyncio.run(handed_over())

    with SyncCounter() as counter:
        work()
    with SyncCounter(threads=False) as blind:
        work()
    assert counter.counts_by_region() == {"<outside>": 1, "step": 3}
    assert blind.counts_by_region() == {"<outside>": 1}
    assert threading.Thread.start.__module__ == "threading"  # the watch was put back


def test_a_pool_started_while_counting_runs_its_later_tasks_uncounted_and_at_full_speed() -> None:
    """A trainer keeps its thread pool across calls: a pool whose threads were started inside a counter must not
    run the tasks it gets after it under the counting modes (a Python trip for every torch call), nor count them."""
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from tripwire.sync import implicit

    def task() -> bool:
        torch.ones(1, device=DEVICE).item()
        return implicit.counting_here() or torch._C._len_torch_function_stack() > 0

    with ThreadPoolExecutor(1) as pool:
        with SyncCounter() as counter:
            inside = pool.submit(task).result()
        after = pool.submit(task).result()
    assert counter.total == 1
    assert inside and not after  # the thread counted while the task was counted, then nothing was left on it


def test_a_thread_pool_from_before_the_counter_counts_each_task_where_it_was_handed_over() -> None:
    """multiprocessing's `ThreadPool` starts its threads when it is made. Made before the counter, its tasks counted
    nothing; made inside it, every task counted under the regions where the pool was made, not where the task was
    handed over. Each task now counts where it was handed over."""
    from multiprocessing.pool import ThreadPool

    import torch

    from tripwire.sync import hot_path

    def step(i: int) -> float:
        return torch.ones(2, device=DEVICE).sum().item()

    with ThreadPool(2) as before, SyncCounter() as counter, ThreadPool(1) as inside, hot_path("rollout"):
        before.map(step, range(3))
        inside.apply(step, (0,))
        before.starmap(step, [(0,)])
        list(before.imap_unordered(step, range(2)))
    assert counter.counts_by_region() == {"rollout": 7}
