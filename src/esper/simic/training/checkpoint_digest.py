"""A checkpoint's content digest: written by `--save`, checked by `--resume`, so silent corruption is refused.

The zip archive's CRCs catch a damaged file, and the checkpoint schema catches a value of the wrong type, shape or
range; neither catches a flipped mantissa bit in a file whose CRCs were written after the flip (a copy tool, a
memory error before the write, a hand edit): that is a valid value. The digest is a sha256 of everything the
checkpoint holds, in order: every field's name, every plain value by its repr, every tensor's dtype, shape and raw
bytes. It leaves out only what a resume never reads: Adam's kernel flags (`fused`, `foreach`, `capturable`,
`differentiable`), which the resuming run replaces with its own. A checkpoint written before digests has none and
resumes with a note.

Tensor bytes are read through DLPack, in place, on the host: no host copy of the trainer's own (a GPU run's state is
hashed as `torch.save` writes it, a host copy that `torch.save` makes anyway), so saving and resuming add no sync to
the run's accounting.
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


def content_digest(payload: Mapping[str, Any]) -> str:
    """`sha256:<hex>` of `payload` without its own digest field (module docstring)."""
    body: Any = {key: value for key, value in payload.items() if key != DIGEST_KEY}
    if not _on_host(body):
        buffer = io.BytesIO()
        torch.save(body, buffer)
        buffer.seek(0)
        body = torch.load(buffer, map_location="cpu", weights_only=True)
    hasher = hashlib.sha256()
    _update(hasher, body, "")
    return f"sha256:{hasher.hexdigest()}"


def _on_host(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.device.type == "cpu"
    if isinstance(value, Mapping):
        return all(_on_host(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return all(_on_host(item) for item in value)
    return True


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
    if tensor.layout != torch.strided:
        tensor = tensor.to_dense()
    if tensor.is_quantized:
        tensor = tensor.int_repr()
    try:
        raw = tensor.detach().resolve_conj().resolve_neg().contiguous().reshape(-1).view(torch.uint8)
        return numpy.from_dlpack(raw)
    except (BufferError, RuntimeError, TypeError) as error:  # a kind DLPack cannot export: its kind, and why
        return f"<{type(error).__name__}>".encode()
