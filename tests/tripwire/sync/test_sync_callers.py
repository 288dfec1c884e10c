"""A sync line that grew because its function gained a caller is reported at the new caller, with its chain.

A helper with one `.item()` (a stand-in for a collective wrapper such as `RankShard.barrier`) is called from two
places; a refactor adds a third. The budget knows the helper's line and, per line, who called it: the failure names
the new call's file, line, function and source, and the frames above it. Moving a call within its function is not a
new caller; a budget or result recorded before callers were kept still loads and checks as before.
"""

from __future__ import annotations

import functools
import gc
import json
import re
import sysconfig
import threading
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch
from loop_modules import load

from tripwire.common.errors import SyncBudgetExceeded
from tripwire.gates.goldens import GoldenStore
from tripwire.outside.compare import compare_results, compare_syncs, site_changes
from tripwire.outside.result import Result, SyncSummary
from tripwire.sync import hot_path
from tripwire.sync.budget import SyncBudget, check_budget
from tripwire.sync.counter import SyncCounter
from tripwire.sync.regions import carried
from tripwire.sync.sites import Caller, caller_changes, callers_by_line, group_records
from tripwire.sync.state import MAX_CALLERS

pytestmark = pytest.mark.usefixtures("explicit_hooks")  # stand-ins and the function mode alike

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # the loop's tensors are on its device

BASE = """
def barrier(t):
    return t.sum().item()


def train(t):
    barrier(t)


def evaluate(t):
    barrier(t)


def run(t):
    train(t)
    evaluate(t)
"""

# A third caller: checkpoint() now calls barrier() too.
NEW_CALLER = BASE.replace(
    "def run(t):",
    "def checkpoint(t):\n    barrier(t)\n\n\ndef run(t):",
).replace("    evaluate(t)\n", "    evaluate(t)\n    checkpoint(t)\n")

# train()'s call moved two lines down (the same call, in the same function), and checkpoint() is new.
MOVED_AND_NEW = NEW_CALLER.replace("def train(t):\n", "def train(t):\n    # moved\n    # down\n")

# An existing caller calls twice.
MORE_CALLS = BASE.replace("def evaluate(t):\n    barrier(t)\n", "def evaluate(t):\n    barrier(t)\n    barrier(t)\n")


def run(folder: Path, source: str) -> SyncCounter:
    module = load(folder, source)
    with SyncCounter(root=folder) as counter, hot_path("exchange"):
        module.run(torch.arange(4.0, device=DEVICE))  # on the run's device: a host tensor's reads wait for nothing
    return counter


def line_of(source: str, text: str, after: str = "") -> int:
    """1-based line number of the first line equal to `text` (stripped) after the line starting with `after`."""
    lines = source.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(after)) if after else 0
    return next(i + 1 for i in range(start, len(lines)) if lines[i].strip() == text)


def record(folder: Path) -> Path:
    """Record the budget of BASE; returns the budget file."""
    GoldenStore(folder / "baselines", update=True).check_sync_budget("s", run(folder, BASE), {})
    return folder / "baselines" / "sync_budgets" / "s.json"


def failure(folder: Path, source: str) -> list[str]:
    with pytest.raises(SyncBudgetExceeded) as raised:
        GoldenStore(folder / "baselines").check_sync_budget("s", run(folder, source), {})
    return str(raised.value).splitlines()


def caller_rows(lines: list[str]) -> list[str]:
    """The caller lines of a report, stripped."""
    rows = [line.strip() for line in lines]
    return [row for row in rows if row.startswith(("caller: ", "new caller: ", "caller grew: "))]


def test_events_carry_the_project_callers_innermost_first(tmp_path: Path) -> None:
    counter = run(tmp_path, BASE)
    [first, second] = counter.events
    train, run_line = line_of(BASE, "barrier(t)", "def train"), line_of(BASE, "train(t)", "def run")
    assert first.callers[:2] == (f"loop.py:{train} in train", f"loop.py:{run_line} in run")
    assert first.caller_text == "barrier(t)"
    assert second.callers[0] == f"loop.py:{line_of(BASE, 'barrier(t)', 'def evaluate')} in evaluate"
    assert 2 < len(first.callers) <= MAX_CALLERS  # run's caller (this test) follows; pytest's own frames never
    assert all("site-packages" not in frame and "pluggy" not in frame for frame in first.callers)


def test_the_budget_records_each_lines_callers(tmp_path: Path) -> None:
    budget = SyncBudget.load(record(tmp_path))
    assert budget.callers == {
        "exchange": {
            "loop.py::barrier [item]": {
                "return t.sum().item()": {"loop.py::evaluate `barrier(t)`": 1, "loop.py::train `barrier(t)`": 1}
            }
        }
    }


def test_identical_runs_pass(tmp_path: Path) -> None:
    record(tmp_path)
    outcome = GoldenStore(tmp_path / "baselines").check_sync_budget("s", run(tmp_path, BASE), {})
    assert outcome.status == "passed"


def test_a_new_caller_of_a_syncing_helper_is_named_with_its_chain(tmp_path: Path) -> None:
    record(tmp_path)
    lines = failure(tmp_path, NEW_CALLER)
    assert "region 'exchange': 3 syncs, budget 2 (+1)" in lines[1]
    synced = line_of(NEW_CALLER, "return t.sum().item()")
    assert lines[2].strip() == f"GREW loop.py:{synced} in barrier  ×3 (was 2)  [item×3]  `return t.sum().item()`"
    called = line_of(NEW_CALLER, "barrier(t)", "def checkpoint")
    calling = line_of(NEW_CALLER, "checkpoint(t)", "def run")
    assert (
        lines[3]
        .strip()
        .startswith(f"new caller: loop.py:{called} in checkpoint `barrier(t)` ×1 (from loop.py:{calling} in run <- ")
    )
    assert re.search(r"<- \S*test_sync_callers\.py:\d+ in run", lines[3])  # the chain goes on into this test
    assert caller_rows(lines) == [lines[3].strip()]  # train() and evaluate() are known callers


def test_moving_a_caller_within_its_function_is_not_a_new_caller(tmp_path: Path) -> None:
    record(tmp_path)
    moved_only = MOVED_AND_NEW.replace("    checkpoint(t)\n", "")
    assert GoldenStore(tmp_path / "baselines").check_sync_budget("s", run(tmp_path, moved_only), {}).status == "passed"
    lines = failure(tmp_path, MOVED_AND_NEW)
    [caller] = caller_rows(lines)
    called = line_of(MOVED_AND_NEW, "barrier(t)", "def checkpoint")
    assert caller.startswith(f"new caller: loop.py:{called} in checkpoint `barrier(t)` ×1 (from ")


def test_an_existing_caller_calling_more_often_is_named(tmp_path: Path) -> None:
    record(tmp_path)
    lines = failure(tmp_path, MORE_CALLS)
    [caller] = caller_rows(lines)
    first, second = (line_of(MORE_CALLS, "barrier(t)", "def evaluate") + i for i in (0, 1))
    calling = line_of(MORE_CALLS, "evaluate(t)", "def run")
    expected = (
        f"caller grew: loop.py:{first},{second} in evaluate `barrier(t)` ×1 -> ×2 (+1) (from loop.py:{calling} in run"
    )
    assert caller.startswith(expected)


def test_a_budget_without_callers_checks_as_before_and_names_current_callers(tmp_path: Path) -> None:
    budget_file = record(tmp_path)
    data = json.loads(budget_file.read_text())
    del data["callers"]
    budget_file.write_text(json.dumps(data))
    assert SyncBudget.load(budget_file).callers is None
    assert GoldenStore(tmp_path / "baselines").check_sync_budget("s", run(tmp_path, BASE), {}).status == "passed"
    without = failure(tmp_path, NEW_CALLER)
    record(tmp_path)
    with_callers = failure(tmp_path, NEW_CALLER)
    # the same report, but each current caller named with its count and no claim of being new
    rest = [line for line in without[1:] if line.strip() not in caller_rows(without)]
    assert rest == [line for line in with_callers[1:] if line.strip() not in caller_rows(with_callers)]
    named = caller_rows(without)
    assert len(named) == 3 and all(line.startswith("caller: loop.py:") for line in named)
    assert {line.split(" in ", 1)[1].split(" ", 1)[0] for line in named} == {"train", "evaluate", "checkpoint"}


def test_counts_only_budget_checks_still_work(tmp_path: Path) -> None:
    budget = SyncBudget.from_dict({"regions": {"exchange": 2}})
    assert check_budget(run(tmp_path, BASE), budget).ok
    report = check_budget(run(tmp_path, NEW_CALLER), budget)
    assert not report.ok and not any(row.startswith("new") for row in caller_rows(report.format().splitlines()))
    report = check_budget(run(tmp_path, NEW_CALLER), SyncBudget.from_dict({"regions": {"exchange": 2}, "callers": {}}))
    # a NEW line's callers are named with their counts, never claimed new: the calls may be as old as the function
    assert len(caller_rows(report.format().splitlines())) == 3
    assert all(row.startswith("caller: loop.py:") for row in caller_rows(report.format().splitlines()))


def test_malformed_callers_are_refused(tmp_path: Path) -> None:
    from tripwire.common.errors import GoldenFileError

    with pytest.raises(GoldenFileError, match="'callers' must map"):
        SyncBudget.from_dict({"regions": {}, "callers": {"r": {"k": {"line": {"caller": "many"}}}}})


def test_a_saved_result_keeps_the_callers_and_compare_names_the_new_one(tmp_path: Path) -> None:
    base = Result("s", "ok", syncs=SyncSummary(group_records(run(tmp_path, BASE).events), declared=["exchange"]))
    head = Result("s", "ok", syncs=SyncSummary(group_records(run(tmp_path, NEW_CALLER).events)))
    base.save(tmp_path / "a")
    head.save(tmp_path / "b")
    a, b = Result.load(tmp_path / "a"), Result.load(tmp_path / "b")
    assert [r.callers for r in a.syncs.records] == [r.callers for r in base.syncs.records]
    assert callers_by_line(a.syncs.records) == callers_by_line(base.syncs.records)
    verdict = compare_syncs(a.syncs, b.syncs)
    called = line_of(NEW_CALLER, "barrier(t)", "def checkpoint")
    grew = next(i for i, line in enumerate(verdict.details) if line.startswith("GREW"))
    assert verdict.details[grew + 1].startswith(
        f"    new caller: loop.py:{called} in checkpoint `barrier(t)` ×1 (from "
    )
    assert compare_syncs(a.syncs, a.syncs).status == "same"
    shown = compare_results(a, b).format()
    assert f"\n      new caller: loop.py:{called} in checkpoint `barrier(t)` ×1 (from loop.py:" in shown
    # and a budget written from the saved result's records checks the live run the same way
    assert check_budget(b.syncs, SyncBudget.from_dict({"regions": {"exchange": 2}, "callers": {}})).over


def test_an_older_result_without_callers_still_loads_and_compares(tmp_path: Path) -> None:
    Result("s", "ok", syncs=SyncSummary(group_records(run(tmp_path, BASE).events))).save(tmp_path / "a")
    data = json.loads((tmp_path / "a" / "result.json").read_text())
    for site in data["syncs"]["sites"]:
        del site["callers"]
    (tmp_path / "a" / "result.json").write_text(json.dumps(data))
    a = Result.load(tmp_path / "a")
    assert all(record.callers is None for record in a.syncs.records)
    b = SyncSummary(group_records(run(tmp_path, NEW_CALLER).events))
    [change] = site_changes(a.syncs.records, b.records)
    assert change.change == "GREW"
    assert [c.format().split(" ", 1)[0] for c in change.callers] == ["caller:"] * 3  # no claim of what is new


def test_caller_changes_pair_an_edited_call_and_never_across_functions() -> None:
    recorded = {"a.py::f `x = helper(t)`": 2, "a.py::g `helper(t)`": 1}
    live = [
        Caller("a.py", (9,), "f", "x = helper(t) + 1", 2),  # the same caller, its line edited
        Caller("a.py", (20,), "h", "helper(t)", 1),  # a new function with g's text: new
        Caller("a.py", (30,), "g", "helper(t)", 3),  # g calls more often
    ]
    changes = caller_changes(recorded, live)
    assert [(c.caller.function, c.before) for c in changes] == [("h", 0), ("g", 1)]
    assert changes[1].format() == "caller grew: a.py:30 in g `helper(t)` ×1 -> ×3 (+2)"


THROUGH_THE_LIBRARY = """
import copy


def barrier(t):
    return t.sum().item()


class Box:
    def __init__(self, t):
        self.t = t

    def __deepcopy__(self, memo):
        barrier(self.t)
        return self


def run(t):
    copy.deepcopy(Box(t))
    barrier(t)
"""


def test_library_frames_between_project_frames_are_skipped_not_a_stop(tmp_path: Path) -> None:
    counter = run(tmp_path, THROUGH_THE_LIBRARY)
    [through, direct] = counter.events
    deep = line_of(THROUGH_THE_LIBRARY, "barrier(self.t)")
    copied = line_of(THROUGH_THE_LIBRARY, "copy.deepcopy(Box(t))")
    assert through.callers[:2] == (f"loop.py:{deep} in Box.__deepcopy__", f"loop.py:{copied} in run")
    assert not any("copy.py" in frame for frame in through.callers)  # the standard library's frames
    # the second sync's walk may stop where the first found no project frame further out: the same outer frames
    assert direct.callers[0] == f"loop.py:{copied + 1} in run"
    assert direct.callers[1:] == through.callers[2 : 2 + len(direct.callers) - 1]


def _library(source: str, name: str) -> dict[str, Any]:
    """Run `source` as if it were a module of an installed library (its frames are not the project's)."""
    library = Path(sysconfig.get_paths()["purelib"]) / f"{name}.py"  # a name only: nothing is written there
    namespace: dict[str, Any] = {}
    exec(compile(source, str(library), "exec"), namespace)
    return namespace


def test_a_library_calling_back_into_the_project_keeps_no_frame_of_each_call_alive() -> None:
    """A library's loop calls a project callback that syncs: no project frame lies outward of the library's frame of
    each call, a new one every step, which the caller walk may remember as where to stop. It keeps a bounded
    number of them (each holds its locals: the step's tensors), and every sync still names its project caller."""
    source = "def step(callback, batch):\n    callback(batch)\n\ndef run(callback, n):\n"
    source += "    for i in range(n):\n        step(callback, make(i))\n"
    namespace = _library(source, "a_library_loop")
    batches: list[weakref.ref[torch.Tensor]] = []

    def make(i: int) -> torch.Tensor:
        batch = torch.full((4,), float(i), device=DEVICE)
        batches.append(weakref.ref(batch))
        return batch

    def callback(batch: torch.Tensor) -> None:
        batch.sum().item()

    namespace["make"] = make
    steps = 300
    with SyncCounter() as counter:
        # on a thread of its own, so no project frame (this test's) lies outward of the library's loop
        worker = threading.Thread(target=carried(functools.partial(namespace["run"], callback, steps)))
        worker.start()
        worker.join()
        gc.collect()
        alive = sum(ref() is not None for ref in batches)
    assert len(counter.events) == steps
    assert all(event.function.endswith("callback") and event.callers == () for event in counter.events)
    assert alive <= 70, f"{alive} of {steps} steps' batches kept alive by the caller walk"


LAYERED = """
def helper(t):
    return t.sum().item()


def a(t):
    helper(t)
    helper(t)
    t.sum().item()


def b(t, call):
    t.sum().item()
    t.sum().item()
    call(a, t)


def e(t, loop, call):
    loop(b, t, call)


def f(t, loop, call):
    e(t, loop, call)


def g(t, loop, call):
    f(t, loop, call)
"""


def test_callers_across_layers_of_library_frames_are_those_of_a_full_walk(tmp_path: Path) -> None:
    """Project and library frames in layers (g, f, e, a library loop, b, a library call, a), on a thread whose only
    project frames are these: whatever the walk remembers from one sync to the next (where no project frame lies
    further out), every sync names the project frames a full walk would, innermost first, at most four."""
    library = _library(
        "def loop(fn, *args):\n    fn(*args)\n\ndef call(fn, *args):\n    fn(*args)\n", "a_library_layer"
    )
    module = load(tmp_path, LAYERED)
    t = torch.ones(2)
    with SyncCounter() as counter:
        # on a thread of its own, so no project frame (this test's) lies outward of g
        job = functools.partial(module.g, t, library["loop"], library["call"])
        worker = threading.Thread(target=carried(job))
        worker.start()
        worker.join()
    walked = [(event.function, [frame.rsplit(" in ", 1)[1] for frame in event.callers]) for event in counter.events]
    assert walked == [
        ("b", ["e", "f", "g"]),
        ("b", ["e", "f", "g"]),
        ("helper", ["a", "b", "e", "f"]),
        ("helper", ["a", "b", "e", "f"]),
        ("a", ["b", "e", "f", "g"]),
    ]


GENERATOR = """
def pulls(callback):
    while True:
        callback()
        yield
"""

RESUMERS = """
def first(g):
    next(g)


def second(g):
    next(g)
"""


def test_a_library_generator_resumed_from_another_caller_names_that_caller(tmp_path: Path) -> None:
    """A generator's frame runs under whoever resumes it, so nothing the walk remembers may rest on it: a sync inside
    names the caller of each resumption."""
    pulls = _library(GENERATOR, "a_library_generator")["pulls"]
    module = load(tmp_path, RESUMERS)
    t = torch.ones(2)
    g = pulls(lambda: t.sum().item())
    with SyncCounter() as counter:
        for resume in (module.first, module.first, module.first, module.second, module.second):
            resume(g)
    names = [event.callers[0].rsplit(" in ", 1)[1] for event in counter.events]
    assert names == ["first", "first", "first", "second", "second"]
