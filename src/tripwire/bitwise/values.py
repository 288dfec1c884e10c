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
import re
import struct
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from tripwire.common.errors import GoldenFileError
from tripwire.common.files import input_file, within

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

    def __init__(self, path: Path, tensors: Mapping[str, torch.Tensor], store: Path | None) -> None:
        self._path = path
        self._tensors = dict(tensors)
        self._store = store

    def tensor(self, key: str) -> torch.Tensor:
        if key not in self._tensors:
            if self._store is None:
                raise GoldenFileError(f"{self._path}: no tensor {key[:16]}: record it again")
            entry = _store_path(self._store, key)
            self._tensors[key] = _tensor(_load(entry), entry, "the store entry")
        return self._tensors[key]


def _load(path: Path) -> Any:
    input_file(path, "", GoldenFileError, "record it again")  # a folder, FIFO or device is never opened
    try:
        with warnings.catch_warnings():  # a foreign file's pickle protocol warning would add lines to the one line
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except (  # random bytes can reach the unpickler's stack and memo too (IndexError, KeyError), and a truncated
        # integer opcode its `struct.unpack` (struct.error)
        struct.error,
        OSError,
        RuntimeError,
        ValueError,
        EOFError,
        pickle.UnpicklingError,
        AttributeError,
        TypeError,
        IndexError,
        KeyError,
        MemoryError,
        OverflowError,
    ) as error:
        raise GoldenFileError(f"{path}: unreadable values file ({type(error).__name__}): record it again") from None


def _refused(path: Path, what: str) -> GoldenFileError:
    return GoldenFileError(f"{path}: not a tripwire values file ({what}): record it again")


def _tensor(value: Any, path: Path, where: str) -> torch.Tensor:
    """`value` when it is a dense CPU tensor a comparison can read; a one-line refusal naming `where` otherwise."""
    if not isinstance(value, torch.Tensor):
        raise _refused(path, f"{where} holds a {type(value).__name__}, not a tensor")
    if value.layout != torch.strided or value.device.type != "cpu":
        raise _refused(path, f"{where} is a {value.layout} tensor on {value.device}, not a dense CPU tensor")
    return value


def _mapping(value: Any, path: Path, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise _refused(path, f"{where} is a {type(value).__name__}, not a mapping of names")
    return value


def _store_entry(store: Path, key: str, path: Path) -> None:
    """Refuse a store key that is no digest (so its file could lie outside the store: `/etc/...`, `../..`) and an
    entry that is not a regular file inside the store."""
    if not _DIGEST.fullmatch(key):
        raise _refused(path, f"store key {key[:40]!r} is not a digest, so its file could lie outside the store")
    entry = _store_path(store, key)
    if not within(store, entry):
        raise _refused(path, f"store entry {entry} leads outside the store {store}")
    input_file(entry, f"{path}: store entry", GoldenFileError, "record the result again")


_DIGEST = re.compile(r"[0-9a-f]{2,128}")


def load_values(path: str | Path) -> Values:
    """Read a values file (either format); its tensors load when first asked for. Its structure, each tensor in
    it and each store entry it names (a regular file inside the store) are checked here, one line naming the file
    when anything is off; a store tensor's own content is checked when it is read."""
    path = Path(path)
    data = _load(path)
    if not isinstance(data, dict) or data.get("format") not in (FORMAT, LEGACY_FORMAT):
        raise GoldenFileError(f"{path}: not a tripwire values file: record it again")
    checkpoints = _mapping(data.get("checkpoints"), path, "checkpoints")
    if data["format"] == LEGACY_FORMAT:
        return {
            name: {
                tensor: _tensor(value, path, f"checkpoint {name!r} tensor {tensor!r}")
                for tensor, value in _mapping(kept, path, f"checkpoint {name!r}").items()
            }
            for name, kept in checkpoints.items()
        }
    tensors = _mapping(data.get("tensors", {}), path, "tensors")
    for key, value in tensors.items():
        _tensor(value, path, f"tensor {key[:16]!r}")
    where = data.get("store", "")
    if not isinstance(where, str):
        raise _refused(path, f"store is a {type(where).__name__}, not a folder name")
    if "\x00" in where:  # no path holds one: `os.path.realpath` would raise, not refuse
        raise _refused(path, f"store {where[:40]!r} holds a NUL character, so it names no folder")
    store = Path(os.path.realpath(path.parent / where)) if where else None
    keys: dict[str, dict[str, str]] = {}
    for name, kept in checkpoints.items():
        keys[name] = dict(_mapping(kept, path, f"checkpoint {name!r}"))
        for tensor, key in keys[name].items():
            if not isinstance(key, str):
                raise _refused(path, f"checkpoint {name!r} tensor {tensor!r} is keyed by a {type(key).__name__}")
            if key not in tensors and store is None:
                raise _refused(path, f"checkpoint {name!r} tensor {tensor!r} names no tensor of the file")
            if key not in tensors and store is not None:
                _store_entry(store, key, path)
    source = _Source(path, tensors, store)
    return {name: _Checkpoint(names, source) for name, names in keys.items()}
