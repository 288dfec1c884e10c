"""A tensor's digest reads its bytes in place where it can; the bytes are those of a dense, contiguous CPU copy."""

from __future__ import annotations

import hashlib

import pytest
import torch

from tripwire.bitwise.digest import (
    _tensor_bytes,
    leaf_digest,
    leaf_record,
    leaf_records,
    leaf_spec,
    leaf_value,
    tensor_digest,
)


def _copied(tensor: torch.Tensor) -> bytes:
    """Every step always taken, then copied out: what the digest read before it read in place."""
    data = tensor.detach()
    if data.layout != torch.strided:
        data = data.to_dense()
    data = data.resolve_conj().resolve_neg().cpu().contiguous().reshape(-1)
    return data.view(torch.uint8).numpy().tobytes()


def _inference_tensor() -> torch.Tensor:
    with torch.inference_mode():
        return torch.arange(6, dtype=torch.float32).reshape(2, 3) * -0.0


base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
CASES = {
    "contiguous": base,
    "transposed": base.t(),
    "strided slice": base[:, ::2],
    "zero-dim": torch.tensor(3.5),
    "empty": torch.empty(0, 3),
    "bool": base > 5,
    "bfloat16": base.to(torch.bfloat16),
    "int64": base.long(),
    "conj view": torch.complex(base, -base).conj(),
    "neg view": torch.complex(base, base).conj().imag,
    "sparse": base.to_sparse(),
    "parameter": torch.nn.Parameter(base.clone()),
    "float16": base.half(),
    "uint8": base.to(torch.uint8),
    "complex128": torch.complex(base, -base).to(torch.complex128),
    "requires grad": base.clone().requires_grad_(),
    "row view": base[2],  # contiguous, read in place at an offset into its storage
    "computed, with a graph": base.clone().requires_grad_() * -1.0,
    "inference tensor": _inference_tensor(),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_bytes_are_those_of_a_dense_contiguous_copy(name: str) -> None:
    tensor = CASES[name]
    assert bytes(_tensor_bytes(tensor)) == _copied(tensor)
    expected = hashlib.sha256(f"tensor|{tensor.dtype}|{tuple(tensor.shape)}|".encode() + _copied(tensor)).hexdigest()
    assert tensor_digest(tensor) == expected


@pytest.mark.parametrize("name", sorted(set(CASES) - {"sparse"}))
def test_a_kept_value_is_a_detached_copy_of_the_tensor_whatever_path_made_it(name: str) -> None:
    """A plain dense tensor's value is copied in two calls, others by the general line: the same copy either way."""
    tensor = CASES[name]
    value = leaf_value(tensor)
    expected = tensor.detach().resolve_conj().resolve_neg().to("cpu", copy=True)
    assert value is not None and type(value) is torch.Tensor and not value.requires_grad
    assert (value.dtype, value.shape, value.stride()) == (expected.dtype, expected.shape, expected.stride())
    assert bytes(_tensor_bytes(value)) == bytes(_tensor_bytes(expected))
    assert value.numel() == 0 or value.data_ptr() != tensor.data_ptr()


def _same_value(value: torch.Tensor | None, expected: torch.Tensor | None) -> bool:
    if value is None or expected is None:
        return value is expected
    layout = (value.dtype, value.shape, value.stride()) == (expected.dtype, expected.shape, expected.stride())
    return layout and _tensor_bytes(value).tobytes() == _tensor_bytes(expected).tobytes()


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_pass_over_a_leaf_gives_what_the_three_functions_give(name: str) -> None:
    """A checkpoint reads a plain tensor once for its digest, spec and kept value, its header and spec looked up by
    dtype and shape: the second call below comes from that table."""
    tensor = CASES[name]
    for _ in range(2):
        digest, spec, value = leaf_record(tensor, keep=True)
        assert (digest, spec) == (leaf_digest(tensor), leaf_spec(tensor))
        assert _same_value(value, leaf_value(tensor))
        assert value is None or value.numel() == 0 or value.data_ptr() != tensor.data_ptr()
    assert leaf_record(tensor)[2] is None  # nothing kept unless asked


PLAIN_VALUES = [True, False, 0, -3, 7, 1.5, 0.0, -0.0, float("nan"), float("inf"), "text", "", None]


@pytest.mark.parametrize("value", PLAIN_VALUES, ids=repr)
def test_one_pass_over_a_plain_value_gives_what_the_three_functions_give(value: object) -> None:
    """An optimizer's settings (bools, ints, floats, None) take the builtin-scalar path: the same digest (-0.0 and
    0.0 apart, NaN by its bits), spec and kept value as the general one."""
    digest, spec, kept = leaf_record(value, keep=True)
    assert (digest, spec) == (leaf_digest(value), leaf_spec(value))
    assert _same_value(kept, leaf_value(value))
    assert leaf_record(value)[2] is None


def test_a_plain_value_too_large_to_keep_is_kept_alike_either_way() -> None:
    """int64 cannot hold it: no kept value either way (its digest is exact: test_digest_ints.py)."""
    assert leaf_value(2**70) is None and leaf_record(2**70, keep=True)[2] is None


def test_the_one_pass_table_tells_dtypes_of_one_shape_apart() -> None:
    """Zeros of two dtypes have the same bytes: only the header, looked up by dtype and shape, tells them apart."""
    as_float, as_int = torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.int32)
    assert bytes(_tensor_bytes(as_float)) == bytes(_tensor_bytes(as_int))
    (float_digest, float_spec, _), (int_digest, int_spec, _) = leaf_record(as_float), leaf_record(as_int)
    assert (float_spec, int_spec) == ("float32[2,3]", "int32[2,3]")
    assert float_digest == tensor_digest(as_float) != int_digest == tensor_digest(as_int)


def test_records_of_mixed_leaves_match_leaf_by_leaf() -> None:
    leaves = _mixed_leaves()
    records = leaf_records(leaves, keep=True)
    assert [(digest, spec) for digest, spec, _ in records] == [(leaf_digest(x), leaf_spec(x)) for x in leaves]
    assert all(_same_value(value, leaf_value(x)) for (_, _, value), x in zip(records, leaves))


def test_a_view_and_its_copy_digest_alike_and_a_changed_bit_does_not() -> None:
    view = base.t()
    assert tensor_digest(view) == tensor_digest(view.contiguous())
    changed = view.contiguous()
    changed[0, 0] = torch.nextafter(changed[0, 0], torch.tensor(1.0))
    assert tensor_digest(changed) != tensor_digest(view)


def _mixed_leaves() -> list[object]:
    big = torch.arange(3 * 2**18, dtype=torch.float32).reshape(-1, 256)  # 3 MiB
    return [
        big,
        big.t(),  # large and not contiguous: copied, so hashed in the calling thread
        big[::2],
        torch.ones(2**19, dtype=torch.float64) * -0.0,
        torch.ones(2**19, dtype=torch.complex64).conj(),  # a conj view: resolved by a copy, in the calling thread
        torch.tensor(1.5),
        torch.empty(2**20, device="meta"),
        big.numpy(),  # an array is a leaf too, digested inline
        [1.0, 2.0],
        "text",
    ]


def test_large_leaves_hashed_in_parallel_give_the_same_digests(monkeypatch: pytest.MonkeyPatch) -> None:
    from tripwire.bitwise import digest

    leaves = _mixed_leaves()
    serial = [digest.leaf_digest(leaf) for leaf in leaves]
    assert digest.leaf_digests(leaves) == serial
    submitted: list[object] = []
    pool = digest._hash_pool()
    if pool is not None:  # with several CPUs, the large tensors read in place really went to the pool
        monkeypatch.setattr(pool, "submit", lambda *a, **k: submitted.append(a) or type(pool).submit(pool, *a, **k))
        assert digest.leaf_digests(leaves) == serial
        assert len(submitted) == 2


def test_a_forked_child_hashes_with_threads_of_its_own() -> None:
    """A child forked after the parent started its digest threads has the pool object but none of its threads: using
    it would wait forever. The child makes its own."""
    import multiprocessing

    expected = _digests_of_mixed_leaves()  # the parent's pool now exists
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as children:
        assert children.apply_async(_digests_of_mixed_leaves).get(timeout=60) == expected


def _digests_of_mixed_leaves() -> list[str]:
    from tripwire.bitwise import digest

    return digest.leaf_digests(_mixed_leaves())


def test_digesting_counts_no_sync_whichever_way_the_counter_watches(explicit_hooks: bool) -> None:
    """A digest's reads of a tensor (its bytes, its kept copy) are the probe's, never the loop's: nothing counts, with
    the stand-ins or with the function mode, whether or not the caller is inside `ignore_syncs`."""
    from tripwire.bitwise.digest import leaves, state_digest
    from tripwire.bitwise.trajectory import digest_value
    from tripwire.sync.counter import SyncCounter

    state = {"weight": torch.randn(3, 2), "step": torch.tensor(4.0), "lr": 0.1, "nested": [torch.ones(2)]}
    with SyncCounter() as counter:
        state_digest(state)
        digest_value(state)
        digest_value(state["weight"])
        leaf_records([leaf for _, leaf in leaves("", state)], keep=True)
        leaf_record(state["weight"], keep=True)
    assert counter.events == []


def _quantized(values: list[float], scale: float) -> torch.Tensor:
    return torch.quantize_per_tensor(torch.tensor(values), scale, 0, torch.qint8)


def _per_channel(values: torch.Tensor, scales: list[float]) -> torch.Tensor:
    return torch.quantize_per_channel(values, torch.tensor(scales), torch.tensor([0, 0]), 0, torch.qint8)


def test_a_quantized_tensor_is_digested_with_what_its_integers_stand_for() -> None:
    """1.0 at scale 0.1 and 2.0 at scale 0.2 are the same integers (10): their digests differ, per tensor and per
    channel, as their values do."""
    one, two = _quantized([1.0], 0.1), _quantized([2.0], 0.2)
    assert torch.equal(one.int_repr(), two.int_repr())
    assert tensor_digest(one) != tensor_digest(two) and tensor_digest(one) == tensor_digest(_quantized([1.0], 0.1))
    first, second = _per_channel(torch.ones(2, 2), [0.1, 0.2]), _per_channel(torch.ones(2, 2) * 2, [0.2, 0.4])
    assert torch.equal(first.int_repr(), second.int_repr())
    assert tensor_digest(first) != tensor_digest(second)


@pytest.mark.parametrize("layout", [torch.strided, torch.jagged])
def test_a_nested_tensor_is_digested_by_its_tensors(layout: torch.layout) -> None:
    """It raised inside tripwire (a nested tensor has no one shape): digested tensor by tensor, its spec each one's
    shape, and a different split of the same numbers is a different digest."""

    def nested(*sizes: int, fill: float = 1.0) -> torch.Tensor:
        return torch.nested.nested_tensor([torch.full((size,), fill) for size in sizes], layout=layout)

    [(digest, spec, value)] = leaf_records([nested(2, 3)], keep=True)
    assert digest == leaf_digest(nested(2, 3)) == tensor_digest(nested(2, 3))
    assert spec == leaf_spec(nested(2, 3)) == "float32[2][3]" and value is None
    assert digest != tensor_digest(nested(3, 2)) and digest != tensor_digest(nested(2, 3, fill=2.0))


def test_a_one_element_view_at_any_stride_is_digested_by_its_bytes() -> None:
    """torch calls a tensor of one (or no) element contiguous whatever its stride, but views it as bytes only at
    stride 1: the digest of a bfloat16 `x[:, j]` of a one-row `x` raised inside tripwire."""
    row = torch.tensor([[1.5, 2.5, 3.5]], dtype=torch.bfloat16)
    column = row[:, 1]
    assert column.stride() == (3,) and column.is_contiguous()
    assert tensor_digest(column) == tensor_digest(torch.tensor([2.5], dtype=torch.bfloat16))
    assert tensor_digest(row[:0, 1]) == tensor_digest(torch.zeros(0, dtype=torch.bfloat16))
