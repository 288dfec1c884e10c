"""tripwire.compile: what torch.compile does is counted like syncs, named at its line, and watching changes nothing.

The compiled functions live in a module these tests write (so dynamo, `linecache` and the qualname lookup read a
real file); each test compiles afresh after `torch._dynamo.reset()`. The `eager` backend keeps them fast: dynamo
breaks, recompiles and falls back the same way whatever the backend compiles the graphs with.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tripwire.compile.counter import CompileCounter
from tripwire.compile.trace import first_reason, graph_break, guard_reason
from tripwire.sync import hot_path
from tripwire.sync.budget import SyncBudget, budget_payload, check_budget
from tripwire.sync.counter import SyncCounter
from tripwire.sync.sites import callers_by_line, lines_by_key

LOOP = """
import torch


@torch.compiler.disable
def eager_helper(x):
    return x + 1


class Policy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x, scale):
        y = self.linear(x).relu()
        if scale > 3:  # a guard on a Python number
            y = y * 2
        return y.sum()


def with_break(x):
    y = x.sin()
    print("breaks the graph")
    return y.cos()


def with_disable(x):
    return eager_helper(x.sin()).cos()


def loopy(x):
    for step in range(2):
        x = x + 1
        print(step)  # a break inside a loop: dynamo gives up on the frame
    return x


def call(fn, *args):
    return fn(*args)


def concatenated(x):
    y = torch.cat([x, x])
    print("breaks the graph")
    return torch.stack([y, y]).sum()


def chosen(x):
    return torch.where(x > 1, x, 0.0).sum()


def plus(x):
    return x + 1


def minus(x):
    return x - 1


STEP = plus


def by_step(x):
    return STEP(x)
"""


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[ModuleType]:
    path = tmp_path / "compiled_loop.py"
    path.write_text(LOOP, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("compiled_loop", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch._dynamo.reset()
    yield module
    torch._dynamo.reset()


def line_of(text: str) -> int:
    """The line of LOOP holding `text` (as dynamo and tracebacks number it)."""
    return next(number for number, line in enumerate(LOOP.splitlines(), 1) if text in line)


def compiled(fn: object) -> object:
    return torch.compile(fn, backend="eager")


def rows(counter: CompileCounter) -> Counter[tuple[str, int, str, str, str]]:
    """(kind, line, function, region, reason) of every event."""
    return Counter((e.kind, e.line, e.function, e.region, e.via) for e in counter.events)


def test_a_graph_break_is_named_at_its_line_with_its_reason_region_and_caller(loop: ModuleType, tmp_path: Path) -> None:
    fn = compiled(loop.with_break)
    with CompileCounter(root=tmp_path) as compiles, hot_path("step"):
        loop.call(fn, torch.ones(3))
    breaks = [e for e in compiles.events if e.kind == "compile:graph_break"]
    assert len(breaks) == 1
    event = breaks[0]
    assert (event.site, event.function, event.region) == (f"compiled_loop.py:{line_of('print(')}", "with_break", "step")
    assert event.via == "Failed to trace builtin operator" and event.text == 'print("breaks the graph")'
    assert event.callers[0].startswith("compiled_loop.py:") and event.callers[0].endswith(" in call")
    kinds = Counter(e.kind for e in compiles.events)
    assert kinds == {"compile:frame": 2, "compile:graph": 2, "compile:graph_break": 1}  # before and after the break
    shown = f"compiled_loop.py:{line_of('print(')} in with_break  [compile:graph_break×1]  (Failed to trace builtin"
    assert shown in compiles.format()


def test_a_call_into_a_disabled_function_counts_by_its_own_kind(loop: ModuleType, tmp_path: Path) -> None:
    fn = compiled(loop.with_disable)
    with CompileCounter(root=tmp_path) as compiles:
        fn(torch.ones(3))
    assert [(e.kind, e.site, e.via) for e in compiles.events if e.kind == "compile:disable"] == [
        ("compile:disable", f"compiled_loop.py:{line_of('eager_helper(x.sin())')}", "torch.compiler.disable")
    ]
    assert not [e for e in compiles.events if e.kind == "compile:graph_break"]


def test_a_recompile_names_the_guard_that_failed_in_the_iteration_it_happened(loop: ModuleType, tmp_path: Path) -> None:
    policy = compiled(loop.Policy())
    with CompileCounter(root=tmp_path) as compiles:
        for scale in range(6):  # crosses `scale > 3` at 4
            policy(torch.ones(2, 4), scale)
            compiles.mark_iteration()
    recompiles = [e for e in compiles.events if e.kind == "compile:recompile"]
    # 0 is specialized, then `scale` becomes dynamic, then 4 fails the guard of the `if`
    assert [(e.function, e.via) for e in recompiles] == [
        ("Policy.forward", "scale == 0"),
        ("Policy.forward", "scale <= 3"),
    ]
    # named at the line whose guard failed (dynamo says which), not at the function's `def`
    assert {e.text for e in recompiles} == {"if scale > 3:  # a guard on a Python number"}
    per_iteration = [counts.get("<outside>", 0) for counts in compiles.iteration_counts()]
    assert per_iteration[0] > 0 and per_iteration[1] > 0 and per_iteration[4] > 0  # compiled, then recompiled twice
    assert per_iteration[2:4] == [0, 0] and per_iteration[5] == 0  # the steady state compiles nothing


def test_a_frame_dynamo_gives_up_on_runs_eagerly_and_says_why(loop: ModuleType, tmp_path: Path) -> None:
    fn = compiled(loop.loopy)
    with CompileCounter(root=tmp_path) as compiles:
        fn(torch.ones(3))
    eager = [e for e in compiles.events if e.kind == "compile:eager"]
    assert [(e.function, e.via) for e in eager] == [("loopy", "Failed to trace builtin operator")]
    assert [e.site for e in compiles.events if e.kind == "compile:graph_break"] == [
        f"compiled_loop.py:{line_of('print(step)')}"
    ]


@pytest.mark.parametrize("inference", [False, True], ids=["grad", "inference_mode"])
def test_watching_changes_neither_what_dynamo_compiles_nor_where(
    loop: ModuleType, tmp_path: Path, inference: bool
) -> None:
    """The same frames, graphs, breaks and recompiles by torch's own counters, and the same events at the same
    lines, with only a compile counter, and with a sync counter (its modes active) and a region too. Under
    `inference_mode` the counter's dispatch mode runs for every eager op between graphs: its frame, which torch
    is kept from wrapping in `_disable_dynamo`, must not be compiled either."""
    from torch._dynamo.utils import counters

    def run(watch_syncs: bool) -> tuple[dict[str, int], Counter[tuple[str, int, str, str, str]]]:
        torch._dynamo.reset()
        counters.clear()
        functions = [compiled(f) for f in (loop.with_break, loop.with_disable, loop.loopy)]
        policy = compiled(loop.Policy())
        with contextlib.ExitStack() as watching:
            compiles = watching.enter_context(CompileCounter(root=tmp_path))
            if watch_syncs:
                watching.enter_context(SyncCounter(root=tmp_path))
            if inference:
                watching.enter_context(torch.inference_mode())
            for fn in functions:
                fn(torch.ones(3))
            for scale in range(6):
                with hot_path("policy") if watch_syncs else contextlib.nullcontext():
                    policy(torch.ones(2, 4), scale).item()
        seen = {
            "frames": counters["frames"]["total"],
            "frames_ok": counters["frames"]["ok"],
            "graphs": counters["stats"]["unique_graphs"],
            "graph_breaks": sum(counters["graph_break"].values()),
        }
        return seen, Counter((kind, line, fn, "", why) for kind, line, fn, _, why in rows(compiles))

    run(False)  # dynamo's first use in a process imports and compiles what it meets once (a loop's audit hook)
    alone, alone_events = run(False)
    watched, watched_events = run(True)
    assert alone == watched and alone["graph_breaks"] >= 2 and alone["graphs"] >= 4
    assert alone_events == watched_events


def test_a_recompile_tripwire_caused_is_not_the_loops_and_is_said(loop: ModuleType, tmp_path: Path) -> None:
    """Failed before: a function warmed up before the counters (compiled with torch's own `torch.cat`) met the sync
    counter's stand-in there, failed its identity guard and compiled again, and that recompile (with its frames,
    graphs and graph break) was counted as the loop's in the region, so a budget of no recompiles in a warmed-up
    step failed on tripwire's account. Without tripwire nothing compiles there: nothing is counted, a note says it."""
    fn = compiled(loop.concatenated)
    fn(torch.ones(3))  # warmed up outside any counter
    with CompileCounter(root=tmp_path) as compiles, SyncCounter(root=tmp_path), hot_path("step"):
        loop.call(fn, torch.ones(3))
    assert compiles.events == []
    notes = compiles.notes
    assert len(notes) == 2 and all(note.startswith("tripwire made dynamo compile concatenated") for note in notes)
    assert "torch.cat" in notes[0] and "torch.stack" in notes[1] and "concatenated" in compiles.format()
    # the same for the followed functions of `torch` (`torch.where`)
    fn = compiled(loop.chosen)
    fn(torch.ones(3))
    with CompileCounter(root=tmp_path) as compiles, SyncCounter(root=tmp_path):
        fn(torch.ones(3))
    assert compiles.events == [] and len(compiles.notes) == 1 and "torch.where" in compiles.notes[0], compiles.notes
    # and a function warmed up under a counter compiles nothing more under the next one
    fn = compiled(loop.concatenated)
    with SyncCounter(root=tmp_path):
        fn(torch.ones(3))
    with CompileCounter(root=tmp_path) as compiles, SyncCounter(root=tmp_path):
        fn(torch.ones(3))
    assert compiles.events == [] and compiles.notes == []


def test_the_loops_own_identity_guard_is_counted_without_its_address(loop: ModuleType, tmp_path: Path) -> None:
    """A recompile on a guard of the loop's own global (not a watched torch function) is the loop's, and its reason
    names no address, so two runs of one loop read alike."""
    fn = compiled(loop.by_step)
    fn(torch.ones(3))
    loop.STEP = loop.minus  # another function: the identity guard on its code fails
    with CompileCounter(root=tmp_path) as compiles, SyncCounter(root=tmp_path):
        fn(torch.ones(3))
    recompiles = [event.via for event in compiles.events if event.kind == "compile:recompile"]
    assert recompiles == ["___check_obj_id(G['STEP'].__code__, <id>)"]
    assert compiles.notes == []


def test_a_compile_budget_fails_on_a_new_graph_break_naming_its_line(loop: ModuleType, tmp_path: Path) -> None:
    with CompileCounter(root=tmp_path) as before:
        compiled(loop.with_disable)(torch.ones(3))
    payload = budget_payload(
        before.counts_by_region(),
        before.site_keys_by_region(),
        None,
        lines_by_key(before.site_records()),
        callers=callers_by_line(before.site_records()),
    )
    budget = SyncBudget.from_dict(payload, "compile.json")
    assert check_budget(before, budget, what="compile").ok
    torch._dynamo.reset()
    with CompileCounter(root=tmp_path) as after:
        compiled(loop.with_disable)(torch.ones(3))
        compiled(loop.with_break)(torch.ones(3))
    report = check_budget(after, budget, what="compile")
    assert not report.ok
    text = report.format()
    assert text.startswith("compile budget exceeded in 1 region(s) (compile.json):")
    assert f"NEW compiled_loop.py:{line_of('print(')} in with_break  ×1  [compile:graph_break×1]" in text, text
    assert "(reason: Failed to trace builtin operator)" in text


def test_reasons_keep_what_names_the_change_and_drop_what_names_the_machine() -> None:
    assert guard_reason("0/0: n <= 3  # if n > 3:  # guard on n  # mp/exp/f.py:11 in g (_dynamo/x.py:2 in y)") == (
        "n <= 3"
    )
    assert guard_reason('[\n"0/1: tensor \'x\' dtype mismatch. expected Float, actual Double",\n"0/0: ..."\n]') == (
        "tensor 'x' dtype mismatch. expected Float, actual Double"
    )
    assert first_reason("Encountered graph break when attempting to trace CALL:\n\nSkip calling `f` at 0x7f00") == (
        "Skip calling `f`"
    )
    assert graph_break("no location here") is None
    assert guard_reason("0/0: ___check_obj_id(L['self'].mode, 140181685753136), type=<class 'str'>") == (
        "___check_obj_id(L['self'].mode, <id>)"
    )
    assert guard_reason("0/0: ___check_obj_id(G['f'].__code__, 9), type=<code object f, file \"/a/b.py\", line 4>") == (
        "___check_obj_id(G['f'].__code__, <id>)"
    )


def test_the_trace_logger_is_left_as_found_even_with_a_handler_of_the_loop_s_own_on_it() -> None:
    """Counters set dynamo's trace logger to DEBUG while they listen; the level before the first is back after the last,
    in whichever order they end, though other handlers stay on it (torch's own, the loop's), which would otherwise go
    on receiving, and dynamo go on building, the whole trace after the recording."""
    import logging

    from tripwire.compile.trace import TRACE_LOGGER, TraceReader

    logger = logging.getLogger(TRACE_LOGGER)
    own, level = logging.NullHandler(), logger.level
    logger.addHandler(own)
    try:
        logger.setLevel(logging.WARNING)
        with CompileCounter():
            assert logger.level == logging.DEBUG
        assert logger.level == logging.WARNING
        first, second = CompileCounter(), CompileCounter()
        first.__enter__()
        second.__enter__()
        first.__exit__(None, None, None)  # out of order: the second still listens
        assert logger.level == logging.DEBUG
        second.__exit__(None, None, None)
        assert logger.level == logging.WARNING and own in logger.handlers
        assert not [handler for handler in logger.handlers if isinstance(handler, TraceReader)]
    finally:
        logger.removeHandler(own)
        logger.setLevel(level)


@pytest.mark.parametrize("compiling", [False, True], ids=["eager", "compiling"])
def test_a_stand_in_counts_nothing_while_torch_compiles_or_exports_a_frame(compiling: bool) -> None:
    """torch sets `torch.compiler._is_compiling_flag` while dynamo compiles a frame and while torch.export traces
    one non-strict (running its code): a stand-in then runs torch's own call and counts nothing, as
    `torch.compiler.is_compiling()` would say; run eagerly, the same read is a sync."""
    x = torch.arange(4.0)
    with SyncCounter() as counter:
        torch.compiler._is_compiling_flag = compiling
        try:
            value = x.sum().item()
        finally:
            torch.compiler._is_compiling_flag = False
    assert value == 6.0
    assert [event.kind for event in counter.events] == ([] if compiling else ["item"])
