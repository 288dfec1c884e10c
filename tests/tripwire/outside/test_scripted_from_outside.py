"""TorchScript from outside: a scripted function runs in the JIT's interpreter, past every Python stand-in, so what
it syncs is counted only where it reaches a kernel (`.item()` as `implicit:_local_scalar_dense`, data-dependent ops),
at the line that calls the scripted function and in its regions. docs/guardrails.md lists what stays unseen."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from tripwire.outside.record import record
from tripwire.scenario import Region, Scenario

LOOP = """
import torch


@torch.jit.script
def scripted(x: torch.Tensor) -> float:
    kept = torch.nonzero(x > 0).shape[0]
    return x.sum().item() + kept


def main():
    x = torch.arange(4.0)
    for _ in range(3):
        scripted(x)
"""


def test_syncs_a_scripted_function_makes_at_kernels_are_counted_at_its_callers_line(tmp_path: Path) -> None:
    (tmp_path / "loop.py").write_text(LOOP, encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script is deprecated, and still in use
        result = record(Scenario(name="js", call="loop:main", regions=[Region("loop:scripted", "step")]), tmp_path)
    assert result.ok, result.cause
    rows = sorted((r.region, r.kind, r.text, r.count) for r in result.syncs.records)
    assert rows == [
        ("step", "implicit:_local_scalar_dense", "scripted(x)", 3),
        ("step", "implicit:nonzero", "scripted(x)", 3),
    ]


SCRIPT_LOOP = """
import torch


@torch.jit.script
def padded(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([x, torch.zeros(2)]) + torch.arange(5.0)


def main():
    x = torch.ones(3)
    for _ in range(3):
        x = padded(x)[:3]
    print("result", x.tolist())


main()
"""


def test_a_script_that_scripts_a_torch_function_at_its_top_level_records_as_it_runs(tmp_path: Path) -> None:
    """A script's own top level runs as `__main__`, not as an import, so the recording's stand-ins are in `torch`
    when its `@torch.jit.script` compiles: `torch.cat`, `torch.zeros` and `torch.arange` there made TorchScript refuse
    the function (a stand-in takes `*args`), and the loop failed only when recorded."""
    (tmp_path / "train.py").write_text(SCRIPT_LOOP, encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        result = record(Scenario(name="js", script="train.py", regions=[Region("__main__:main", "main")]), tmp_path)
    assert result.ok, result.cause
    assert result.calls == {"__main__:main": 1}, result.calls
    rows = {(r.kind, r.text, r.count) for r in result.syncs.records if r.region == "main"}
    # the JIT's own passes compare the constants it folded (`torch.zeros(2)`, `torch.arange(5.0)`) with `aten::equal`
    # in the first calls (how many, the torch version's executor decides): counted at the calling line, as when the
    # function is scripted at an import
    assert ("tolist", 'print("result", x.tolist())', 1) in rows
    assert {(kind, text) for kind, text, _ in rows} <= {
        ("tolist", 'print("result", x.tolist())'),
        ("implicit:equal", "x = padded(x)[:3]"),
    }


TRACED_LOOP = """
import os

import torch


def step(x):
    return (x * 2 + 1).tanh() - 0.5


# traced with the sanity check: the graph and the function run again on the example, and a second trace is compared
traced = torch.jit.trace(step, torch.linspace(-1.0, 1.0, 4))


def main():
    x = torch.arange(4.0)
    for _ in range(3):
        x = traced(x)
    torch.save(x, os.path.join(os.path.dirname(__file__), "out.pt"))


if __name__ == "__main__":
    main()
"""


def test_a_loop_that_traces_a_function_runs_its_graph_as_it_does_alone(tmp_path: Path) -> None:
    """A traced graph holds the Python numbers it met (`x * 2`) as constants marked wrapped numbers, and TorchScript's
    passes over it compare constants with `aten::equal`, where the sync counter has a kernel. torch hands a Python
    kernel a wrapped number as the number, and the kernel's pass-through gave it to `aten::equal` as such, which
    refused it: every loop running a traced graph failed when recorded, with or without an instrument on it
    ("aten::equal() Expected a value of type 'Tensor'"), a crash at the loop's line. Now the graph runs, and it
    returns what it returns alone."""
    import runpy

    import torch

    (tmp_path / "loop.py").write_text(TRACED_LOOP, encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.trace is deprecated, and still in use
        alone = tmp_path / "alone"
        alone.mkdir()
        (alone / "loop.py").write_text(TRACED_LOOP, encoding="utf-8")
        runpy.run_path(str(alone / "loop.py"), run_name="__main__")
        for regions in ([], [Region("__main__:step", "step")]):
            result = record(Scenario(name="jt", script="loop.py", regions=regions), tmp_path)
            assert result.ok, result.cause
            assert torch.equal(torch.load(tmp_path / "out.pt"), torch.load(alone / "out.pt"))
    assert result.calls == {"__main__:step": 3}  # the trace, the check's second trace and its run of the function


SCRIPTED_MODULE_LOOP = """
import json
import os
import re

import torch
import torch.nn.functional as F
from torch import nn


def scaled(h: torch.Tensor) -> torch.Tensor:
    return h * 0.5 + 1


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.b = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(scaled(F.relu(self.a(x)))).tanh()


def main():
    torch.manual_seed(0)
    policy = Policy()
    x = torch.randn(3, 4)
    eager = policy(x)
    scripted = torch.jit.script(policy)  # as a loop exports its policy
    torch.save(torch.stack([eager, scripted(x)]), os.path.join(os.path.dirname(__file__), "out.pt"))
    # the files its graph's source ranges name, as an error raised in it names them
    files = sorted({os.path.basename(path) for path in re.findall(r"# (\\S+?):\\d+:\\d+", str(scripted.forward.graph))})
    with open(os.path.join(os.path.dirname(__file__), "files.json"), "w") as file:
        json.dump(files, file)


if __name__ == "__main__":
    main()
"""


def test_a_module_the_loop_scripts_with_a_region_on_its_forward_scripts_as_it_does_alone(tmp_path: Path) -> None:
    """TorchScript compiles the forward's source (`inspect` unwraps the region's stand-in) but looks its names up in
    the namespace of the function it is given: the stand-in's, tripwire's module, where `F` and `scaled` are not.
    `torch.jit.script(policy)` with a region on `Policy.forward` failed there ("undefined value F"), a crash at the
    loop's line. A stand-in reads the original's namespace now: the module scripts, and eager and scripted policies
    return what they return alone."""
    import runpy

    import torch

    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "loop.py").write_text(SCRIPTED_MODULE_LOOP, encoding="utf-8")
    (tmp_path / "loop.py").write_text(SCRIPTED_MODULE_LOOP, encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script is deprecated, and still in use
        runpy.run_path(str(alone / "loop.py"), run_name="__main__")
        scenario = Scenario(name="js", script="loop.py", regions=[Region("__main__:Policy.forward", "policy")])
        reader = torch._sources.get_source_lines_and_file
        result = record(scenario, tmp_path)
        assert torch._sources.get_source_lines_and_file is reader  # TorchScript's source reader put back
    assert result.ok, result.cause
    assert result.calls == {"__main__:Policy.forward": 1}  # the eager call; the scripted one runs the JIT's graph
    assert torch.equal(torch.load(tmp_path / "out.pt"), torch.load(alone / "out.pt"))
    # TorchScript names the file of the source it compiled, the loop's, not tripwire's stand.py
    files = json.loads((tmp_path / "files.json").read_text(encoding="utf-8"))
    assert "loop.py" in files and files == json.loads((alone / "files.json").read_text(encoding="utf-8"))


CHECKPOINTED_TRACE_LOOP = """
import json
import os
import warnings

import torch


def step(x, w):
    return (x @ w).relu() * 2 + 1


if __name__ == "__main__":
    torch.manual_seed(0)
    w = torch.randn(4, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traced = torch.jit.trace(step, (torch.randn(2, 4), w))
    shown = sorted({str(c.message) for c in caught if issubclass(c.category, torch.jit.TracerWarning)})
    with open(os.path.join(os.path.dirname(__file__), "warnings.json"), "w") as file:
        json.dump(shown, file)
    torch.save(traced(torch.ones(2, 4), w), os.path.join(os.path.dirname(__file__), "out.pt"))
"""


def test_a_checkpoint_on_a_traced_function_reads_its_tensors_unseen_by_the_tracer(tmp_path: Path) -> None:
    """`torch.jit.trace` runs the function while its tracer records every tensor op and warns of every read that
    makes a trace data-dependent. A checkpoint's digest reads the call's tensors inside the stand-in, while the tracer
    records, and the loop was warned four times (`TracerWarning`s of a NumPy array, a Python number, a boolean and
    an iteration) of reads that were tripwire's. The bookkeeping runs with the tracer off now: the loop is warned of
    what it is warned of alone (nothing), its graph returns the same, and each of the 3 calls is checkpointed."""
    import json
    import runpy

    import torch

    from tripwire.scenario import Checkpoint

    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "loop.py").write_text(CHECKPOINTED_TRACE_LOOP, encoding="utf-8")
    (tmp_path / "loop.py").write_text(CHECKPOINTED_TRACE_LOOP, encoding="utf-8")
    runpy.run_path(str(alone / "loop.py"), run_name="__main__")
    checkpoint = Checkpoint("__main__:step", capture=("arg:x", "return"))
    result = record(Scenario(name="jt", script="loop.py", checkpoints=[checkpoint]), tmp_path)
    assert result.ok, result.cause
    assert len(result.trajectory.checkpoints) == 3  # the trace, the check's second trace and its run of the function
    seen = json.loads((tmp_path / "warnings.json").read_text(encoding="utf-8"))
    assert seen == json.loads((alone / "warnings.json").read_text(encoding="utf-8")) == []
    assert torch.equal(torch.load(tmp_path / "out.pt"), torch.load(alone / "out.pt"))
