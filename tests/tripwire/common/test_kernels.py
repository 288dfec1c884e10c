"""`override_kernels`: a kernel over an op's own that calls it, all of the overrides or none, and every op's own kernel
back after `restore_kernels` (the sync counter's and the vendor-op watch's kernels are both made by it)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tripwire.common.kernels import numbers_as_tensors, override_kernels, restore_kernels, tensor_positions

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


def test_the_positions_a_wrapped_number_can_fill_are_the_tensor_arguments_given_by_position() -> None:
    assert tensor_positions("aten::equal") == (0, 1)
    assert tensor_positions("aten::normal.Tensor_Tensor") == (0, 1)  # the generator is keyword-only
    assert tensor_positions("aten::index_put_") == (0, 2)  # the indices are a list, not a tensor
    assert tensor_positions("aten::bernoulli_.float") == (0,)  # `p` is a number there
    assert tensor_positions("aten::pow.Tensor_Scalar") == (0,)


def test_a_number_at_a_tensor_position_is_the_tensor_torch_made_of_it_and_nothing_else_changes() -> None:
    scalars = (torch.ones(2), 3, 0.5)
    assert numbers_as_tensors(scalars, (0,)) is scalars  # numbers given for a Scalar stay numbers
    got = numbers_as_tensors((1, 2.5, True, 1j, 4), (0, 1, 2, 3))
    assert [(g.dtype, g.dim(), g.device.type) for g in got[:4]] == [
        (torch.int64, 0, "cpu"),
        (torch.float64, 0, "cpu"),
        (torch.bool, 0, "cpu"),
        (torch.complex128, 0, "cpu"),
    ]
    assert [g.item() for g in got[:4]] == [1, 2.5, True, 1j] and got[4] == 4
    assert numbers_as_tensors((2**70,), (0,)) == (2**70,)  # past int64: as it came, to fail as the op would


def _implicit(full: str, original: Any) -> Any:
    from tripwire.sync.implicit import _counting_kernel

    return _counting_kernel("implicit:equal", original, False, tensor_positions(full))


def _vendor(full: str, original: Any) -> Any:
    from tripwire.bitwise.vendor_ops import _WATCH

    return _WATCH._kernel(full, original)


def _draws(full: str, original: Any) -> Any:
    from tripwire.bitwise.draws import DrawThreads

    return DrawThreads(lambda: "here")._kernel(full, "CPU", original)


@pytest.mark.parametrize(
    ("make", "full", "args", "expected"),
    [
        (_implicit, "aten::equal", (2, 2), True),
        (_implicit, "aten::equal", (torch.ones(()), 1), True),
        (_vendor, "aten::sqrt", (4.0,), torch.tensor(2.0, dtype=torch.float64)),
        (_draws, "aten::normal.Tensor_Tensor", (torch.full((3,), 5.0), 0.0), torch.full((3,), 5.0)),
    ],
    ids=["sync-counter-numbers", "sync-counter-tensor-and-number", "vendor-op-watch", "draw-watch"],
)
def test_each_kernel_handed_a_wrapped_number_as_a_number_runs_the_op_as_torch_would(
    make: Any, full: str, args: tuple[Any, ...], expected: Any
) -> None:
    """torch hands a Python kernel a tensor marked a wrapped number (a traced graph's constant, a number a C++ caller
    gave for a tensor) as the number, and the op's own kernel refused it ("Expected a value of type 'Tensor'"): each
    of tripwire's kernels hands it on as the tensor torch made of it."""
    original = torch.library.get_kernel(full, torch._C.DispatchKey.CPU)
    got = make(full, original)(torch._C.DispatchKeySet(torch._C.DispatchKey.CPU), *args)
    if isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.dtype == expected.dtype and torch.equal(got, expected)
    else:
        assert got is expected
