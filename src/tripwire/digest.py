"""Bitwise digests of tensors, state dicts, RNG states and plain values (sha256 over raw bytes).

A tensor digest covers its dtype, shape and the bytes of a contiguous CPU copy, so -0.0 and 0.0, and
NaNs with different payloads, get different digests (`torch.equal` would call the first pair equal and
the second unequal to itself). Digests are 64 hex characters; `short(d)` gives the 16 shown in
messages. Reading a mismatch: equal digests mean bitwise-equal values; a different digest for the
same name means at least one bit, the dtype or the shape changed. Non-tensor leaves (floats, ints,
strings, `param_groups` entries) are hashed from a canonical encoding (floats by their IEEE bytes).
Digesting copies device tensors to the host; it runs under `ignore_syncs()` so it never counts
against a sync budget.
"""

from __future__ import annotations

import hashlib
import json
import random
import struct
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from tripwire.sync import ignore_syncs

DISPLAY_CHARS = 16


def short(digest: str) -> str:
    """The first 16 hex characters of a digest, for messages."""
    return digest[:DISPLAY_CHARS]


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    """Raw bytes of a contiguous CPU copy of `tensor` (dense; conj/neg views resolved)."""
    data = tensor.detach()
    if data.layout != torch.strided:
        data = data.to_dense()
    data = data.resolve_conj().resolve_neg().cpu().contiguous().reshape(-1)
    return data.view(torch.uint8).numpy().tobytes()


def tensor_digest(tensor: torch.Tensor) -> str:
    """sha256 hex of dtype, shape and raw bytes; meta tensors hash their dtype and shape only."""
    hasher = hashlib.sha256()
    hasher.update(f"tensor|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
    if tensor.device.type == "meta":
        hasher.update(b"<meta>")
    else:
        with ignore_syncs():
            hasher.update(_tensor_bytes(tensor))
    return hasher.hexdigest()


def _canonical(value: Any) -> Any:
    """A JSON-encodable form of a non-tensor leaf that keeps every bit (floats as IEEE hex)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return {"int": str(value)}
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
    """Digest of one value: a tensor, a generator's state, or a canonical plain value."""
    if isinstance(value, torch.Tensor):
        return tensor_digest(value)
    if isinstance(value, torch.Generator):
        return tensor_digest(value.get_state())
    if isinstance(value, torch.nn.Module):
        return combined_digest(state_digest(value.state_dict()))
    if isinstance(value, (Mapping, list, tuple)) and value:
        return combined_digest(state_digest(value))
    return _plain_digest(value)


def _plain_digest(value: Any) -> str:
    """Digest of the canonical JSON encoding of a plain (non-tensor) value."""
    encoded = json.dumps(_canonical(value), separators=(",", ":"))
    return hashlib.sha256(b"value|" + encoded.encode()).hexdigest()


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    """Add one digest per tensor leaf of a nested mapping/sequence; other leaves per-key too."""
    if isinstance(value, Mapping):
        if not value:
            out[prefix or "<empty>"] = _plain_digest({})
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), item, out)
    elif isinstance(value, (list, tuple)) and any(isinstance(v, (Mapping, list, tuple, torch.Tensor)) for v in value):
        for index, item in enumerate(value):
            _flatten(f"{prefix}.{index}" if prefix else str(index), item, out)
    elif isinstance(value, torch.Tensor):
        out[prefix] = tensor_digest(value)
    else:
        out[prefix] = _leaf_digest(value)


def _leaf_digest(value: Any) -> str:
    """Digest of a non-container leaf (tensor, generator or plain value)."""
    if isinstance(value, (torch.Tensor, torch.Generator, torch.nn.Module)):
        return value_digest(value)
    return _plain_digest(value)


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
