"""`VendorBoundOps`: which CPU ops it notes, where it says they were called, on which threads, and that it changes no
result and leaves torch's dispatch table as it found it."""

from __future__ import annotations

import multiprocessing
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

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

    monkeypatch.setattr(vendor_ops, "_caller", broken)
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
    assert seen.faults == ["the ops of forked children (no spool folder: [Errno 28] No space left on device)"]
