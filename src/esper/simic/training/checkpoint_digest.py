"""A checkpoint's content digest: written by `--save`, checked by `--resume`, so silent corruption is refused.

The zip archive's CRCs catch a damaged file, and the checkpoint schema catches a value of the wrong type, shape or
range; neither catches a flipped mantissa bit in a file whose CRCs were written after the flip (a copy tool, a
memory error before the write, a hand edit): that is a valid value. The digest is a sha256 of everything the
checkpoint holds, in order: every field's name, every plain value by its repr, every tensor's dtype, shape and raw
bytes. It leaves out only what a resume never reads: Adam's kernel flags (`fused`, `foreach`, `capturable`,
`differentiable`), which the resuming run replaces with its own. A checkpoint written before digests has none and
resumes with a note.

Tensor bytes are read through DLPack, in place, on the host: `content_digest` takes a payload in host memory, and
refuses a device tensor. `save_checkpoint` makes that payload with `host_copy`, the one host copy of the state a save
needs (what `torch.save` would make of device tensors anyway, one wait per storage on a GPU), then digests and writes
that copy: a GPU run waits once per storage, not twice, and a CPU run's accounting counts those waits at the same
line (`torch.save` of device tensors is counted, on a CPU run too; what `torch.load(..., map_location="cpu")` returns
is host memory on both).
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Mapping
from typing import Any

import numpy
import torch

DIGEST_KEY = "digest"
KERNEL_FLAGS = frozenset({"fused", "foreach", "capturable", "differentiable"})  # the resuming run's own


def host_copy(payload: Mapping[str, Any]) -> dict[str, Any]:
    """`payload` with every tensor in host memory: written by `torch.save` and read back (`map_location="cpu"`), so
    the copy is what a resume reads, and the shared storages stay shared."""
    buffer = io.BytesIO()
    torch.save(dict(payload), buffer)
    buffer.seek(0)
    copied: dict[str, Any] = torch.load(buffer, map_location="cpu", weights_only=True)
    return copied


def content_digest(payload: Mapping[str, Any]) -> str:
    """`sha256:<hex>` of `payload` without its own digest field (module docstring); every tensor in host memory."""
    hasher = hashlib.sha256()
    _update(hasher, {key: value for key, value in payload.items() if key != DIGEST_KEY}, "")
    return f"sha256:{hasher.hexdigest()}"


def _update(hasher: Any, value: Any, path: str) -> None:
    """Hash `value`, found at `path`, into `hasher`: its structure, plain values and tensor bytes."""
    if isinstance(value, torch.Tensor):
        hasher.update(f"{path}:tensor:{value.dtype}:{value.layout}:{tuple(value.shape)};".encode())
        hasher.update(_tensor_bytes(value))
    elif isinstance(value, Mapping):
        hasher.update(f"{path}:{type(value).__name__}:{len(value)};".encode())
        for key, item in value.items():
            if not (key in KERNEL_FLAGS and "param_groups" in path):
                _update(hasher, item, f"{path}/{key!r}")
    elif isinstance(value, (list, tuple)):
        hasher.update(f"{path}:{type(value).__name__}:{len(value)};".encode())
        for index, item in enumerate(value):
            _update(hasher, item, f"{path}[{index}]")
    else:
        hasher.update(f"{path}={value!r};".encode())


def _tensor_bytes(tensor: torch.Tensor) -> Any:
    """A host tensor's values as a buffer, read in place (a meta tensor has none; a sparse or quantized one, as a
    field the schema leaves open may hold, is read as its dense or integer form)."""
    if tensor.device.type == "meta":
        return b"<meta>"
    if tensor.device.type != "cpu":
        raise ValueError(f"content_digest reads host memory, not {tensor.device}: digest host_copy(payload)")
    if tensor.layout != torch.strided:
        tensor = tensor.to_dense()
    if tensor.is_quantized:
        tensor = tensor.int_repr()
    try:
        raw = tensor.detach().resolve_conj().resolve_neg().contiguous().reshape(-1).view(torch.uint8)
        return numpy.from_dlpack(raw)
    except (BufferError, RuntimeError, TypeError) as error:  # a kind DLPack cannot export: its kind, and why
        return f"<{type(error).__name__}>".encode()
