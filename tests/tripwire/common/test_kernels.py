"""`override_kernels`: a kernel over an op's own that calls it, all of the overrides or none, and every op's own kernel
back after `restore_kernels` (the sync counter's and the vendor-op watch's kernels are both made by it)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tripwire.common.kernels import override_kernels, restore_kernels

pytestmark = pytest.mark.skipif(not hasattr(torch.library, "get_kernel"), reason="torch.library.get_kernel: torch 2.9+")


def _counting(seen: list[str]) -> Any:
    def make(full: str, key: str, original: Any) -> Any:
        def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
            seen.append(f"{full}@{key}")
            return original.call_boxed(keyset, *args, **kwargs)

        return kernel

    return make


def test_an_override_sees_the_op_and_returns_its_own_result_then_restore_puts_the_op_back() -> None:
    before = torch._C._dispatch_dump("aten::sqrt")
    x = torch.linspace(0.5, 4.0, 37)
    expected = torch.sqrt(x)
    seen: list[str] = []
    libraries = override_kernels([("aten::sqrt", "CPU")], _counting(seen))
    try:
        got = torch.sqrt(x)
        torch.add(x, x)  # not overridden: not seen
    finally:
        restore_kernels(libraries)
    assert seen == ["aten::sqrt@CPU"] and torch.equal(got, expected)
    assert libraries == [] and torch._C._dispatch_dump("aten::sqrt") == before
    torch.sqrt(x)
    assert seen == ["aten::sqrt@CPU"]  # restored: the kernel is gone


def test_a_failing_registration_undoes_the_ones_before_it() -> None:
    before = torch._C._dispatch_dump("aten::sqrt")
    seen: list[str] = []
    with pytest.raises(Exception, match="no_such_op") as caught:
        override_kernels([("aten::sqrt", "CPU"), ("aten::no_such_op", "CPU")], _counting(seen))
    # undone at once, not by the garbage collector: the error kept (logged, re-raised) keeps its frames alive
    assert caught.traceback and torch._C._dispatch_dump("aten::sqrt") == before
    torch.sqrt(torch.ones(3))
    assert seen == []
