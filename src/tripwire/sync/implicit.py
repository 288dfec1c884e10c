"""Implicit host syncs: aten ops that must read device data to size or produce their output, by kernel or mode.

They are the ops tagged `data_dependent_output` or `dynamic_output_shape` (`nonzero`, `unique`, `masked_select`,
`bincount`, `equal`, `_local_scalar_dense` reached from inside torch, boolean-mask `index`, `repeat_interleave` without
`output_size`, `one_hot` without `num_classes`), and `index_put_` with a boolean mask (`t[mask] = values`: untagged, its
kernel turns the mask into indices with `nonzero`, a wait on a GPU, unless torch makes it a `masked_fill_`: one mask,
one value held in host memory, no accumulation; through tensor indices a 0-d value in host memory is uploaded first,
`to_device`, a number's too: `buf[idx] = 0.5`), and torch.linalg's checked routines (`cholesky`, `inv`, `solve`, `eigh`,
`svd`, `pinv`, ...: untagged, each reads its error codes to the host on a device; `_LINALG_READS`), and `histc` over its
input's own range (untagged: on a device it reads the minimum and maximum; `bincount` reads both too), and a padding
mask made a nested tensor (`_nested_tensor_from_mask` and its `_left_aligned` check, untagged: a `TransformerEncoder`'s
fast path outside autograd, on a CPU as on a GPU; on a device each reads its mask's lengths to the host), and a 0-d
tensor argument its kernel reads (`masked_fill`, `index_fill` given a tensor value, `linspace`, `logspace` given tensor
endpoints, untagged: each kernel reads it with `.item()`, a wait where it is on a device), and the copies torch's C++
makes at the top of the dispatcher (`dst[i] = src` copies `src` into the view `dst[i]` with `aten::copy_`: an upload
that blocks, or a download, on a GPU, as `copies.indexed_copy_kind` says, a number into one element of a device tensor
an upload too; a Python `.copy_` is classified by its stand-in, from its line), counted as a dispatch mode sees them,
each wait once (`_waits`): called from Python, from autograd or from an op that decomposes above autograd, never an op
another op's kernel runs inside itself (a CPU `var` reading its mean). On torch 2.9 and later `ImplicitKernels`
registers a counting kernel over each such op at its autograd keys (and at its backend keys for inference tensors and
factories), so only those ops pay; inside `torch.inference_mode`, where autograd is off, in a process with a running
process group, and on older torch, `ImplicitSyncMode` (a `TorchDispatchMode`) counts, costing every op a trip through
Python; beside it the kernels of the ops counted whole (`one_hot`, which the mode meets decomposed into its CPU kernel's
range checks) still count. A read of host memory on a GPU run too is not a wait: `quantile`'s range check of `q`, which
torch makes on a CPU only (`equal`), and `tensor_split`'s read of a 0-d count of sections, which torch requires in host
memory.
The two are compared call by call in tests/tripwire/sync/test_sync_kernels.py. Syncs already counted explicitly are
not counted twice: the explicit hook suppresses recording while the call it counted runs.

The dispatch mode also sees `torch.distributed`'s c10d ops, and counts one issued past the patched Python functions
(`tripwire.sync.patches`) as the collective it is (`collective:all_reduce`). Each kind is named in the
`implicit:`/`collective:` families of `tripwire.sync.kinds`.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch.compiler import is_compiling
from torch.utils._python_dispatch import TorchDispatchMode

from tripwire.common.kernels import (
    NUMBERS,
    numbers_as_tensors,
    override_kernels,
    restore_kernels,
    tensor_positions,
    wrapped,
)
from tripwire.sync import kinds
from tripwire.sync import state as sync
from tripwire.sync.copies import (
    PLAIN,
    _host_born,
    accelerator_in_use,
    all_host_born,
    at_subscript,
    copied_here,
    indexed_copy_kind,
    number_copy_kind,
)
from tripwire.sync.explicit import ExplicitSyncMode, mark_computed, mark_host_results
from tripwire.sync.installation import Installation, in_counted_backward, patch

__all__ = [
    "ImplicitKernels",
    "ImplicitSyncMode",
    "counting_here",
    "kernels_available",
    "kernels_here",
    "read_op_schemas",
    "use_kernels",
]

_LOCAL = sync._LOCAL

_MASK_DTYPES = (torch.bool, torch.uint8)
_NO_IMPLICIT = "-"
# `t[mask] = values` and its spellings: untagged ops that read a boolean mask's positions (`_put_by_mask`)
_PUTS = frozenset({"index_put", "index_put_", "_index_put_impl_"})
# op object's address -> (the op, its static kind); the address as `object.__hash__` gives it, not through `id`, whose
# audit event a loop's own audit hook would see at every op
_implicit_cache: dict[int, tuple[Any, str]] = {}
_OP_KEY: Callable[[object], int] = object.__hash__
# torch.linalg's checked routines, untagged: on a device each reads its result's error codes to the host (torch's docs
# say each "synchronizes that device with the CPU"), counted as `implicit:linalg_check`: `cholesky`, `inv`, `solve`,
# `lu_factor` and `ldl_factor` through `_linalg_check_errors`, a top-level op; `eigh`/`eigvalsh`, `eig`/`eigvals`,
# `svd`/`svdvals`/`matrix_rank`/`cond` and `pinv` inside their own op. Inside `torch.inference_mode` a dispatch mode
# meets the public ops before they decompose (`linalg_eigh`, `inverse`), so those are listed too. Their `_ex` forms
# read the codes only with `check_errors=True` (`_LINALG_EX`), `matrix_norm` only for the orders it takes from
# singular values (2, -2, "nuc").
_LINALG_READS = frozenset({"_linalg_check_errors", "_linalg_eigh", "linalg_eig", "_linalg_svd", "linalg_pinv"})
_LINALG_READS |= {"linalg_cholesky", "linalg_inv", "linalg_solve", "linalg_lu_factor", "linalg_ldl_factor"}
_LINALG_READS |= {"linalg_eigh", "linalg_eigvalsh", "linalg_eigvals", "linalg_svd", "linalg_svdvals", "svd"}
_LINALG_READS |= {"linalg_matrix_rank", "linalg_cond", "inverse", "pinverse", "linalg_tensorinv", "linalg_tensorsolve"}
_LINALG_EX = frozenset({"linalg_cholesky_ex", "linalg_inv_ex", "_linalg_solve_ex", "linalg_solve_ex"})
_LINALG_EX |= {"linalg_lu_factor_ex", "linalg_ldl_factor_ex"}
_SINGULAR_ORDERS = (2, -2, "nuc")
# A padding mask made a nested tensor, untagged: `nn.TransformerEncoder` outside autograd (eval under `no_grad` or
# `inference_mode`, a `src_key_padding_mask` given) first checks the mask is left-aligned (`sizes.equal(nums)`, one
# read), then converts (`_nested_tensor_from_mask(..., mask_check=False)`: the lengths `.to(kCPU)`, one read; with
# `mask_check`, the default, the check's read besides). The same path runs on a CPU, where nothing waits.
_NESTED_MASK = {"_nested_tensor_from_mask_left_aligned": "nestedcheck", "_nested_tensor_from_mask": "nested"}
_SCALARS = "scalars:"  # a static kind: the positions read follow
# `linspace(start, end, steps)`'s endpoints. A factory: `BackendSelect` sends it to the backend key alone, past the
# autograd keys, so its counting kernel counts there (`_FACTORY`)
_FACTORY = _SCALARS + "@"
_ENDPOINTS = {"Tensor_Tensor": "@01", "Tensor_Scalar": "@0", "Scalar_Tensor": "@1"}
# A 0-d tensor argument an op's kernel reads with `.item()`, below autograd, on every device, untagged: the value of
# `masked_fill(mask, value)` and `index_fill(dim, index, value)` (`t.masked_fill(~legal, self.min_logit)`, a buffer),
# the endpoints of `linspace` and `logspace` given tensors. Overload -> the positions read (the dispatcher passes them
# by position); the overloads taking numbers read nothing, and get no counting kernel.
_SCALAR_ARGUMENTS = {
    "masked_fill": {"Tensor": "2"},
    "masked_fill_": {"Tensor": "2"},
    "index_fill": {"int_Tensor": "3"},
    "index_fill_": {"int_Tensor": "3"},
    **{
        name: {f"{overload}{out}": positions for overload, positions in _ENDPOINTS.items() for out in ("", "_out")}
        for name in ("linspace", "logspace")
    },
}

# c10d's ops as the dispatcher sees them -> the `torch.distributed` name a collective is counted under
_C10D_NAMES = {
    "allreduce_": "all_reduce",
    "allreduce_coalesced_": "all_reduce_coalesced",
    "allgather_": "all_gather",
    "_allgather_base_": "all_gather_into_tensor",
    "allgather_coalesced_": "all_gather_coalesced",
    "allgather_into_tensor_coalesced_": "all_gather_into_tensor_coalesced",
    "reduce_scatter_": "reduce_scatter",
    "_reduce_scatter_base_": "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter_tensor_coalesced",
    "alltoall_": "all_to_all",
    "alltoall_base_": "all_to_all_single",
    "broadcast_": "broadcast",
    "reduce_": "reduce",
    "gather_": "gather",
    "scatter_": "scatter",
    "barrier": "barrier",
    "monitored_barrier_": "monitored_barrier",
    "send": "send",
    "recv_": "recv",
    "recv_any_source_": "recv",
}


def _static_implicit_kind(func: Any) -> str:
    """Per-op part of the implicit classification (cached): a kind, `mask`, `rep`, `onehot` or `-`. A c10d op is a
    collective (`collective:all_reduce`): seen at the dispatcher, it is counted however the Python function that
    issued it was referenced (`from torch.distributed import all_reduce` at import); one issued inside a counted
    `torch.distributed` call is not counted again."""
    schema = getattr(func, "_schema", None)
    name = schema.name.split("::", 1)[-1] if schema is not None else ""
    overload = schema.overload_name if schema is not None else ""
    return _static_kind(getattr(func, "namespace", ""), name, getattr(func, "tags", ()), overload)


def _static_kind(namespace: str, name: str, tags: Any, overload: str = "") -> str:
    """`_static_implicit_kind` from an op's namespace, name (no overload), tags and overload."""
    if namespace == "c10d":
        return kinds.COLLECTIVE.of(_C10D_NAMES.get(name, name.strip("_")))
    if namespace == "aten" and name in _PUTS:
        return "put"
    if namespace == "aten" and name == "copy_":
        return "copy"
    if namespace == "aten" and name in _LINALG_READS:
        return kinds.LINALG_CHECK
    if namespace == "aten" and name in _LINALG_EX:
        return "checked"
    if namespace == "aten" and name == "linalg_matrix_norm":
        return "norm"
    if namespace == "aten" and name == "histc":
        return "histc"
    if namespace == "aten" and name in _HOST_ONLY_READS:
        return "hostonly"
    if namespace == "aten" and name in _NESTED_MASK:
        return _NESTED_MASK[name]
    if namespace == "aten" and name in _SCALAR_ARGUMENTS:
        positions = _SCALAR_ARGUMENTS[name].get(overload)
        return _SCALARS + positions if positions else _NO_IMPLICIT
    if torch.Tag.data_dependent_output not in tags and torch.Tag.dynamic_output_shape not in tags:
        return _NO_IMPLICIT
    if name == "index":
        return "mask"
    if name == "repeat_interleave":
        return "rep"
    if name == "one_hot":
        return "onehot"
    return kinds.IMPLICIT.of(name)


def _op_static_kind(func: Any) -> str:
    """`_static_implicit_kind(func)`, looked up by the op object's address: `OpOverload.__hash__` is written in Python,
    and the dispatch mode asks at every op. The entry holds the op, so its address is not reused while cached."""
    entry = _implicit_cache.get(_OP_KEY(func))
    if entry is None:
        entry = _implicit_cache[_OP_KEY(func)] = (func, _static_implicit_kind(func))
    return entry[1]


def _first(args: tuple[Any, ...], kwargs: dict[str, Any], name: str = "self") -> Any:
    """An op's first argument, passed by position or by its name."""
    return args[0] if args else kwargs.get(name)


def _call_kind(static: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """An op's kind for one call's arguments, from its static kind (a boolean mask, a missing output size)."""
    if static == _NO_IMPLICIT:
        return None
    if static in ("mask", "put"):  # `index` / `index_put_` (`self, indices, ...`)
        number = static == "put" and not accelerator_in_use() and _value_of_a_number(args)  # before a name holds it
        target, indices = _first(args, kwargs), args[1] if len(args) > 1 else kwargs.get("indices", ())
        if _uploads_its_indices(target, indices) or _indexed_by_host_data(target, indices):
            # an `index_put_`'s value is uploaded first (`value.to(self.device())`), then its indices (`make_info`)
            uploads_value = static == "put" and not _put_by_mask(indices, args, kwargs, number)
            if uploads_value and _uploads_its_value(target, indices, args, kwargs, number):
                return _INDICES_AND_VALUE
            return kinds.TO_DEVICE
        if static == "put":
            if _put_by_mask(indices, args, kwargs, number):
                return kinds.MASK_PUT
            return kinds.TO_DEVICE if _uploads_its_value(target, indices, args, kwargs, number) else None
        masked = any(isinstance(i, torch.Tensor) and i.dtype in _MASK_DTYPES for i in indices)
        return kinds.MASK_INDEX if masked else None
    if static == "copy":  # `dst[i] = src`: torch's own `dst.copy_(src)`, at the top of the dispatcher
        return indexed_copy_kind(args, kwargs)
    if static == "checked":  # keyword-only in every schema
        return kinds.LINALG_CHECK if kwargs.get("check_errors") else None
    if static == "norm":  # `linalg_matrix_norm(A, ord, dim, keepdim, *, dtype)`
        order = args[1] if len(args) > 1 else kwargs.get("ord", "fro")
        return kinds.LINALG_CHECK if order in _SINGULAR_ORDERS else None
    if static == "histc":  # `histc(self, bins, min, max)`: the default range (min == max) is the input's own
        return _histc_kind(args, kwargs)
    if static == kinds.BINCOUNT:
        source = _first(args, kwargs)
        empty = isinstance(source, torch.Tensor) and source.numel() == 0  # zeros of `minlength`, nothing read
        return None if empty or _host_input_beside_accelerator(source) else kinds.BINCOUNT
    if static == "hostonly":
        return None
    if static.startswith(_SCALARS):  # the positions of the 0-d tensors read, after the prefix
        positions = static[len(_SCALARS) :].lstrip("@")
        reads = sum(_reads_a_device_scalar(args[int(at)]) for at in positions if int(at) < len(args))
        return (None, kinds.SCALAR_ARGUMENT, _TWO_SCALARS)[reads]
    if static in ("nested", "nestedcheck"):  # `(t, mask, mask_check=True)`: a mask on the host reads in place
        host = _host_input_beside_accelerator(args[1] if len(args) > 1 else kwargs.get("mask"))
        return None if host else kinds.NESTED_FROM_MASK if static == "nested" else kinds.NESTED_MASK_CHECK
    if static == "rep":  # `repeat_interleave(repeats, *, output_size)`: an empty `repeats` returns before reading
        repeats = _first(args, kwargs, "repeats")
        empty = isinstance(repeats, torch.Tensor) and repeats.numel() == 0
        sized = kwargs.get("output_size") is not None or empty or _host_input_beside_accelerator(repeats)
        return None if sized else kinds.REPEAT_INTERLEAVE
    if static == "onehot":
        classes = args[1] if len(args) > 1 else kwargs.get("num_classes", -1)
        source = _first(args, kwargs)
        return kinds.ONE_HOT if classes == -1 and not _host_input_beside_accelerator(source) else None
    return static


# Ops that decompose above the backends but are counted whole, by the rule a GPU follows, not by the reads their
# decomposition makes on a CPU: `one_hot`'s CPU kernel checks its classes' range (`self.min().item()`,
# `self.max().item()`), where its CUDA kernel reads only the maximum, and only without `num_classes`
# (`quantile` checks its `q` range with `.all()` and `equal` on a CPU only, `if (self.device().is_cpu())`;
# `tensor_split` reads a 0-d count of sections torch requires in host memory: counted whole, they count nothing)
_COUNTED_WHOLE = frozenset({"onehot", "hostonly"})
_HOST_ONLY_READS = frozenset({"quantile", "nanquantile", "tensor_split"})


# `_call_kind`'s answer for an `index_put_` that uploads its 0-d value and then its indices (`dev[[0, 2]] = 0.5`,
# `dev[host_ids] = torch.tensor(1.0)`): two `to_device` waits (`_waits`, `_delivered`), where either alone is one
_INDICES_AND_VALUE = "to_device (indices and value)"
# `_call_kind`'s answer for a `linspace` or `logspace` reading both its endpoints from the device: two waits
_TWO_SCALARS = "scalar_argument (two)"


def _delivered(kind: str) -> str:
    """The kind an event of `kind` is counted as."""
    if kind == _INDICES_AND_VALUE:
        return kinds.TO_DEVICE
    return kinds.SCALAR_ARGUMENT if kind == _TWO_SCALARS else kind


def _waits(kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """How many times one call of an op of `kind` waits for the device: `histc` reads its input's minimum, then its
    maximum; `bincount` the minimum with `.cpu()` (skipped for uint8, which cannot be negative), then the maximum with
    `.item()` to size its bins; `repeat_interleave` its total (`cumsum[-1].item()`), then whether every repeat is
    non-negative (`.all().item()`); an `index_put_` uploading its value and its indices both, a `linspace` reading
    both its endpoints; a padding mask made a nested tensor its lengths, and with `mask_check` its check besides;
    every other op once."""
    if kind in (kinds.HISTC, kinds.REPEAT_INTERLEAVE, _INDICES_AND_VALUE, _TWO_SCALARS):
        return 2
    if kind == kinds.NESTED_FROM_MASK:
        return 2 if (args[2] if len(args) > 2 else kwargs.get("mask_check", True)) else 1
    if kind == kinds.BINCOUNT:
        source = _first(args, kwargs)
        return 1 if isinstance(source, torch.Tensor) and source.dtype == torch.uint8 else 2
    return 1


def _host_value(value: torch.Tensor, number: bool = False) -> bool:
    """Whether a value an op reads is host memory on a GPU run: where it is, on a run with an accelerator; on a CPU
    run, a tensor torch made of a Python number (`number`) or one built in host memory (`copies.copied_here`). A
    tensor built before the recording is taken as the run's device's, as every such tensor is."""
    if accelerator_in_use():
        return value.device.type == "cpu"
    return number or bool(_host_born and copied_here(value))


def _reads_a_device_scalar(value: object) -> bool:
    """Whether a 0-d tensor read with `.item()` waits for a device: one not host memory on a GPU run (`_host_value`)."""
    if not isinstance(value, torch.Tensor) or value.dim() != 0:
        return False
    return not value.is_meta and not _host_value(value)


def _histc_kind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """`torch.histc` with `min == max` (the default 0, 0) on a device reads its input's minimum and maximum to the host
    (`self.min().cpu()`, then the maximum's) to size its bins: two waits (`_waits`).
    A CPU kernel computes them on the host: nothing to wait for on a GPU run; a CPU run counts where a GPU run waits."""
    source = _first(args, kwargs)
    low = args[2] if len(args) > 2 else kwargs.get("min", 0)
    high = args[3] if len(args) > 3 else kwargs.get("max", 0)
    if not isinstance(source, torch.Tensor) or low != high or source.numel() == 0:
        return None
    return None if _host_input_beside_accelerator(source) else kinds.HISTC


def _host_input_beside_accelerator(source: object) -> bool:
    """Whether an op's input is host memory on a run that uses an accelerator: its CPU kernel reads it in place."""
    return isinstance(source, torch.Tensor) and source.device.type == "cpu" and accelerator_in_use()


def _uploads_its_indices(source: object, indices: Any) -> bool:
    """Whether an `index`/`index_put_` of a device tensor takes an index held in host memory, which torch uploads
    before it indexes (`make_info`'s `indice.to(self.device())`: a blocking copy from pageable memory, a wait on a
    GPU; CleanRL's `b_obs[mb_inds]` with a NumPy `mb_inds`, a buffer indexed by `torch.randint(n, (b,))`). Read from
    the tensors, so on an accelerator only: on a CPU run the indexed tensor's place is unknown when it was built
    before the recording (a host dataset indexed by host indices uploads nothing), and a NumPy array or list index
    becomes a tensor inside torch's own `__getitem__`, where nothing marks it."""
    if not indices or not isinstance(source, torch.Tensor) or not accelerator_in_use():
        return False
    return source.device.type not in ("cpu", "meta") and any(
        isinstance(index, torch.Tensor) and index.device.type == "cpu" for index in indices
    )


def _indexed_by_host_data(target: object, indices: Any) -> bool:
    """Whether torch made an index of this call from a Python list or a NumPy array (`b_obs[mb_inds]`, CleanRL's
    minibatches; `memory[batch]` with a list) for a tensor that is not host memory. `__getitem__` and `__setitem__`
    build such an index with the indexed tensor's options, on its device, through a blocking `.to()` before the op
    runs (torch's `IndicesFromTuple`, `internal_new_from_data`): an upload that waits on a GPU, which neither the op
    (its index is on the device by then) nor a watched `.to` shows. Told by what holds the index (torch's list of
    indices alone: `_least_refs`) and by the user's line being a subscript (`copies.at_subscript`: the indices an
    autograd formula saved are held by torch alone too). A target built inside inference mode is told by its storage:
    its views keep no `_base` (`copies.host_born`)."""
    if type(indices) is not list or _least_refs(indices) > _FRESH_IN_A_LIST or type(target) not in PLAIN:
        return False  # an index the loop holds (`buf[idx]`, `buf[idx + 1]`): the usual case, first
    assert isinstance(target, torch.Tensor)
    if accelerator_in_use():
        if target.device.type in ("cpu", "meta"):
            return False
    elif target.is_meta or copied_here(target):
        return False
    return at_subscript()


def _least_refs(indices: list[Any]) -> int:
    """The fewest references any tensor among an op's indices has, read while no name here holds one."""
    least = sys.maxsize
    for position in range(len(indices)):
        if type(indices[position]) in PLAIN:
            refs = sys.getrefcount(indices[position])
            if refs < least:
                least = refs
    return least


def _uploads_its_value(
    target: object, indices: Any, args: tuple[Any, ...], kwargs: dict[str, Any], number: bool = False
) -> bool:
    """Whether an `index_put_` of a device tensor uploads its value first: a 0-d value in host memory is moved to the
    target's device (`value.to(self.device())`, a blocking copy) unless torch fills through a mask instead
    (`_put_by_mask`'s case, which reads the value on the host). `buf[idx] = torch.tensor(0.0)` with a tensor index,
    and `buf[idx] = 0.5`: torch makes a number's tensor in host memory for a target on an accelerator
    (`copies.number_copy_kind`). On a CPU run, by which tensors are host memory, and a value torch made of a number
    (`number`, `_value_of_a_number`) as the host memory it is on a GPU."""
    values = args[2] if len(args) > 2 else kwargs.get("values")
    if not isinstance(values, torch.Tensor) or values.dim() != 0 or not isinstance(target, torch.Tensor):
        return False
    if any(isinstance(index, torch.Tensor) and index.dtype in _MASK_DTYPES for index in indices if index is not None):
        return False  # the fill, or a put by mask, counted as that
    if accelerator_in_use():
        return target.device.type not in ("cpu", "meta") and values.device.type == "cpu"
    if number:  # at a subscript, as `copies.indexed_copy_kind` asks of a number's copy
        return number_copy_kind(target, False) is not None and at_subscript()
    return bool(_host_born) and copied_here(values) and not copied_here(target)


def _held_by_torch() -> int:
    """The references a tensor's Python object gains while torch's C++ holds the tensor too: 1 on a torch that keeps
    the object alive that way, 0 on one that does not. Measured once, on a tensor autograd saves for a backward."""
    with torch.inference_mode(False), torch.enable_grad():
        probe = torch.zeros((), requires_grad=True, device="cpu")  # not where a default device says
        alone = sys.getrefcount(probe)
        product = probe * probe  # saves `probe` in C++
        held = sys.getrefcount(probe) - alone
        del product
    return held


_HELD_BY_TORCH = _held_by_torch()  # at import: no stand-in stands in the probe's way
# A tensor held by a list alone (read as `_least_refs` reads it), past the reference torch's own hold adds: an index
# torch made for the call, where one the loop passes has the loop's own besides
_FRESH_IN_A_LIST = _least_refs([torch.empty(0, device="cpu")]) + _HELD_BY_TORCH


def _value_of_a_number(args: tuple[Any, ...]) -> bool:
    """On a CPU run, whether an `index_put_`'s value (`self, indices, values`) is the 0-d tensor torch made of a
    Python number for `buf[idx] = 0.5`. Nothing of Python's holds it: it has no more references than the list of
    indices torch made for the call, both held by the call's arguments alone (so read before any name here holds
    either), past the one torch's own hold adds to a tensor (`_HELD_BY_TORCH`), where a value the loop assigns
    (`buf[idx] = v`, `buf[idx] = x.sum()`) has the loop's own besides."""
    return (
        len(args) > 2
        and type(args[2]) in PLAIN
        and isinstance(args[1], list)
        and args[2].dim() == 0
        and sys.getrefcount(args[2]) <= sys.getrefcount(args[1]) + _HELD_BY_TORCH
        and not args[2]._is_view()
    )


def _put_by_mask(indices: Any, args: tuple[Any, ...], kwargs: dict[str, Any], number: bool = False) -> bool:
    """Whether an `index_put_` (`self, indices, values, accumulate`) reads its boolean mask's positions: a mask among
    its indices, and not the case torch runs as `masked_fill_` instead (`canDispatchToMaskedFill`: no accumulation,
    one index, a value of one element in host memory: `t[mask] = 0.0`, `t[mask] = -inf`, for which torch makes the
    number's tensor in host memory on a GPU too). A value of one element on the device (`t[mask] = x.mean()`) is not
    a fill: on a CPU run, one not host memory on a GPU run too (`_host_value`; `number`: `_value_of_a_number`)."""
    defined = [index for index in indices if index is not None]
    if not any(isinstance(index, torch.Tensor) and index.dtype in _MASK_DTYPES for index in defined):
        return False
    values = args[2] if len(args) > 2 else kwargs.get("values")
    accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
    fill = (
        not accumulate
        and len(defined) == 1
        and isinstance(values, torch.Tensor)
        and values.numel() == 1
        and _host_value(values, number)
    )
    return not fill


# The ops whose results are new tensors (not `index_put_`'s or `copy_`'s target, written in place): computed from host
# memory alone, they are host memory on a GPU run too (`_follow`)
_IN_PLACE = frozenset({_NO_IMPLICIT, "put", "copy"})


def _follow(static: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: object) -> None:
    """Mark the results of an op computed in host memory on a GPU run too: an index of a host-built tensor
    (`returns[done]`, `returns[idx]`, `returns[[0, 2]]`: torch refuses an index on another device than the target's
    but the host, so an index that runs leaves the result where the target is, whatever made its index: a list, a
    NumPy array, a host-built tensor), and a data-dependent op of host-built tensors alone (`torch.nonzero(done)`,
    `torch.unique(actions)`, `masked_select`). A read of one then waits for nothing, and its move to the device is
    an upload, as on a GPU. Before, a read of `returns[done]` counted on both runs. Called once a tensor is marked."""
    if static in _IN_PLACE:
        return
    if static != "mask":
        mark_computed(args, kwargs, result)
        return
    target = _first(args, kwargs)  # `index(self, indices)`
    if type(target) in PLAIN and copied_here(target):
        mark_host_results(result)


def _reads_host(kind: str, args: tuple[Any, ...]) -> bool:
    """Whether a data-dependent op reads host-built tensors alone (`copies.all_host_born`): on a GPU run too it waits
    for nothing. A collective always counts."""
    return bool(_host_born) and not kinds.COLLECTIVE.holds(kind) and all_host_born(args)


class ImplicitSyncMode(TorchDispatchMode):
    """Dispatch mode recording data-dependent aten ops (see the module docstring)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """Keep torch from wrapping `__torch_dispatch__` in `torch._disable_dynamo`: that wrapper imports dynamo on
        its first call (about 1.3 s, in a loop that never compiles) and adds a frame to every op. Dynamo stays out
        of this frame all the same: counting runs under `dynamo_skips_tripwire`, which puts tripwire's folder on
        dynamo's skip list as soon as dynamo is imported, before anything can compile."""
        return False

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """Let torch.compile compile while this mode is active: without it dynamo skips every frame under a dispatch
        mode and runs it eagerly, so counting would change what is counted. The mode still sees the ops compiled
        code dispatches at run time (all of them with the eager backends, inductor's fallbacks with inductor)."""
        return True

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if kwargs is None:
            kwargs = {}
        if _LOCAL.nested:  # inside an op counted whole by its kernel (`_COUNTED_WHOLE`): its decomposition's reads
            return func(*args, **kwargs)  # pass-through
        entry = _implicit_cache.get(_OP_KEY(func))  # `_op_static_kind` written out: every op of the loop asks
        static = entry[1] if entry is not None else _op_static_kind(func)
        if static == _NO_IMPLICIT:  # nearly every op: nothing to count, nothing to follow (`_IN_PLACE`)
            return func(*args, **kwargs)  # pass-through
        kind = _call_kind(static, args, kwargs)
        if kind is not None and not _reads_host(kind, args):
            for _ in range(_waits(kind, args, kwargs)):
                sync.deliver(_delivered(kind), implicit=not kinds.COLLECTIVE.holds(kind))
        result = func(*args, **kwargs)  # pass-through
        if _host_born:
            _follow(static, args, kwargs, result)
        return result


# Where a data-dependent op gets a counting kernel, when this torch build gives the op one there. The autograd keys
# see an op called from Python, from autograd's formulas or from an op that decomposes above autograd, and never one
# that another op's kernel runs inside itself (autograd is switched off below it): the ops a dispatch mode sees. A
# backend key is reached as well by an inference tensor's op outside inference mode (it has no autograd key).
_AUTOGRAD_KEYS: tuple[str, ...] = (
    "AutogradCPU",
    "AutogradCUDA",
    "AutogradHIP",
    "AutogradXPU",
    "AutogradMPS",
    "AutogradHPU",
)
_AUTOGRAD_KEYS += ("AutogradMTIA", "AutogradPrivateUse1", "AutogradOther", "AutogradNestedTensor", "AutogradXLA")
_BACKEND_KEYS = ("CPU", "CUDA", "HIP", "XPU", "MPS", "HPU", "MTIA", "PrivateUse1")
_targets: tuple[int, list[tuple[str, str, str, tuple[str, ...]]]] = (-1, [])
# op name -> its static kind: an op's tags never change once its schema is registered, so a listing after a library
# registered more ops reads only the new ones' schemas (a history fork server lists once, in `warm`, and each child
# then reads only what its tree registered: torchvision's ops). One whose schema could not be read is read again.
_static_of: dict[str, str] = {}


def kernels_available() -> bool:
    """Whether this torch can hand back an op's own kernel (`torch.library.get_kernel`, torch 2.9 and later): then
    implicit syncs are counted by kernels registered over the data-dependent ops alone (`ImplicitKernels`), else by a
    dispatch mode that sees every op (`ImplicitSyncMode`)."""
    return hasattr(torch.library, "get_kernel") and hasattr(torch._C, "_dispatch_get_all_op_names")


use_kernels = kernels_available()  # a switch for tests: False counts through the dispatch mode on any torch


def kernels_here() -> bool:
    """Whether this counter counts implicit syncs with kernels: torch can, and no process group is running. A
    collective's kernel blocks, and a kernel written in Python would hold the interpreter's lock through it while
    other ranks' work needs it; so where collectives run, the dispatch mode counts, as it counts a c10d op issued past
    the patched `torch.distributed` functions (a reference taken before the counter started)."""
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    return use_kernels and not distributed


def _has_kernel(op: str, key: str) -> bool:
    try:
        return bool(torch._C._dispatch_has_computed_kernel_for_dispatch_key(op, key))
    except RuntimeError:  # a key this torch build does not know
        return False


def _implicit_targets() -> list[tuple[str, str, str, tuple[str, ...]]]:
    """`(namespace, name.overload, static kind, keys)` of every registered op an implicit sync can come from: those
    tagged `data_dependent_output` or `dynamic_output_shape` (c10d's collectives are not: see `kernels_here`). An op
    with a CompositeImplicitAutograd kernel is left out: it decomposes before the backends, and what it decomposes
    into is counted (as a dispatch mode sees it). Listed again when ops have been registered since (a library
    loaded)."""
    global _targets
    names = torch._C._dispatch_get_all_op_names()
    if _targets[0] == len(names):
        return _targets[1]
    found = []
    for full in sorted(names):
        static = _static_of.get(full) or _read_static(full)
        if static is None or static == _NO_IMPLICIT or kinds.COLLECTIVE.holds(static):
            continue
        namespace, _, name = full.partition(".")[0].partition("::")
        composite = torch._C._dispatch_has_kernel_for_dispatch_key(full, "CompositeImplicitAutograd")
        if composite and static not in _COUNTED_WHOLE:
            continue
        # `_local_scalar_dense` run at a backend key outside autograd is another op's own read (a CPU `var`), but a
        # top-level one is `.item()`, already counted explicitly
        # (nor is a `copy_` there: every copy another op makes, `.to()`'s and `clone`'s, runs at its backend key; the
        # ones that matter are made at the top, `dst[i] = src`, and reach the autograd keys)
        wanted = _AUTOGRAD_KEYS + (() if name in ("_local_scalar_dense", "copy_") else _BACKEND_KEYS)
        keys = tuple(key for key in wanted if _has_kernel(full, key))
        if keys:
            found.append((namespace, full.split("::", 1)[1], static, keys))
    _targets = (len(names), found)
    return found


def read_op_schemas() -> None:
    """Read the schema of every op registered so far, once (`_static_of`): a history fork server's `warm`."""
    if kernels_available():
        _implicit_targets()


def _read_static(full: str) -> str | None:
    """The static kind of the op named `full` (`namespace::name.overload`) from its schema's tags, remembered in
    `_static_of`; None where the schema cannot be read here (nothing to count it by; not remembered: a library may
    define it later)."""
    qualified, _, overload = full.partition(".")
    namespace, _, name = qualified.partition("::")
    try:
        tags = torch._C._get_operation_overload(qualified, overload)[2]
    except RuntimeError:
        return None
    static = _static_of[full] = _static_kind(namespace, name, tags, overload)
    return static


def counting_here() -> bool:
    """Whether this thread counts implicit syncs: it entered a counter or runs carried work (`_LOCAL.implicit`), or
    torch carried a counting thread's modes to it (autograd's device threads run a backward with its caller's
    function modes, as they would a dispatch mode)."""
    if _LOCAL.implicit or _LOCAL.counting > 0 or in_counted_backward():
        return True
    stack = torch._C._len_torch_function_stack()
    return any(isinstance(torch._C._get_function_stack_at(index), ExplicitSyncMode) for index in range(stack))


def _counting_kernel(static: str, original: Any, autograd: bool, positions: tuple[int, ...]) -> Callable[..., Any]:
    """A kernel for one op and key: counts the call where this thread counts, then runs the op's own kernel. At a
    backend key it counts only an inference tensor's op outside inference mode (any other top-level call was counted
    at its autograd key; inside inference mode the dispatch mode counts, see `_InferenceWatch`), and a factory's,
    which reaches its backend key alone (`_FACTORY`); nothing run inside a counted op's kernel is counted."""
    call = original.call_boxed

    def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        args = numbers_as_tensors(args, positions)  # a wrapped number a C++ caller gave (a traced graph's constant)
        local = _LOCAL
        if local.suppress or local.nested or local.by_mode or is_compiling() or not counting_here():
            return call(keyset, *args, **kwargs)  # pass-through
        if not autograd and not static.startswith(_FACTORY):
            first = args[0] if args else None
            if not isinstance(first, torch.Tensor) or not first.is_inference() or torch.is_inference_mode_enabled():
                return call(keyset, *args, **kwargs)  # pass-through
        kind = _call_kind(static, args, kwargs)
        if kind is not None and not _reads_host(kind, args):
            for _ in range(_waits(kind, args, kwargs)):
                sync.deliver(_delivered(kind), implicit=True)
        result = _nested(call, keyset, args, kwargs)  # pass-through
        if _host_born:
            _follow(static, args, kwargs, result)
        return result

    return kernel


def _nested(call: Callable[..., Any], keyset: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A counted op's own kernel, run with `nested` raised: nothing it runs inside itself is counted again."""
    local = _LOCAL
    local.nested += 1
    try:
        return call(keyset, *args, **kwargs)  # pass-through
    finally:
        local.nested -= 1


# `t.copy_(2.5)`: torch takes a Python number for `src` as a 0-d host tensor marked a wrapped number, which reaches a
# Python kernel as the number again, and the op's own kernel refuses a number (LeanRL's
# `optimizer.param_groups[0]["lr"].copy_(lrnow)` failed at the kernel's pass-through). It is handed on as the tensor
# torch made (`tripwire.common.kernels.wrapped`); copied into `t` it casts to `t`'s dtype as the wrapped number does.


def _copy_kernel(original: Any) -> Callable[..., Any]:
    """`_counting_kernel` for `aten::copy_` at an autograd key, shortened: it runs at every tensor assignment
    (`buffer[step] = obs`), nearly always a copy within one place, so it classifies the call directly
    (`copies.indexed_copy_kind`, which reads host memory itself) and marks nothing nested unless it counted."""
    call = original.call_boxed

    def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        given = args  # a number as given, for the count (`copies.number_copy_kind`)
        if len(args) > 1 and type(args[1]) in NUMBERS:  # `t.copy_(2.5)`: see above
            args = (args[0], wrapped(args[1]), *args[2:])
        local = _LOCAL
        if local.suppress or local.nested or local.by_mode or not (local.counting > 0 or counting_here()):
            return call(keyset, *args, **kwargs)  # pass-through
        kind = indexed_copy_kind(given, kwargs)
        if kind is None or is_compiling():
            return call(keyset, *args, **kwargs)  # pass-through
        sync.deliver(kind, implicit=True)
        return _nested(call, keyset, args, kwargs)  # pass-through

    return kernel


class _InferenceWatch:
    """While counters run with kernels: inside `torch.inference_mode` autograd is off for every op, so the kernels at
    the autograd keys never run and a backend kernel cannot tell an op from one another op runs inside itself. There
    the dispatch mode counts, pushed on entering inference mode on a counting thread and popped on leaving it."""

    def __init__(self, installation: Installation) -> None:
        cls = torch.autograd.grad_mode.inference_mode
        enter, leave = cls.__enter__, cls.__exit__
        watch = self

        def __enter__(self: Any) -> None:
            enter(self)  # pass-through
            watch.entered()

        def __exit__(self: Any, *exc: Any) -> None:
            try:
                watch.left()
            finally:
                leave(self, *exc)  # pass-through

        patch(installation, cls, "__enter__", __enter__)
        patch(installation, cls, "__exit__", __exit__)
        self.stack = threading.local()
        self.entered()  # a counter started inside inference mode

    def entered(self) -> None:
        pushed: list[TorchDispatchMode | None] = self.stack.__dict__.setdefault("pushed", [])
        mode = None
        if torch.is_inference_mode_enabled() and counting_here() and not any(pushed):
            mode = ImplicitSyncMode()
            mode.__enter__()
            _LOCAL.by_mode += 1
        pushed.append(mode)

    def left(self) -> None:
        pushed: list[TorchDispatchMode | None] = self.stack.__dict__.get("pushed", [])
        mode = pushed.pop() if pushed else None
        if mode is not None:
            _LOCAL.by_mode -= 1
            mode.__exit__(None, None, None)

    def close(self) -> None:
        self.left()  # the mode pushed for a counter started inside inference mode


class ImplicitKernels:
    """Implicit syncs counted by kernels registered over the data-dependent ops' own (`torch.library`): only those ops
    pay for counting, where a dispatch mode costs every op a trip through Python. Counted on the threads a dispatch
    mode would be active on; `close` restores each op's own kernel."""

    def __init__(self, installation: Installation, *, whole_only: bool = False) -> None:
        """`whole_only`: only the ops counted whole (`_COUNTED_WHOLE`), beside the dispatch mode, which counts the
        rest (it meets those ops decomposed) and needs no inference-mode watch."""
        self.libraries: list[torch.library.Library] = []
        self.watch: _InferenceWatch | None = None
        static_of = {
            f"{namespace}::{name}": (static, keys)
            for namespace, name, static, keys in _implicit_targets()
            if not whole_only or static in _COUNTED_WHOLE
        }

        def make(full: str, key: str, original: Any) -> Callable[..., Any]:
            static = static_of[full][0]
            if static == "copy":
                return _copy_kernel(original)
            return _counting_kernel(static, original, key.startswith("Autograd"), tensor_positions(full))

        targets = [(full, key) for full, (_, keys) in static_of.items() for key in keys]
        try:
            self.libraries = override_kernels(targets, make)
            if not whole_only:
                self.watch = _InferenceWatch(installation)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Restore every op's own kernel (the inference-mode patch is restored with the installation's others)."""
        if self.watch is not None:
            self.watch.close()
            self.watch = None
        restore_kernels(self.libraries)
