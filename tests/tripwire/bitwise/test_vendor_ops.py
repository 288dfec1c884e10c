"""`VendorBoundOps`: which CPU ops it notes, where it says they were called, and that it changes no result."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

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
    ops = {op for op, _, _ in seen.calls}
    assert ops == {
        "aten.sqrt.default",
        "aten.sqrt_.default",
        "aten._foreach_sqrt.default",
        "aten.pow.Tensor_Scalar",
        "aten.log10.default",
        "aten.log.default",
        "aten.atan.default",
    }
    assert all(caller.rsplit(":", 1)[0].endswith(HERE) for _, _, caller in seen.calls)
    first = test_listed_ops_are_noted_with_the_callers_line.__code__.co_firstlineno
    assert any(caller.endswith(f"{HERE}:{first + 3}") for op, _, caller in seen.calls if op == "aten.sqrt.default")
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
