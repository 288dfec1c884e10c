"""tripwire on a loop that compiles itself: breaks and recompiles named from outside, and watching changes nothing.

The loop (`loops/compiled_script.py`) compiles its policy step, its GAE (fullgraph) and its update as LeanRL's
`ppo_continuous_action_torchcompile.py` does; each test copies it into a folder of its own, a variant carries one
injected change, and the scenario (`loops/compiled_script_scenario.py`) places regions on two of the functions the loop
compiles. The `eager` backend keeps the tests fast; dynamo breaks and recompiles the same way whatever the backend.
"""

from __future__ import annotations

import contextlib
import runpy
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from tripwire.compile.counter import CompileCounter
from tripwire.outside.commands import budget_main
from tripwire.outside.compare import compare_results
from tripwire.outside.record import record
from tripwire.outside.result import Result
from tripwire.scenario import load_scenario
from tripwire.sync.sites import SiteRecord

LOOPS = Path(__file__).parents[1] / "loops"
SCRIPT = LOOPS / "compiled_script.py"
SCENARIO = load_scenario(LOOPS / "compiled_script_scenario.py")

# A log line inside the compiled policy step: a graph break, and no sync, no value changed.
BREAK = ("        logits = self.actor(x)\n", "        logits = self.actor(x)\n        print('policy step')\n")
# A discount that changes every iteration, passed to the compiled GAE as a Python float: it recompiles.
RECOMPILE = (
    "gae(next_value, next_done, rewards, dones, values, args.gamma, args.gae_lambda)",
    "gae(next_value, next_done, rewards, dones, values, args.gamma - 0.001 * iteration, args.gae_lambda)",
)


def checkout(folder: Path, change: tuple[str, str] | None = None) -> Path:
    folder.mkdir(parents=True)
    text = SCRIPT.read_text(encoding="utf-8")
    if change is not None:
        assert change[0] in text, change
        text = text.replace(*change)
    (folder / SCRIPT.name).write_text(text, encoding="utf-8")
    return folder


def run(folder: Path) -> Result:
    torch._dynamo.reset()
    result = record(SCENARIO, folder)
    assert result.status == "ok", result.cause
    return result


def line_of(folder: Path, text: str) -> int:
    lines = (folder / SCRIPT.name).read_text(encoding="utf-8").splitlines()
    return next(number for number, line in enumerate(lines, 1) if text in line)


def torch_counts() -> dict[str, int]:
    """Torch's own counters since the last `counters.clear()`: not "frames", which also counts the frames dynamo
    looks at and skips."""
    from torch._dynamo.utils import counters

    return {
        "ops in graphs": counters["stats"]["calls_captured"],
        "graphs": counters["stats"]["unique_graphs"],
        "breaks": sum(counters["graph_break"].values()),
    }


def alone(folder: Path, script: str, argv: Sequence[str]) -> tuple[CompileCounter, dict[str, int]]:
    """The loop run alone as `__main__` (dynamo reset first): what a `CompileCounter` saw, and torch's counters."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    saved_argv = sys.argv
    sys.argv = [str(folder / script), *argv]
    try:
        with CompileCounter(root=folder) as seen, contextlib.redirect_stdout(None):
            runpy.run_path(str(folder / script), run_name="__main__")
    finally:
        sys.argv = saved_argv
    return seen, torch_counts()


def lines(records: Sequence[SiteRecord]) -> Counter[tuple[str, int, str, str]]:
    """Each compilation event by kind, line, function and reason, as often as it happened."""
    return Counter((r.kind, r.line, r.function, r.via) for r in records for _ in range(r.count))


@pytest.fixture(scope="module")
def base_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return checkout(tmp_path_factory.mktemp("base") / "checkout")


@pytest.fixture(scope="module")
def base(base_folder: Path) -> Result:
    return run(base_folder)


def test_what_the_loop_compiles_is_recorded_per_region_and_line(base: Result, base_folder: Path) -> None:
    assert base.compile is not None
    by_kind = Counter()
    for record_ in base.compile.records:
        by_kind[record_.kind] += record_.count
    assert by_kind["compile:frame"] >= 3 and by_kind["compile:graph"] >= 3  # policy, GAE, the update
    assert base.compile.counts_by_region()["policy"] > 0  # the region placed on the compiled policy step
    assert base.calls["__main__:Agent.get_action_and_value"] == 64  # the region ran at every compiled call
    breaks = {(r.line, r.via) for r in base.compile.records if r.kind == "compile:graph_break"}
    assert (line_of(base_folder, "loss.backward()"), "Unsupported Tensor.backward() call") in breaks
    steady = base.compile.iterations[1:]
    assert steady and all(not counts for counts in steady)  # everything compiles in the first iteration


def test_watching_from_outside_compiles_what_the_loop_compiles_alone(base: Result, base_folder: Path) -> None:
    """The same graphs, ops in them and breaks by torch's own counters, and the same frames, graphs, breaks and
    recompiles at the same lines, as the loop run alone (only dynamo's structured trace read): regions on compiled
    functions and the sync counter's modes change nothing."""
    from torch._dynamo.utils import counters

    seen_alone, alone_counts = alone(base_folder, SCRIPT.name, SCENARIO.argv)
    torch._dynamo.reset()
    counters.clear()
    watched = run(base_folder)
    assert torch_counts() == alone_counts and alone_counts["breaks"] >= 2
    assert watched.compile is not None
    assert lines(watched.compile.records) == lines(seen_alone.site_records())


def test_an_unchanged_loop_compares_identical(base: Result, tmp_path: Path) -> None:
    comparison = compare_results(base, run(checkout(tmp_path / "again")))
    assert comparison.ok, comparison.format()
    assert comparison.verdict("compile").summary.startswith("identical (")


def test_a_graph_break_added_in_a_compiled_function_is_named_at_its_line(base: Result, tmp_path: Path) -> None:
    folder = checkout(tmp_path / "broken", BREAK)
    comparison = compare_results(base, run(folder))
    verdict = comparison.verdict("compile")
    assert verdict.status == "differs" and verdict.kind == "graph break", comparison.format()
    line = line_of(folder, "print('policy step')")
    new = [d for d in verdict.details if d.startswith("NEW") and "compile:graph_break" in d]
    named = f"compiled_script.py:{line} in Agent.get_action_and_value"
    shown = "[compile:graph_break]  `print('policy step')`  (reason: Failed to trace builtin operator)"
    # met where the loop compiles the policy step, and where the compiled update inlines it
    assert {d.split()[1] for d in new} == {"'policy'", "'update'"}, new
    assert all(named in d and d.endswith(shown) for d in new), new
    assert comparison.verdict("trajectory").status == "same"  # no value changed: only the compile check sees it
    assert comparison.verdict("syncs").status == "same"


def test_a_python_number_that_changes_per_iteration_recompiles_by_name(base: Result, tmp_path: Path) -> None:
    folder = checkout(tmp_path / "recompiling", RECOMPILE)
    result = run(folder)
    comparison = compare_results(base, result)
    verdict = comparison.verdict("compile")
    assert verdict.status == "differs" and verdict.kind == "recompile", comparison.format()
    assert result.compile is not None
    recompiles = [r for r in result.compile.records if r.kind == "compile:recompile"]
    assert recompiles and all(r.function == "gae" for r in recompiles)
    assert any("gamma" in r.via for r in recompiles), [r.via for r in recompiles]
    assert any(counts for counts in result.compile.iterations[1:])  # it recompiles in later iterations too


def test_a_budget_written_from_the_base_fails_on_the_graph_break(
    base_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch._dynamo.reset()
    base_result = record(SCENARIO, base_folder)
    base_result.save(tmp_path / "base")
    assert budget_main(["write", str(tmp_path / "base"), str(tmp_path / "budget.json")]) == 0
    assert budget_main(["check", str(tmp_path / "base"), str(tmp_path / "budget.json")]) == 0
    broken = checkout(tmp_path / "broken", BREAK)
    run(broken).save(tmp_path / "head")
    capsys.readouterr()
    assert budget_main(["check", str(tmp_path / "head"), str(tmp_path / "budget.json")]) == 1
    out = capsys.readouterr().out
    assert "sync budget ok" in out and "compile budget exceeded in 2 region(s)" in out, out
    assert f"NEW compiled_script.py:{line_of(broken, 'print(')} in Agent.get_action_and_value" in out


HELD_LOOP = """
import torch


class Held:  # the loop's own object, with a state_dict whose body runs a generator
    def __init__(self, weights):
        self.weights = weights

    def state_dict(self):
        return {"weights": self.weights, "norms": list(float(w.norm()) for w in [self.weights])}


def step(held, x):
    return held.weights * x


step = torch.compile(step, fullgraph=True, backend="eager")

if __name__ == "__main__":
    held = Held(torch.ones(3))
    for i in range(3):
        held.weights = step(held, torch.full((3,), 1.0 + i))
"""


def test_a_checkpoint_on_a_fullgraph_function_compiles_nothing_of_its_own(tmp_path: Path) -> None:
    """The checkpoint digests the call's arguments inside the stand-in the loop compiled, while dynamo's frame
    callback is still set: the loop's `state_dict` (and its generator) would be compiled there, a compile the loop
    does not have, and under `fullgraph=True` a generator frame raised "Attempt to trace generator" (torch 2.12,
    and 2.14 once the digest read a signature). The bookkeeping runs with the callback off: the run is ok, and it
    compiles what the loop alone compiles."""
    from torch._dynamo.utils import counters

    from tripwire.scenario import Checkpoint, Scenario

    (tmp_path / "held.py").write_text(HELD_LOOP, encoding="utf-8")
    seen = []
    for checkpoints in ([], [Checkpoint("__main__:step", capture=("arg:held", "return"))]):
        torch._dynamo.reset()
        counters.clear()
        result = record(Scenario(name="held", script="held.py", checkpoints=checkpoints), tmp_path)
        assert result.status == "ok", result.cause
        assert result.compile is not None
        seen.append((counters["stats"]["unique_graphs"], counters["stats"]["calls_captured"], result.compile.total))
    assert seen[0] == seen[1] and seen[0][0] == 1
    assert len(result.trajectory.checkpoints) == 3


# The update reads its tensors through an object of the loop's own (LeanRL's TensorDict batches): dynamo's quick look
# at a frame's arguments finds no tensor in it, so only `torch.compile`'s mark on the function's code has the frame
# compiled rather than skipped.
BATCHED_LOOP = """
import torch


class Batch:
    def __init__(self, x):
        self.x = x


class Policy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def forward(self, x):
        return self.layer(x)


policy = Policy()
optimizer = torch.optim.SGD(policy.parameters(), lr=0.1)


def update(batch):
    optimizer.zero_grad()
    loss = policy(batch.x).pow(2).mean()
    loss.backward()
    optimizer.step()


update = torch.compile(update, backend="eager")

if __name__ == "__main__":
    torch.manual_seed(0)
    for _ in range(3):
        update(Batch(torch.randn(8, 4)))
"""


# The loop compiles a module whose forward breaks its graph (a print); a region stands in front of that forward.
MODULE_LOOP = """
import torch


class Policy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 8)
        self.b = torch.nn.Linear(8, 1)

    def forward(self, x):
        h = self.a(x).relu()
        print("step")
        return self.b(h)


if __name__ == "__main__":
    torch.manual_seed(0)
    policy = torch.compile(Policy(), backend="eager")
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.1)
    for _ in range(3):
        loss = policy(torch.randn(8, 4)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


# The loop disables compiling a helper's own frame, not what it calls (`torch.compiler.disable(f, recursive=False)`),
# of a function and of a module's bound method: the helper's print breaks no graph, and what it calls compiles as a
# frame of its own.
NONRECURSIVE_LOOP = """
import torch


def inner(y):
    return y.sin() + 1


def helper(x):
    print("helper")
    return inner(x * 2)


helper = torch.compiler.disable(helper, recursive=False)


class Policy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)

    def post(self, h):
        print("post")
        return self.inner(h)

    def inner(self, h):
        return h.tanh() * 2

    def forward(self, x):
        return self.post(self.a(x))


def step(x):
    return helper(x + 1) * 3


step = torch.compile(step, backend="eager")

if __name__ == "__main__":
    policy = Policy()
    policy.post = torch.compiler.disable(policy.post, recursive=False)
    policy = torch.compile(policy, backend="eager")
    for _ in range(3):
        step(torch.randn(4))
        policy(torch.randn(2, 4))
"""


# A method the loop caches (`functools.lru_cache`, whose wrapper binds like a function) called in compiled code and
# out of it: its stand-in binds as it does and has its `cache_info`, and is no object with a `__get__` of its own,
# which dynamo cannot trace (it broke the graph there: "unsupported function.__get__ call").
CACHED_LOOP = """
import functools

import torch


class Table:
    @functools.lru_cache(maxsize=None)
    def scale(self, k):
        return float(k) * 0.5


table = Table()


def step(x):
    y = x * table.scale(3)
    print("step")
    return y.sin()


step = torch.compile(step, backend="eager")

if __name__ == "__main__":
    for _ in range(3):
        step(torch.randn(4)) * table.scale(2)
    print(Table.scale.cache_info(), table.scale.cache_info())
"""


# A generator function the compiled code iterates (dynamo traces generators into the graph) and eager code too: its
# stand-in is a generator function, which the trace passes through to the original as a plain stand-in does.
GENERATOR_LOOP = """
import torch


def pieces(x):
    yield x * 2
    yield x + 1


def step(x):
    y = sum(pieces(x))
    print("step")
    return y.sin()


step = torch.compile(step, backend="eager")

if __name__ == "__main__":
    for _ in range(3):
        step(torch.randn(4)) * sum(pieces(torch.ones(4)))
"""


@pytest.mark.parametrize(
    ("loop", "target"),
    [
        (GENERATOR_LOOP, "__main__:pieces"),
        (BATCHED_LOOP, "__main__:update"),
        (MODULE_LOOP, "__main__:Policy.forward"),
        (NONRECURSIVE_LOOP, "__main__:helper"),
        (NONRECURSIVE_LOOP, "__main__:Policy.post"),
        (CACHED_LOOP, "__main__:Table.scale"),
    ],
    ids=[
        "generator",
        "function-of-a-batch-object",
        "compiled-module",
        "disabled-function",
        "disabled-method",
        "cached-method",
    ],
)
def test_a_region_on_what_the_loop_compiles_compiles_what_the_loop_alone_compiles(
    loop: str, target: str, tmp_path: Path
) -> None:
    """A region on a function the loop compiles, or on the forward of a module it compiles, is a stand-in the loop
    compiles in the original's place, and dynamo judged it by tripwire's file. `torch.compile(update)` marked the
    stand-in's code, not `update`'s, to be compiled whatever its frame holds: dynamo looked at `update`'s frame,
    found no tensor in its arguments (a batch object of the loop's) and ran it eagerly (LeanRL TD3's `update_pol`, a
    TensorDict, lost its graph break and its frame so). `torch.compile(module)` asked whether `forward` is a skipped
    file, was told yes and compiled the module through a wrapper frame: one break and one frame more than the loop
    alone. `torch.compiler.disable(helper, recursive=False)` wrapped the stand-in, and dynamo, which skips the frame
    its wrapper calls, compiled the original behind it, breaks and all. Compiled as without tripwire now: the same
    graphs, ops, breaks and lines, and the region runs at each call."""
    from torch._dynamo.utils import counters

    from tripwire.scenario import Region, Scenario

    (tmp_path / "loop.py").write_text(loop, encoding="utf-8")
    seen_alone, alone_counts = alone(tmp_path, "loop.py", [])
    assert alone_counts["breaks"] >= 1  # the loop alone breaks its compiled graph
    torch._dynamo.reset()
    counters.clear()
    with contextlib.redirect_stdout(None):
        result = record(Scenario(name="compiled", script="loop.py", regions=[Region(target, "region")]), tmp_path)
    assert result.status == "ok", result.cause
    assert torch_counts() == alone_counts
    assert result.compile is not None and result.calls[target] == 3
    assert lines(result.compile.records) == lines(seen_alone.site_records())


def test_dynamo_asked_of_a_stand_in_answers_for_the_original_and_of_anything_else_as_it_is() -> None:
    """`trace_rules.check` as tripwire leaves it: a stand-in (function or bound method) is asked as its original, a
    code object (a frame dynamo meets, the stand-in's own included) and any other object as given, and an object
    whose attributes raise is handed to dynamo untouched rather than raising tripwire's fault into the compile."""
    from tripwire.outside.stand import stand_in
    from tripwire.sync.dynamo import _originals_checked

    class Policy:
        def forward(self, x: int) -> int:
            return x

    class Hostile:
        def __getattr__(self, name: str) -> object:
            raise RuntimeError(f"no {name}")

    asked: list[object] = []
    check = _originals_checked(lambda obj, *args, **kwargs: asked.append(obj) or False)
    stand = stand_in(Policy.forward, lambda original, args, kwargs: original(*args, **kwargs))
    policy, hostile = Policy(), Hostile()
    check(stand)
    check(stand.__get__(policy))
    check(stand.__code__)
    check(hostile)
    assert asked[0] is Policy.forward
    assert asked[1] == policy.forward and asked[1].__self__ is policy
    assert asked[2] is stand.__code__ and asked[3] is hostile
