"""`VendorBoundOps`: which CPU ops it notes, where it says they were called, on which threads, and that it changes no
result and leaves torch's dispatch table as it found it."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tripwire.bitwise import vendor_ops
from tripwire.bitwise.vendor_ops import VENDOR_BOUND, VendorBoundOps, vendor_bound

HERE = Path(__file__).name


def test_listed_ops_are_noted_with_the_callers_line() -> None:
    x = torch.rand(64) + 0.5
    with VendorBoundOps() as seen:
        torch.sqrt(x)
        x.clone().sqrt_()
        torch._foreach_sqrt([x, x])
        x.pow(0.5)
        torch.log10(x.double())
        torch.log(x.double())
        torch.atan(x)
        torch.sqrt(torch.arange(64))  # an integer input: computed in float32, through the same kernel
        torch.sqrt(x, out=torch.empty_like(x))
    ops = {op for op, _, _ in seen.calls}
    assert ops == {
        "aten.sqrt.default",
        "aten.sqrt_.default",
        "aten.sqrt.out",
        "aten.pow.Tensor_Scalar",
        "aten.log10.default",
        "aten.log.default",
        "aten.atan.default",
    }
    assert all(caller.rsplit(":", 1)[0].endswith(HERE) for _, _, caller in seen.calls)
    first = test_listed_ops_are_noted_with_the_callers_line.__code__.co_firstlineno
    assert any(caller.endswith(f"{HERE}:{first + 3}") for op, _, caller in seen.calls if op == "aten.sqrt.default")
    # `_foreach_sqrt` has no CPU kernel of its own: its per-tensor loop's roots are noted at the caller's line
    foreach = [n for (op, _, at), n in seen.calls.items() if op == "aten.sqrt.default" and at.endswith(f":{first + 5}")]
    assert foreach == [2]
    assert ("aten.sqrt.default", "float32") in {(op, dtype) for op, dtype, _ in seen.calls}
    assert seen.lines()[0].startswith("aten.")


def test_portable_spellings_are_not_noted() -> None:
    x = torch.rand(64) + 0.5
    with VendorBoundOps() as seen:
        torch.rsqrt(x)
        x.pow(2)
        x.pow(-0.5)
        torch.log(x)  # float32 log: its kernel uses no approximate instruction on the pinned branches
        torch.tanh(x)
        torch.exp(x)
        torch.linalg.vector_norm(x)
    assert not seen.calls, seen.lines()


@pytest.mark.parametrize("name", sorted(VENDOR_BOUND))
def test_the_table_is_read_per_dtype(name: str) -> None:
    for dtype in VENDOR_BOUND[name]:
        assert vendor_bound(name, dtype) and vendor_bound(f"{name}_", dtype) and vendor_bound(f"_foreach_{name}", dtype)
    assert not vendor_bound(name, torch.int64) and not vendor_bound(name, torch.bfloat16)
    assert vendor_bound("pow", torch.float32, 0.5) and not vendor_bound("pow", torch.float32, 2.0)


def test_the_mode_changes_no_result() -> None:
    x = torch.rand(4096) * 10
    plain = [torch.sqrt(x), torch.tan(x), torch.log2(x + 1)]
    with VendorBoundOps():
        watched = [torch.sqrt(x), torch.tan(x), torch.log2(x + 1)]
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(plain, watched))


def _one_root() -> None:
    torch.sqrt(torch.rand(8) + 1)


def test_ops_on_the_loops_threads_and_thread_pools_are_noted() -> None:
    """A dispatch mode is thread-local: the first form of this watch missed a root taken on a worker thread."""
    with VendorBoundOps(Path(__file__).parent) as seen:
        worker = threading.Thread(target=_one_root)
        worker.start()
        worker.join()
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda _: _one_root(), range(3)))
    line = f"{HERE}:{_one_root.__code__.co_firstlineno + 1}"
    assert seen.calls == {("aten.sqrt.default", "float32", line): 4}, seen.lines()


def test_a_pool_started_before_the_watch_is_watched_too() -> None:
    with ThreadPoolExecutor(1) as pool:
        pool.submit(torch.rand, 1).result()  # the pool's thread is running before the watch starts
        with VendorBoundOps() as seen:
            pool.submit(_one_root).result()
    assert sum(seen.calls.values()) == 1, seen.lines()


def test_an_op_called_from_inside_a_noted_op_is_noted_once_as_the_outer_op() -> None:
    x = torch.rand(64) + 0.5
    with VendorBoundOps() as seen:
        x.pow(0.5)
        torch._foreach_sqrt_([x.clone(), x.clone(), x.clone()])
    assert sorted((op, count) for (op, _, _), count in seen.calls.items()) == [
        ("aten.pow.Tensor_Scalar", 1),
        ("aten.sqrt_.default", 3),
    ]


def test_watches_nest_and_the_dispatch_table_is_left_as_found() -> None:
    before = {name: torch._C._dispatch_dump(name) for name in vendor_ops._watched_overloads()}
    assert before and "aten::sqrt" in before and "aten::pow.Tensor_Scalar" in before
    other = torch._C._dispatch_dump("aten::add.Tensor")
    x = torch.rand(16) + 1
    with VendorBoundOps() as outer:
        assert torch._C._dispatch_dump("aten::sqrt") != before["aten::sqrt"]  # the watch's kernel is in place
        assert torch._C._dispatch_dump("aten::add.Tensor") == other  # an op it does not list is untouched
        with VendorBoundOps() as inner:
            torch.sqrt(x)
        torch.tan(x)
    torch.sqrt(x)  # after both: noted by neither
    assert sorted(op for op, _, _ in inner.calls) == ["aten.sqrt.default"]
    assert sorted(op for op, _, _ in outer.calls) == ["aten.sqrt.default", "aten.tan.default"]
    assert {name: torch._C._dispatch_dump(name) for name in before} == before


def test_a_fault_in_the_watch_is_kept_as_its_own_and_the_op_still_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(root: Path) -> str:
        raise RuntimeError("injected")

    monkeypatch.setattr(vendor_ops, "caller_line", broken)
    x = torch.rand(32) + 1
    with VendorBoundOps() as seen:
        root = torch.sqrt(x)
    assert torch.equal(root, torch.sqrt(x)) and not seen.calls
    assert seen.faults == ["aten.sqrt.default: RuntimeError: injected"]


def test_the_watch_ends_even_when_the_block_raises() -> None:
    before = torch._C._dispatch_dump("aten::sqrt")
    with pytest.raises(ValueError), VendorBoundOps():
        raise ValueError("the loop's own error")
    assert torch._C._dispatch_dump("aten::sqrt") == before and not vendor_ops._WATCH.active


class _Roots(torch.utils.data.Dataset[torch.Tensor]):
    """A dataset whose items take a vendor-bound root: computed in the DataLoader's worker processes."""

    def __len__(self) -> int:
        return 12

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.sqrt(torch.full((4,), float(index + 1)))


def _two_roots() -> None:
    torch.sqrt(torch.ones(3))
    torch.sqrt(torch.ones(3))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forked children: POSIX only")
def test_ops_in_forked_children_are_added_in_and_the_parent_s_are_not_counted_twice() -> None:
    first = test_ops_in_forked_children_are_added_in_and_the_parent_s_are_not_counted_twice.__code__.co_firstlineno
    fork, parent = multiprocessing.get_context("fork"), os.getpid()
    try:
        with VendorBoundOps() as seen:
            spool = Path(seen.spool)
            torch.sqrt(torch.ones(2))  # the parent's, before the children: counted once, not once per child
            loader = torch.utils.data.DataLoader(_Roots(), batch_size=3, num_workers=2, multiprocessing_context=fork)
            batches = [batch for batch in loader]
            child = fork.Process(target=_two_roots)  # a multiprocessing child: it exits through os._exit
            child.start()
            child.join()
            pid = os.fork()
            if pid == 0:  # a plain fork: it leaves the block (and hands its notes back) on its way out
                torch.sqrt(torch.ones(3))
                raise SystemExit(0)
            os.waitpid(pid, 0)
    finally:
        if os.getpid() != parent:  # the plain fork, out of the block: it must not go on running pytest
            os._exit(0)
    assert len(batches) == 4 and child.exitcode == 0 and not seen.faults
    # lines counted from the decorator's: the parent's root (+7), the plain fork child's (+15)
    by_line = {caller.rsplit(":", 1)[1]: count for (_, _, caller), count in seen.calls.items()}
    getitem = _Roots.__getitem__.__code__.co_firstlineno + 1
    twice = _two_roots.__code__.co_firstlineno + 1
    assert by_line == {str(first + 7): 1, str(getitem): 12, str(twice): 1, str(twice + 1): 1, str(first + 15): 1}
    assert spool.is_dir() is False and seen.spool == ""  # the children's files are read, then removed


def test_without_a_spool_folder_the_watch_goes_on_and_says_what_it_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    def full(*args: object, **kwargs: object) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(vendor_ops.tempfile, "mkdtemp", full)
    with VendorBoundOps() as seen:
        torch.sqrt(torch.ones(3))
    assert sum(seen.calls.values()) == 1
    assert seen.faults == ["the ops of child processes (no spool folder: [Errno 28] No space left on device)"]


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_ops_in_spawned_and_fork_server_children_are_added_in(method: str) -> None:
    """A spawned child starts with a bare interpreter, not the watch's kernels: the watchers travel in the
    preparation data multiprocessing sends it, and it joins them once it has torch (Python 3.14's default start
    method on Linux is `forkserver`, macOS's `spawn`)."""
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"{method}: not on this platform")
    context = multiprocessing.get_context(method)
    with VendorBoundOps() as seen:
        loader = torch.utils.data.DataLoader(_Roots(), batch_size=3, num_workers=2, multiprocessing_context=context)
        batches = [batch for batch in loader]
        child = context.Process(target=_two_roots)
        child.start()
        child.join()
    assert len(batches) == 4 and child.exitcode == 0 and not seen.faults, seen.faults
    by_line = {caller.rsplit(":", 1)[1]: count for (_, _, caller), count in seen.calls.items()}
    getitem = _Roots.__getitem__.__code__.co_firstlineno + 1
    twice = _two_roots.__code__.co_firstlineno + 1
    assert by_line == {str(getitem): 12, str(twice): 1, str(twice + 1): 1}
    here = Path(__file__).resolve().relative_to(Path.cwd().resolve()).as_posix()  # the parent's root: its cwd
    assert {caller.rsplit(":", 1)[0] for (_, _, caller) in seen.calls} == {here}


BARE_CHILDREN = """
import multiprocessing
import sys


def loaded(queue):
    queue.put(sorted({name.split(".")[0] for name in sys.modules} & {"torch", "tripwire"}))


def root():
    import torch

    torch.sqrt(torch.ones(3))
    assert "exec_module" not in vars(torch.__spec__.loader)  # the loader as it was
    assert not [finder for finder in sys.meta_path if type(finder).__name__ == "_AfterTorch"]  # and the finder gone


if __name__ == "__main__":
    from tripwire.bitwise.vendor_ops import VendorBoundOps

    spawn = multiprocessing.get_context("spawn")
    queue = spawn.Queue()
    with VendorBoundOps() as seen:
        bare = spawn.Process(target=loaded, args=(queue,))
        bare.start()
        print(queue.get(timeout=120))
        bare.join()
        late = [multiprocessing.get_context(method).Process(target=root) for method in sys.argv[1:]]
        for child in late:
            child.start()
            child.join()
    print([child.exitcode for child in (bare, *late)], seen.faults, seen.lines())
"""


def test_a_spawned_child_joins_the_watch_at_its_own_import_of_torch_and_not_before(tmp_path: Path) -> None:
    """The watch waits for the child's own `import torch`: an env worker that never imports it loads neither torch
    nor tripwire, and one that imports torch inside its run is watched from then on, and hands back at exit (a
    spawned child through `sys.exit`, a fork server's through `os._exit`). The loop's module imports neither at its
    top, and each child imports it again (as `__mp_main__`; a fork server preloads it)."""
    script = tmp_path / "bare.py"
    script.write_text(BARE_CHILDREN, encoding="utf-8")
    methods = [method for method in ("spawn", "forkserver") if method in multiprocessing.get_all_start_methods()]
    done = subprocess.run(
        [sys.executable, str(script), *methods], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    root = BARE_CHILDREN.splitlines().index("    torch.sqrt(torch.ones(3))") + 1
    calls = f"{len(methods)} call{'s' * (len(methods) > 1)}"
    assert done.stdout.splitlines() == [
        "[]",
        f"{[0] * (1 + len(methods))} [] ['aten.sqrt.default float32 at bare.py:{root} ({calls})']",
    ]


def test_the_preparation_data_carries_the_watchers_only_while_a_watch_is_active() -> None:
    import multiprocessing.spawn

    original = multiprocessing.spawn.get_preparation_data
    with VendorBoundOps() as seen:
        carried = multiprocessing.spawn.get_preparation_data("child")["tripwire_vendor_ops"]
        assert carried.watchers == [(seen.spool, seen.root, os.getpid())]
    assert multiprocessing.spawn.get_preparation_data is original
    assert "tripwire_vendor_ops" not in multiprocessing.spawn.get_preparation_data("child")


def test_a_child_that_cannot_join_the_watch_runs_on_and_its_fault_is_reported_as_tripwire_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the child runs (`child_start.start`, here in this process): the watch's own module cannot be used, so the
    start returns quietly, and the fault it leaves in the spool folder reaches the parent's `faults`."""
    import tripwire.bitwise
    from tripwire.bitwise import child_start

    with VendorBoundOps() as seen:
        monkeypatch.setattr(tripwire.bitwise, "vendor_ops", object())
        child_start.start([(seen.spool, seen.root, seen.pid)], "/nonexistent")
        monkeypatch.undo()
    assert seen.faults == [
        f"in child process {os.getpid()}: could not start the watch: "
        "AttributeError: 'object' object has no attribute 'watch_spawned_child'"
    ]


def test_when_the_child_s_start_cannot_be_read_the_child_starts_unwatched_and_the_fault_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import multiprocessing.spawn

    def unreadable() -> str:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(vendor_ops, "_child_start_source", unreadable)
    with VendorBoundOps() as seen:
        data = multiprocessing.spawn.get_preparation_data("child")
    assert "tripwire_vendor_ops" not in data and "sys_path" in data
    assert seen.faults == ["the ops of a spawned child (OSError: [Errno 5] Input/output error)"]


def _roots_then_exit_at_once() -> None:
    torch.sqrt(torch.ones(3))
    torch.sqrt(torch.ones(3))
    os._exit(0)  # past multiprocessing's finalizers: nothing is handed back


def _roots_then_wait(told: Any, go_on: Any) -> None:
    torch.sqrt(torch.ones(3))
    torch.sqrt(torch.ones(3))
    told.set()
    go_on.wait(timeout=120)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_child_that_never_hands_back_is_counted_at_its_first_call_and_named(method: str) -> None:
    """A child still running when the watch ends (a `SubprocVecEnv` never closed, persistent workers), or one ended
    through `os._exit`, hands nothing back: its first noted call, written at once, still says that it called a
    vendor-bound op and where, and `unfinished` counts it. Before, nothing of either was reported."""
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"{method}: not on this platform")
    context = multiprocessing.get_context(method)
    told, go_on = context.Event(), context.Event()
    with VendorBoundOps() as seen:
        exits = context.Process(target=_roots_then_exit_at_once)
        exits.start()
        exits.join()
        runs_on = context.Process(target=_roots_then_wait, args=(told, go_on))
        runs_on.start()
        assert told.wait(timeout=120)
    go_on.set()  # it hands back to a spool folder already gone: nothing is raised, nothing is added
    runs_on.join(timeout=120)
    assert exits.exitcode == 0 and runs_on.exitcode == 0 and not seen.faults, seen.faults
    exit_line = _roots_then_exit_at_once.__code__.co_firstlineno + 1
    wait_line = _roots_then_wait.__code__.co_firstlineno + 1
    by_line = {caller.rsplit(":", 1)[1]: count for (_, _, caller), count in seen.calls.items()}
    assert by_line == {str(exit_line): 1, str(wait_line): 1} and seen.unfinished == 2


def test_a_cloudpickled_function_is_named_by_its_qualified_name_and_line() -> None:
    """A vector env's worker runs the env functions cloudpickle sent it by value (the main script's wrappers), whose
    code has lost its file (`<dynamic-code>`): the caller was the library line that called them
    (`gymnasium/core.py:523` for every observation wrapper), now it is the function itself."""
    cloudpickle = pytest.importorskip("cloudpickle")
    namespace: dict[str, Any] = {"__name__": "__main__", "torch": torch}
    source = "class Scaled:\n    def observation(self, x):\n        return torch.sqrt(x)\n"
    exec(compile(source, "user_script.py", "exec"), namespace)
    scaled = cloudpickle.loads(cloudpickle.dumps(namespace["Scaled"]))  # by value: `__main__` is not its module
    assert scaled.observation.__code__.co_filename == "<dynamic-code>"
    with VendorBoundOps() as seen:
        scaled().observation(torch.ones(2))
    assert [caller for (_, _, caller) in seen.calls] == ["Scaled.observation (cloudpickled):3"]
