"""What a recording cannot see: the processes a loop starts.

A recording counts, checkpoints and collects in its own process. A loop that trains in worker processes (Hogwild),
reads batches in DataLoader workers, forks or launches a subprocess is told so: the result notes the starts, by
kind and first line, `run` prints the note, a scenario whose targets only ran in a child fails naming the children
(not only "never called"), and a comparison in which one side started processes the other did not differs.
torch.compile's own helper processes are not the loop's and are not counted.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from loop_modules import tree_with_loop

from tripwire.outside.children import ChildWatch
from tripwire.outside.compare import compare_results
from tripwire.outside.record import record, vendor_ops_note
from tripwire.outside.result import Result
from tripwire.scenario import Checkpoint, Iteration, Region, Scenario

LOOP = """
import os
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def train_step(model, opt, x, y):
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def worker(model, rounds):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(rounds):
        train_step(model, opt, torch.ones(4, 3) * i, torch.ones(4, 1))


def roots_then_exit():
    torch.sqrt(torch.ones(3))
    os._exit(0)


class Rooted(TensorDataset):
    def __getitem__(self, index):
        x, y = super().__getitem__(index)
        return torch.sqrt(x), y


def main():
    workers, mode = int(sys.argv[1]), sys.argv[2]
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    if mode == "hogwild":
        model.share_memory()
        context = torch.multiprocessing.get_context("fork")
        procs = [context.Process(target=worker, args=(model, 3)) for _ in range(workers)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join()
        assert all(proc.exitcode == 0 for proc in procs)
        return
    if mode == "exits":  # a child that computes a root and leaves through os._exit, then the training in process
        child = torch.multiprocessing.get_context(sys.argv[3]).Process(target=roots_then_exit)
        child.start()
        child.join()
        workers = 0
    data = (Rooted if mode == "roots" else TensorDataset)(torch.arange(48.0).reshape(16, 3), torch.ones(16, 1))
    context = (sys.argv[3] if len(sys.argv) > 3 else "fork") if workers else None
    loader = DataLoader(data, batch_size=4, num_workers=workers, multiprocessing_context=context)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        train_step(model, opt, x, y)


if __name__ == "__main__":
    main()
"""


def _scenario(*argv: str) -> Scenario:
    return Scenario(
        name="children",
        script="loop.py",
        argv=list(argv),
        regions=[Region("__main__:train_step", "step")],
        iteration=Iteration("__main__:train_step"),
        checkpoints=[Checkpoint("__main__:train_step", capture=("arg:model",), every=2)],
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return tree_with_loop(tmp_path, LOOP)


def _line_of(tree: Path, text: str) -> int:
    lines = (tree / "loop.py").read_text(encoding="utf-8").splitlines()
    return next(number for number, line in enumerate(lines, 1) if text in line)


def _recorded_in_a_fresh_process(scenario: Scenario, tree: Path) -> Result:
    """`record` in a process of its own, as a loop runs. In this pytest process an earlier test's `torch.compile`
    (its FakeTensorMode) makes torch's autograd engine start one thread per fake device at the next backward, and a
    forked worker's backward then fails in torch (`in_bad_autograd_fork`) or aborts on its thread pool, by timing."""
    handed = tree.parent / "handed.pickle"
    handed.write_bytes(pickle.dumps((scenario, tree)))
    code = (
        "import pickle, sys\n"
        "from pathlib import Path\n"
        "from tripwire.outside.record import record\n"
        "path = Path(sys.argv[1])\n"
        "path.write_bytes(pickle.dumps(record(*pickle.loads(path.read_bytes()))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(handed)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = pickle.loads(handed.read_bytes())
    assert isinstance(result, Result)
    return result


def test_targets_called_only_in_worker_processes_fail_naming_the_workers(tree: Path) -> None:
    """Hogwild: every train step runs in two forked workers, so none fires here; the error says where they went."""
    result = _recorded_in_a_fresh_process(_scenario("2", "hogwild"), tree)
    assert result.status == "error"
    assert "instrument never fired: __main__:train_step" in result.cause
    start = _line_of(tree, "proc.start()")
    assert f"started 2 child process(es) (2 multiprocessing (first at loop.py:{start}))" in result.cause
    assert result.children == {"multiprocessing": 2}


def test_dataloader_workers_are_noted_and_a_run_without_them_compares_different(tree: Path, tmp_path: Path) -> None:
    with_workers = record(_scenario("2", "data"), tree)
    in_process = record(_scenario("0", "data"), tree)
    assert with_workers.ok and in_process.ok, (with_workers.cause, in_process.cause)
    assert with_workers.children == {"multiprocessing": 2} and in_process.children == {}
    loop_line = _line_of(tree, "for x, y in loader:")
    assert any(
        note.startswith("the loop started 2 child process(es): 2 multiprocessing")
        and f"(first at loop.py:{loop_line})" in note
        for note in with_workers.notes
    ), with_workers.notes
    assert not any("child process" in note for note in in_process.notes)
    # the two loops compute the same steps on the same batches: only the unseen children tell them apart
    comparison = compare_results(in_process, with_workers)
    assert comparison.verdict("trajectory").status == "same"
    run = comparison.verdict("run")
    assert run.status == "differs"
    assert run.summary.startswith("child processes started: none -> 2 multiprocessing")
    assert compare_results(with_workers, record(_scenario("2", "data"), tree)).verdict("run").status == "same"
    # the field survives a save and a load; an older result without it compares as before
    saved = Result.load(with_workers.save(tmp_path / "saved"))
    assert saved.children == {"multiprocessing": 2}
    data = json.loads((tmp_path / "saved" / "result.json").read_text(encoding="utf-8"))
    del data["children"]
    (tmp_path / "saved" / "result.json").write_text(json.dumps(data), encoding="utf-8")
    older = Result.load(tmp_path / "saved")
    assert older.children is None
    assert compare_results(older, in_process).verdict("run").status == "same"


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_vendor_bound_ops_in_dataloader_workers_are_noted(tree: Path, context: str) -> None:
    """The dataset's `torch.sqrt` runs only in the two workers, forked or spawned: the vendor-bound-ops note still
    names it, with all 16 items (each worker hands its count back on exit), as the in-process run's note does."""
    line = _line_of(tree, "return torch.sqrt(x), y")
    for workers in ("2", "0"):
        result = record(_scenario(workers, "roots", context), tree)
        assert result.ok, result.cause
        assert any(f"aten.sqrt.default float32 at loop.py:{line} (16 calls)" in note for note in result.notes), (
            workers,
            result.notes,
        )


STACKED = """
import torch
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, index):
        return torch.full((3,), float(index)) ** 2


def main():
    loader = DataLoader(Squares(), batch_size=4, num_workers=2, collate_fn=torch.stack, multiprocessing_context="spawn")
    assert sum(float(batch.sum()) for batch in loader) == 420.0


if __name__ == "__main__":
    main()
"""


def test_spawned_workers_that_collate_with_torch_stack_run_recorded_as_plain(tmp_path: Path) -> None:
    """A spawned DataLoader pickles its `collate_fn` for its workers; `torch.stack` pickles by reference. While the
    recording's stand-in stood in `torch`, that pickling failed (`PicklingError`) and the loop could not run."""
    tree = tree_with_loop(tmp_path, STACKED)
    result = record(Scenario(name="stacked", script="loop.py", regions=[Region("__main__:main", "main")]), tree)
    assert result.ok, result.cause
    assert result.calls == {"__main__:main": 1} and result.children == {"multiprocessing": 2}


def test_a_child_that_never_hands_back_its_vendor_bound_ops_is_still_named(tree: Path) -> None:
    """A spawned child that ends through `os._exit` (as one still running when the recording ends) hands back no
    counts: the note still names its op and line, from its first call, and says the counts are partial."""
    result = record(_scenario("1", "exits", "spawn"), tree)
    assert result.ok, result.cause
    line = _line_of(tree, "    torch.sqrt(torch.ones(3))")
    [note] = [note for note in result.notes if note.startswith("CPU ops whose bits")]
    assert note == vendor_ops_note([f"aten.sqrt.default float32 at loop.py:{line} (1 call)"], 1)
    assert "1 child process(es) had not handed their counts back when the recording ended" in note


def test_the_cli_prints_what_the_recording_did_not_see(tree: Path, tmp_path: Path) -> None:
    scenario_file = tmp_path / "scenario.py"
    scenario_file.write_text(
        "from tripwire.scenario import Iteration, Scenario\n"
        "scenario = Scenario(name='children', script='loop.py', argv=['2', 'data'],"
        " iteration=Iteration('__main__:train_step'))\n",
        encoding="utf-8",
    )
    command = ["run", str(scenario_file), "--root", str(tree), "--out", str(tmp_path / "r")]
    done = subprocess.run(
        [sys.executable, "-m", "tripwire", *command],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "  note: the loop started 2 child process(es): 2 multiprocessing" in done.stdout


def test_forks_and_subprocesses_from_the_tree_are_counted_by_kind_and_program(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "spawner.py").write_text(
        "import os, subprocess, sys\n"
        "\n"
        "def run():\n"
        "    subprocess.run([sys.executable, '-c', 'pass'], check=True)\n"
        "    subprocess.run([sys.executable, '-c', 'pass'], check=True)\n"
        "    subprocess.run(['true'], check=True, preexec_fn=lambda: None)\n"
        "    assert os.system('cd . && ' + sys.executable + ' -c pass') == 0\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        os._exit(0)\n"
        "    os.waitpid(pid, 0)\n",
        encoding="utf-8",
    )
    result = record(Scenario(name="spawner", call="spawner:run"), tree)
    assert result.ok, result.cause
    assert result.children == {"subprocess": 3, "program": 1, "os.fork": 1}
    note = next(note for note in result.notes if "child process" in note)
    python = os.path.basename(sys.executable)
    assert f"3 subprocess (first at spawner.py:4): {python} x3" in note  # os.system's python among them
    assert "1 program (first at spawner.py:6): true" in note  # its preexec_fn forks once: one start
    assert "1 os.fork (first at spawner.py:8)" in note
    # another program (`git`, `true`) runs none of the loop's code: noted, and no difference in a comparison
    without_program = Result(**{**result.__dict__, "children": {"subprocess": 3, "os.fork": 1}})
    assert compare_results(without_program, result).verdict("run").status == "same"
    without_fork = Result(**{**result.__dict__, "children": {"subprocess": 3, "program": 1}})
    assert compare_results(without_fork, result).verdict("run").summary == (
        "child processes started: 3 subprocess -> 3 subprocess, 1 os.fork (what a child runs is not recorded: the "
        "checks below cover this process only)"
    )


def test_torch_compiles_own_helper_processes_are_not_the_loops(tmp_path: Path) -> None:
    """Inductor starts the C++ compiler and compile workers (measured: 19 processes with a cold cache, 5 warm, for
    one small function): a count that followed the cache would make two recordings of one loop differ. A start
    from inside torch's compiler is left out; the same start from the tree is counted."""
    machinery = tmp_path / "site" / "torch" / "_inductor" / "codecache.py"
    machinery.parent.mkdir(parents=True)
    source = "import subprocess, sys\ndef build():\n    subprocess.run([sys.executable, '-c', 'pass'], check=True)\n"
    namespace: dict[str, object] = {}
    exec(compile(source, str(machinery), "exec"), namespace)
    tree_namespace: dict[str, object] = {}
    exec(compile(source, str(tmp_path / "train.py"), "exec"), tree_namespace)
    with ChildWatch(tmp_path) as watch:
        namespace["build"]()  # type: ignore[operator]
    assert watch.counts() == {} and watch.note() == ""
    with ChildWatch(tmp_path) as watch:
        tree_namespace["build"]()  # type: ignore[operator]
    assert watch.counts() == {"subprocess": 1}


def test_the_watch_puts_back_what_it_wrapped() -> None:
    import multiprocessing.process

    wrapped = [
        (multiprocessing.process.BaseProcess, "start"),
        (subprocess.Popen, "_execute_child"),
        *((os, name) for name in ("system", "posix_spawn", "posix_spawnp", "execv", "execve", "spawnv", "spawnvpe")),
    ]
    before = [vars(owner)[name] for owner, name in wrapped]
    init = subprocess.Popen.__init__
    with ChildWatch(Path.cwd()):
        with ChildWatch(Path.cwd()):  # nested: wrapped once, put back when the outer ends
            pass
        assert all(vars(owner)[name] is not was for (owner, name), was in zip(wrapped, before, strict=True))
    assert [vars(owner)[name] for owner, name in wrapped] == before and subprocess.Popen.__init__ is init
    subprocess.run([sys.executable, "-c", "pass"], check=True)  # counted by no watch, and no error


def test_a_wrapped_function_pickles_as_itself() -> None:
    """A `Pool.map(os.system, commands)` pickles `os.system` by name for its workers: the wrapper must pickle to the
    function the name gives in the worker, as the builtin does."""
    import multiprocessing.process

    with ChildWatch(Path.cwd()):
        for function in (os.system, os.posix_spawn, os.execv, multiprocessing.process.BaseProcess.start):
            assert pickle.loads(pickle.dumps(function)) is function
    assert pickle.loads(pickle.dumps(os.system)) is os.system


def test_a_wrapper_replaced_meanwhile_is_left_in_place_and_counts_nothing(tmp_path: Path) -> None:
    system = os.system
    try:
        with ChildWatch(tmp_path) as watch:
            ours = os.system
            os.system = lambda command: ours(command)  # the loop wraps it again, and never puts it back
            assert os.system("true") == 0
        assert os.system is not system and os.system("true") == 0
        assert watch.counts() == {"program": 1}  # the start while the watch was active, not the one after
    finally:
        os.system = system


def test_a_recording_adds_no_audit_hook(tmp_path: Path) -> None:
    """An audit hook runs on every audited event of the process for the rest of its life (each `id()`, each frame's
    `f_code` read), and cannot be removed: the child watch used one, and CleanRL's recorded loop spent half its own
    time more in it. A recording that starts processes of every kind now adds none."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "spawner.py").write_text(
        "import multiprocessing, os, subprocess, sys\n"
        "def run():\n"
        "    subprocess.run([sys.executable, '-c', 'pass'], check=True)\n"
        "    os.system('true')\n"
        "    process = multiprocessing.get_context('fork').Process(target=print)\n"
        "    process.start()\n"
        "    process.join()\n",
        encoding="utf-8",
    )
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "added = []\n"
        "add = sys.addaudithook\n"
        "sys.addaudithook = lambda hook: (added.append(hook.__module__), add(hook))\n"
        "from tripwire.outside.record import record\n"
        "from tripwire.scenario import Scenario\n"
        f"result = record(Scenario(name='spawner', call='spawner:run'), Path({str(tree)!r}))\n"
        "assert result.ok and result.children == {'subprocess': 1, 'program': 1, 'multiprocessing': 1}, result\n"
        "print('hooks added:', [module for module in added if module.startswith('tripwire')])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "hooks added: []" in done.stdout, done.stdout


def test_a_fork_at_shutdown_is_quiet_once_the_interpreter_clears_the_module() -> None:
    """The handler `os.register_at_fork` runs before each fork cannot be removed, and at shutdown the interpreter sets
    every module global to None while finalizers may still fork: a handler reading its globals would then print
    `Exception ignored` (an audit hook did, 42 times at the end of a CI run). Simulated the way the interpreter
    clears a module."""
    script = (
        "import os, tripwire.outside.children as c\n"
        "for name in [n for n in vars(c) if not n.startswith('__')]:\n"
        "    setattr(c, name, None)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and "Exception ignored" not in done.stderr, done.stderr


FORKING_LOOP = """
import os, sys, time

import torch


def step(x):
    return (x * 2).sum()


def main():
    how, report = sys.argv[1], sys.argv[2]
    for i in range(3):
        step(torch.ones(3) * i)
    pid = os.fork()
    if pid == 0:
        torch.sqrt(torch.ones(3))
        if how == "exit":
            sys.exit(3)
        if how == "raise":
            raise ValueError("the child's own error")
        return
    _, status = os.waitpid(pid, 0)
    time.sleep(0.1)
    with open("after-the-child.txt", "w") as scratch:  # the run's scratch folder: the child must not have removed it
        scratch.write("ok")
    with open(report, "w") as out:
        out.write(str(os.waitstatus_to_exitcode(status)))
    step(torch.ones(3))


main()
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork: POSIX only")
@pytest.mark.parametrize(("how", "code"), [("return", 0), ("exit", 3), ("raise", 1)])
def test_a_forked_child_that_leaves_the_loop_ends_there_not_in_the_recording(
    tmp_path: Path, how: str, code: int
) -> None:
    """A child of `os.fork` that leaves the loop by returning, `sys.exit` or an error ends where its process would end
    without tripwire, with the same exit code. It used to run on through the recording's bookkeeping in the child:
    it removed the scratch working folder the parent was still running in, and returned a second result."""
    tree = tree_with_loop(tmp_path, FORKING_LOOP)
    report, escaped = tmp_path / "child-exit-code.txt", tmp_path / "escaped.txt"
    scenario = Scenario(name="forks", script="loop.py", argv=[how, str(report)], iteration=Iteration("__main__:step"))
    parent = os.getpid()
    try:
        result = record(scenario, tree)
    finally:
        if os.getpid() != parent:  # the child came out of record(): it must not go on running pytest
            escaped.write_text("the child returned from record()")
            os._exit(0)
    assert not escaped.exists()
    assert result.ok, result.cause
    assert report.read_text() == str(code)
    line = FORKING_LOOP.splitlines().index("        torch.sqrt(torch.ones(3))") + 1
    assert any(f"aten.sqrt.default float32 at loop.py:{line} (1 call)" in note for note in result.notes), result.notes
