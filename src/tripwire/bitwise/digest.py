"""Bitwise digests of tensors, state dicts, RNG states and plain values (sha256 over raw bytes).

A tensor digest covers its dtype, shape and the bytes of a contiguous CPU copy, so -0.0 and 0.0, and
NaNs with different payloads, get different digests (`torch.equal` would call the first pair equal and
the second unequal to itself). Digests are 64 hex characters; `short(d)` gives the 16 shown in
messages. Reading a mismatch: equal digests mean bitwise-equal values; a different digest for the
same name means at least one bit, the dtype or the shape changed. Non-tensor leaves (floats, ints,
strings, `param_groups` entries) are hashed from a canonical encoding (floats by their IEEE bytes). A NumPy
array is digested as the tensor of its dtype and bytes (`numpy_tensor`), a NumPy scalar as its Python value, so
state a loop keeps in NumPy (a rollout buffer) is compared bit for bit, never by a truncated repr; any other
object (a dataclass of tensors, an optimizer, a deque) by its fields (`tripwire.bitwise.fields`). Digesting copies
device tensors to the host; it runs under `ignore_syncs()` so it never counts against a sync budget.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import struct
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

from tripwire.bitwise.fields import an_object, object_state, plain_leaf
from tripwire.common.context import usable_cpus
from tripwire.common.names import distinct, key_name
from tripwire.sync import ignore_syncs

DISPLAY_CHARS = 16


def short(digest: str) -> str:
    """The first 16 hex characters of a digest, for messages."""
    return digest[:DISPLAY_CHARS]


# A plain tensor's own methods, past the sync counter's stand-ins on `torch.Tensor` (this module's reads run inside
# `ignore_syncs`, where a stand-in only calls through, a dozen calls a checkpointed tensor:
# docs/measurements.md, "The probe paid for being watched")
_BASE = torch._C.TensorBase
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
_NUMPY_DTYPES = frozenset({torch.float16, torch.float32, torch.float64, torch.complex64, torch.complex128, torch.bool})
_NUMPY_DTYPES |= {torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64}


def _tensor_bytes(tensor: torch.Tensor) -> Any:
    """The raw bytes of `tensor` as a dense, contiguous CPU buffer with conj/neg views resolved (a NumPy array of
    uint8, read by `hashlib` without a copy). Each step runs only where it changes something: a dense contiguous CPU
    tensor, what a checkpoint holds nearly always, is read in place."""
    if type(tensor) in _PLAIN_TENSORS and tensor.dtype in _NUMPY_DTYPES and _read_in_place(tensor):
        return _BASE.numpy(_BASE.detach(tensor))  # the same buffer, in the tensor's own dtype
    data = tensor.detach()
    if data.layout != torch.strided:
        data = data.to_dense()
    if data.is_conj() or data.is_neg():
        data = data.resolve_conj().resolve_neg()
    if data.device.type != "cpu":
        data = data.cpu()
    flat = data.reshape(-1)  # a copy at stride 1 where `data` is not contiguous
    if flat.stride(0) != 1:  # one (or no) element is contiguous at any stride (a bfloat16 `x[:, j]` of a 1-row `x`),
        flat = flat.clone(memory_format=torch.contiguous_format)  # but is viewed as bytes only at stride 1
    return flat.view(torch.uint8).numpy()


def _tensor_parts(tensor: torch.Tensor) -> tuple[bytes, Any]:
    """What a tensor's digest hashes: its header (dtype and shape) and its payload (its raw bytes, `<meta>` for a
    meta tensor). Reading the bytes may copy to the host, under `ignore_syncs()`."""
    if tensor.is_nested:  # its tensors one by one: a nested tensor has no one shape, nor one buffer to read
        parts = [_tensor_parts(part) for part in tensor.unbind()]
        header = f"nested|{tensor.dtype}|{len(parts)}|".encode() + b"".join(head for head, _ in parts)
        return header, b"".join(bytes(payload) for _, payload in parts)
    header = f"tensor|{tensor.dtype}|{tuple(tensor.shape)}|".encode()
    if tensor.device.type == "meta":
        return header, b"<meta>"
    with ignore_syncs():
        if tensor.is_quantized:  # its integers and what they stand for: the same integers at another scale differ
            return header + _quantization(tensor), _tensor_bytes(tensor)
        return header, _tensor_bytes(tensor)


def _quantization(tensor: torch.Tensor) -> bytes:
    """A quantized tensor's scheme, scale(s) and zero point(s), in their bits."""
    scheme = tensor.qscheme()
    if scheme in (torch.per_tensor_affine, torch.per_tensor_symmetric):
        return f"{scheme}|{float(tensor.q_scale()).hex()}|{int(tensor.q_zero_point())}|".encode()
    scales, zeros = tensor.q_per_channel_scales(), tensor.q_per_channel_zero_points()
    axis = tensor.q_per_channel_axis()
    return f"{scheme}|{axis}|".encode() + bytes(_tensor_bytes(scales)) + b"|" + bytes(_tensor_bytes(zeros)) + b"|"


def _sha256(header: bytes, payload: Any) -> str:
    hasher = hashlib.sha256(header)
    hasher.update(payload)
    return hasher.hexdigest()


def tensor_digest(tensor: torch.Tensor) -> str:
    """sha256 hex of dtype, shape and raw bytes; meta tensors hash their dtype and shape only."""
    return _sha256(*_tensor_parts(tensor))


# Tensors of at least this many bytes, read in place (dense, contiguous, in host memory), are hashed on a thread pool
# when the process may use several CPUs: hashlib releases the GIL while it hashes a large buffer, so a checkpoint of
# a policy and its optimizer (tens of MB, most of a probe's cost) is hashed on every core at once, with no copy held
# beyond the one at hand. A tensor whose bytes must be copied (a device tensor, a view) is hashed in the calling
# thread as before, one copy at a time: a GPU model's checkpoint must not be copied to the host whole. A pool thread
# only hashes memory, never running a torch op. Same digests either way.
PARALLEL_HASH_BYTES = 1 << 20
_POOL: tuple[int, ThreadPoolExecutor] | None = None


def _hash_pool() -> ThreadPoolExecutor | None:
    """The digest threads (None on one CPU). Made anew in a forked child, where the parent's threads do not exist."""
    global _POOL
    cpus = usable_cpus()
    if cpus < 2:
        return None
    if _POOL is None or _POOL[0] != os.getpid():
        _POOL = (os.getpid(), ThreadPoolExecutor(min(cpus, 4), thread_name_prefix="tripwire-digest"))
    return _POOL[1]


def _read_in_place(tensor: torch.Tensor) -> bool:
    """Whether `_tensor_bytes` reads this tensor's own memory (no copy)."""
    return (
        tensor.is_cpu
        and not tensor.is_nested
        and tensor.layout == torch.strided
        and tensor.is_contiguous()
        and not (tensor.is_conj() or tensor.is_neg())
    )


def leaf_digests(items: Sequence[Any]) -> list[str]:
    """`leaf_digest` of every item, in order; the large tensors among them are hashed in parallel."""
    return [digest for digest, _, _ in leaf_records(items)]


def leaf_records(items: Sequence[Any], keep: bool = False) -> list[tuple[str, str, torch.Tensor | None]]:
    """`(leaf_digest, leaf_spec, leaf_value)` of every item, in order (the value only with `keep`, else None): what a
    checkpoint stores of its leaves. The large tensors among them are hashed in parallel; the others each in one pass
    (`leaf_record`)."""
    with ignore_syncs():  # the probe's reads: never counted, under the stand-ins or the function mode
        large = [
            index
            for index, item in enumerate(items)
            if isinstance(item, torch.Tensor)
            and item.numel() * item.element_size() >= PARALLEL_HASH_BYTES  # not `nbytes`: a sparse tensor refuses it
            and _read_in_place(item)
        ]
        pool = _hash_pool() if len(large) > 1 else None
        if pool is None:
            return [_leaf_record(item, keep) for item in items]
        pending: dict[int, Future[str]] = {i: pool.submit(_sha256, *_tensor_parts(items[i])) for i in large}
        return [
            (pending[index].result(), leaf_spec(item), leaf_value(item) if keep else None)
            if index in pending
            else _leaf_record(item, keep)
            for index, item in enumerate(items)
        ]


def leaf_record(leaf: Any, keep: bool = False) -> tuple[str, str, torch.Tensor | None]:
    """`(leaf_digest, leaf_spec, leaf_value)` of one leaf (the value only with `keep`). A plain dense CPU tensor of a
    NumPy dtype, nearly every leaf of a checkpoint, is read once for all three, its header and spec looked up by dtype
    and shape, and a bool, int, float, string or None (an optimizer's settings) skips the checks for other kinds: the
    same strings and bytes the three functions make, for a few microseconds less per leaf."""
    with ignore_syncs():  # the probe's reads: never counted, under the stand-ins or the function mode
        return _leaf_record(leaf, keep)


# A plain tensor's digest header and spec, by dtype and shape: a loop's checkpoints digest the same few dozen shapes
# (a policy's and its optimizer's tensors) at every checkpoint
_LAYOUTS: dict[tuple[torch.dtype, torch.Size], tuple[bytes, str]] = {}
# A builtin scalar's spec (`leaf_spec`) and the dtype of its kept value (`leaf_value`; None: no value)
_SCALARS: dict[type, tuple[str, torch.dtype | None]] = {bool: ("bool", torch.bool), int: ("int", torch.int64)}
_SCALARS |= {float: ("float", torch.float64), str: ("str", None), type(None): ("none", None)}
_TENSOR = torch._C._VariableFunctions.tensor  # `torch.tensor`, past the sync counter's stand-in
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_DECIMAL_BITS = 12_000  # under Python's default limit of 4,300 decimal digits for `str(int)`


def _leaf_record(leaf: Any, keep: bool) -> tuple[str, str, torch.Tensor | None]:
    """`leaf_record`, inside `ignore_syncs`."""
    kind = type(leaf)
    if kind in _PLAIN_TENSORS and (dtype := leaf.dtype) in _NUMPY_DTYPES and _read_in_place(leaf):
        key = (dtype, leaf.shape)
        layout = _LAYOUTS.get(key)
        if layout is None:
            if len(_LAYOUTS) >= 4096:
                _LAYOUTS.clear()
            shape = tuple(key[1])
            header = f"tensor|{dtype}|{shape}|".encode()
            layout = _LAYOUTS[key] = (header, f"{str(dtype).removeprefix('torch.')}[{','.join(map(str, shape))}]")
        data = _BASE.detach(leaf) if leaf.requires_grad else leaf
        return _sha256(layout[0], _BASE.numpy(data)), layout[1], _BASE.clone(data) if keep else None
    scalar = _SCALARS.get(kind)
    if scalar is not None:
        spec, value_dtype = scalar
        value = None
        if keep and value_dtype is not None and (kind is not int or _INT64_MIN <= leaf <= _INT64_MAX):
            value = _TENSOR(leaf, dtype=value_dtype)
        return _plain_digest(leaf), spec, value
    return leaf_digest(leaf), leaf_spec(leaf), leaf_value(leaf) if keep else None


def _canonical(value: Any) -> Any:
    """A JSON-encodable form of a non-tensor leaf that keeps every bit (floats as IEEE hex)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):  # in hex past what `str` may print (Python's limit on decimal digits)
        return {"int": str(value)} if value.bit_length() <= _DECIMAL_BITS else {"int_hex": hex(value)}
    if isinstance(value, float):
        return {"float": struct.pack("<d", value).hex()}
    if isinstance(value, Mapping):
        return {"map": [[str(k), _canonical(v)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return {"seq": [_canonical(v) for v in value]}
    if isinstance(value, torch.dtype | torch.device):
        return {"repr": str(value)}
    return {"repr": repr(value)}


def value_digest(value: Any) -> str:
    """Digest of one value: a tensor (or NumPy array), a generator's state, or a canonical plain value."""
    value = plain_leaf(value)
    if isinstance(value, torch.Tensor):
        return tensor_digest(value)
    if isinstance(value, torch.Generator):
        return tensor_digest(value.get_state())
    if isinstance(value, torch.nn.Module):
        return combined_digest(state_digest(value.state_dict()))
    if isinstance(value, (Mapping, list, tuple)) and value:
        return combined_digest(state_digest(value))
    if an_object(value):  # by its fields, never by its repr (which shows a large tensor's ends only)
        return value_digest(object_state(value))
    return _plain_digest(value)


_PLAIN_DIGESTS: dict[tuple[type, Any], str] = {}  # by type and value: an optimizer's settings, at every checkpoint
_CACHED_PLAIN = (bool, int, str, type(None))


def _plain_digest(value: Any) -> str:
    """Digest of the canonical JSON encoding of a plain (non-tensor) value. A bool, int, string, None or float is
    cached by its type and value; not a zero or NaN float, whose equal values differ in their bits (-0.0, payloads)."""
    kind = type(value)
    if kind in _CACHED_PLAIN or (kind is float and value != 0.0 and value == value):
        key = (kind, value)
        digest = _PLAIN_DIGESTS.get(key)
        if digest is None:
            if len(_PLAIN_DIGESTS) >= 4096:
                _PLAIN_DIGESTS.clear()
            digest = _PLAIN_DIGESTS[key] = _encoded_digest(value)
        return digest
    return _encoded_digest(value)


def _encoded_digest(value: Any) -> str:
    encoded = json.dumps(_canonical(value), separators=(",", ":"))
    return hashlib.sha256(b"value|" + encoded.encode()).hexdigest()


_OWN_LEAVES = (Mapping, list, tuple, torch.Tensor, torch.Generator, torch.nn.Module)


def _structured(value: Any) -> bool:
    """Whether a list item is digested on its own (a container, a tensor, a NumPy array, a generator, a module, an
    object), not inside a plain list, whose items are digested by their exact text: a module's or generator's repr
    names its layers or address, never its weights or state."""
    return isinstance(value, _OWN_LEAVES) or type(value).__name__ == "ndarray" or an_object(value)


def leaves(prefix: str, value: Any) -> list[tuple[str, Any]]:
    """`(dotted name, leaf)` pairs of a nested mapping/sequence, in its own order: what `state_digest` digests.

    A leaf is a tensor, a generator, a module, a plain value, or a list of plain values (digested whole); an empty
    mapping is the leaf `{}` named `prefix` (or `<empty>`). A name two leaves would share is numbered on the later
    one (`tripwire.common.names`), so neither is left out.
    """
    out: list[tuple[str, Any]] = []
    _add_leaves(prefix, value, out)
    names = [name for name, _ in out]
    unique = distinct(names)
    if unique is not names:  # a key `"a.b"` beside `a` -> `b`, or `1` beside `"1"`: the later one `#2`
        out = list(zip(unique, (leaf for _, leaf in out)))
    return out


_PLAIN_LEAVES = frozenset(_PLAIN_TENSORS) | frozenset(_SCALARS)  # never containers: a leaf as they are


def _add_leaves(prefix: str, value: Any, out: list[tuple[str, Any]]) -> None:
    """Append the leaves of `value` to `out` (a checkpoint's optimizer state has a few hundred, at every checkpoint:
    one call per level, not a generator per level that every leaf is passed up through)."""
    kind = type(value)
    if kind in _PLAIN_LEAVES:
        out.append((prefix, value))
    elif kind is dict or isinstance(value, Mapping):
        items = list(value.items())  # never `not value`: a mapping of tensors (a TensorDict) refuses bool()
        if not items:
            out.append((prefix or "<empty>", {}))
        for key, item in items:
            name = key_name(key)
            _add_leaves(f"{prefix}.{name}" if prefix else name, item, out)
    elif isinstance(value, (list, tuple)) and any(_structured(v) for v in value):
        for index, item in enumerate(value):
            _add_leaves(f"{prefix}.{index}" if prefix else str(index), item, out)
    elif an_object(value):  # by its fields (`tripwire.bitwise.fields`), never by its repr
        _add_leaves(prefix, object_state(value), out)
    else:
        out.append((prefix, value))


def leaf_digest(leaf: Any) -> str:
    """Digest of one leaf of `leaves` (tensor or NumPy array, generator, module or plain value)."""
    leaf = plain_leaf(leaf)
    if isinstance(leaf, torch.Tensor):
        return tensor_digest(leaf)
    if isinstance(leaf, (torch.Generator, torch.nn.Module)):
        return value_digest(leaf)
    return _plain_digest(leaf)


def leaf_spec(leaf: Any) -> str:
    """What a leaf is, apart from its value: `float32[64,4]` for a tensor, `float`, `int`, `list[3]`, ...

    Two trajectories whose leaf under one name has different specs changed structure (reshaped or retyped),
    not only values.
    """
    leaf = plain_leaf(leaf)
    if isinstance(leaf, torch.Tensor):
        dtype = str(leaf.dtype).removeprefix("torch.")
        if leaf.is_nested:  # `float32[2][3]`: each of its tensors' shape
            return dtype + "".join(f"[{','.join(map(str, part.shape))}]" for part in leaf.unbind())
        return f"{dtype}[{','.join(str(size) for size in leaf.shape)}]"
    if isinstance(leaf, bool):
        return "bool"
    if isinstance(leaf, (list, tuple)):
        return f"list[{len(leaf)}]"
    if isinstance(leaf, torch.Generator):
        return "generator"
    if leaf is None:
        return "none"
    return type(leaf).__name__


def leaf_value(leaf: Any) -> torch.Tensor | None:
    """A detached CPU copy of a leaf's numbers, for measuring how far two values are apart; None when it has none.

    Python floats become float64 scalars, ints int64, lists of numbers a 1-d tensor; strings and objects have no
    value to measure (their digests still compare).
    """
    leaf = plain_leaf(leaf)
    with ignore_syncs():
        if isinstance(leaf, torch.Tensor):
            if type(leaf) in _PLAIN_TENSORS and _read_in_place(leaf):
                return _BASE.clone(_BASE.detach(leaf))  # what the line below makes of it, in two calls
            if leaf.device.type == "meta" or leaf.layout != torch.strided or leaf.is_nested:
                return None
            return leaf.detach().resolve_conj().resolve_neg().to("cpu", copy=True)
        if isinstance(leaf, torch.Generator):
            return leaf.get_state().clone()
        if isinstance(leaf, bool):
            return torch.tensor(leaf)
        if isinstance(leaf, float):
            return torch.tensor(leaf, dtype=torch.float64)
        if isinstance(leaf, int):  # one beyond int64 (an unsigned 64-bit seed) has no kept value; its digest is exact
            return torch.tensor(leaf, dtype=torch.int64) if _INT64_MIN <= leaf <= _INT64_MAX else None
        if isinstance(leaf, (list, tuple)) and leaf and all(isinstance(v, (int, float)) for v in leaf):
            floating = any(isinstance(v, float) for v in leaf)
            try:
                return torch.tensor(list(leaf), dtype=torch.float64 if floating else torch.int64)
            except (OverflowError, RuntimeError):
                return None
    return None


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    """Add one digest per leaf of a nested mapping/sequence (see `leaves`)."""
    named = leaves(prefix, value)
    out.update(zip((name for name, _ in named), leaf_digests([leaf for _, leaf in named])))


def state_digest(mapping: Mapping[str, Any] | Iterable[Any], prefix: str = "") -> dict[str, str]:
    """`{dotted.name: digest}` for a state dict, in its own order; nested dicts/lists are flattened.

    `optimizer.state_dict()` gives names such as `state.0.exp_avg` and `param_groups.0.lr`.
    """
    out: dict[str, str] = {}
    _flatten(prefix, mapping, out)
    return out


def combined_digest(digests: Mapping[str, str]) -> str:
    """One digest over `{name: digest}` (names sorted, so only content matters)."""
    hasher = hashlib.sha256(b"combined|")
    for name in sorted(digests):
        hasher.update(f"{name}\0{digests[name]}\n".encode())
    return hasher.hexdigest()


def rng_digest(generator: torch.Generator | None = None, *, include_cuda: bool | None = None) -> dict[str, str]:
    """Digests of RNG state: the given generator, or the global torch CPU (+CUDA), `random`, NumPy RNGs.

    `include_cuda=None` includes every CUDA device's RNG when CUDA is available.
    """
    if generator is not None:
        return {f"generator.{generator.device.type}": tensor_digest(generator.get_state())}
    digests = {"torch.cpu": tensor_digest(torch.get_rng_state())}
    if include_cuda is None:
        include_cuda = torch.cuda.is_available()
    if include_cuda:
        for index, state in enumerate(torch.cuda.get_rng_state_all()):
            digests[f"torch.cuda.{index}"] = tensor_digest(state)
    digests["python.random"] = value_digest(list(random.getstate()))
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy ships with torch wheels
        return digests
    kind, keys, pos, has_gauss, cached = numpy.random.get_state(legacy=True)
    key_bytes = numpy.asarray(keys).tobytes().hex()
    digests["numpy.random"] = value_digest([kind, key_bytes, int(pos), int(has_gauss), float(cached)])
    return digests
