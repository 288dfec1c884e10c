"""Kept values: the numbers behind a trajectory's digests, saved once per distinct tensor and read back lazily.

A values file (`values.pt`) maps each checkpoint's tensor names to their digests, and each digest to its tensor.
Tensors are keyed by digest, so one that appears twice (a network's weights and the optimizer's view of the same
parameters, a layer no step changed) is stored once. With a `store` folder, shared by every result of a history
walk, each distinct tensor is one file there (`store/ab/abcdef....pt`), written once whatever the number of
commits that hold it: a walk over a hundred commits, most of them bitwise refactors, keeps about as many tensors as
its few numeric changes made. Reading is lazy: a tensor is loaded when a comparison asks for it.

Files are written with `torch.save` and read with `weights_only=True`: a crafted file cannot run code.
"""

from __future__ import annotations

import io
import os
import pickle
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from tripwire.common.errors import GoldenFileError

FORMAT = "tripwire-values/2"
LEGACY_FORMAT = "tripwire-values/1"

# What comparisons read: {checkpoint name: {tensor name: CPU tensor}}.
Values = Mapping[str, Mapping[str, torch.Tensor]]


def _store_path(store: Path, key: str) -> Path:
    return store / key[:2] / f"{key}.pt"


def _store_tensor(store: Path, key: str, tensor: torch.Tensor) -> None:
    """Write one tensor under its digest; concurrent writers of one digest write the same bytes. A file already
    there is kept when it holds those bytes, and replaced when it does not (damaged, truncated): recording again
    mends the store."""
    target = _store_path(store, key)
    buffer = io.BytesIO()
    torch.save(tensor.contiguous(), buffer)
    data = buffer.getvalue()
    if target.is_file() and target.stat().st_size == len(data) and target.read_bytes() == data:
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
    os.close(handle)
    try:
        Path(temporary).write_bytes(data)
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def save_values(
    path: str | Path,
    values: Mapping[str, Mapping[str, torch.Tensor]],
    digests: Mapping[str, Mapping[str, str]],
    store: str | Path | None = None,
) -> Path:
    """Write `values` (per checkpoint, per tensor) keyed by `digests` (the trajectory's, same names); each distinct
    tensor once, in the file itself or, with `store`, as a file of that shared folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    keys: dict[str, dict[str, str]] = {}
    tensors: dict[str, torch.Tensor] = {}
    for checkpoint, kept in values.items():
        names = digests.get(checkpoint, {})
        keys[checkpoint] = {}
        for name, tensor in kept.items():
            key = names.get(name) or f"{checkpoint}\0{name}"
            keys[checkpoint][name] = key
            if store is None:
                tensors.setdefault(key, tensor)
            else:
                _store_tensor(Path(store), key, tensor)
    where = os.path.relpath(Path(store).resolve(), path.parent.resolve()) if store is not None else ""
    torch.save({"format": FORMAT, "checkpoints": keys, "tensors": tensors, "store": where}, path)
    return path


class _Checkpoint(Mapping[str, torch.Tensor]):
    """One checkpoint's kept tensors, each loaded on first access."""

    def __init__(self, keys: Mapping[str, str], source: _Source) -> None:
        self._keys = keys
        self._source = source

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._source.tensor(self._keys[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


class _Source:
    """Where a values file's tensors are: in the file, or in its store folder."""

    def __init__(self, path: Path, tensors: Mapping[str, torch.Tensor], store: str) -> None:
        self._path = path
        self._tensors = dict(tensors)
        self._store = (path.parent / store).resolve() if store else None

    def tensor(self, key: str) -> torch.Tensor:
        if key not in self._tensors:
            if self._store is None:
                raise GoldenFileError(f"{self._path}: no tensor {key[:16]}: record it again")
            self._tensors[key] = _load(_store_path(self._store, key))
        return self._tensors[key]


def _load(path: Path) -> Any:
    if path.exists() and not path.is_file():
        raise GoldenFileError(f"{path}: not a regular file: record it again")
    try:
        with warnings.catch_warnings():  # a foreign file's pickle protocol warning would add lines to the one line
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except (  # random bytes can reach the unpickler's stack and memo too (IndexError, KeyError)
        OSError,
        RuntimeError,
        ValueError,
        EOFError,
        pickle.UnpicklingError,
        AttributeError,
        TypeError,
        IndexError,
        KeyError,
    ) as error:
        raise GoldenFileError(f"{path}: unreadable values file ({type(error).__name__}): record it again") from None


def load_values(path: str | Path) -> Values:
    """Read a values file (either format); its tensors load when first asked for."""
    path = Path(path)
    data = _load(path)
    if not isinstance(data, dict) or data.get("format") not in (FORMAT, LEGACY_FORMAT):
        raise GoldenFileError(f"{path}: not a tripwire values file: record it again")
    if data["format"] == LEGACY_FORMAT:
        legacy: Values = data["checkpoints"]
        return legacy
    source = _Source(path, data.get("tensors", {}), str(data.get("store", "")))
    return {name: _Checkpoint(keys, source) for name, keys in data["checkpoints"].items()}
