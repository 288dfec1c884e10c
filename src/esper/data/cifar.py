"""CIFAR-10 from a local `cifar-10-batches-py` folder through torchvision (never downloaded), unpickled safely.

torchvision's `CIFAR10` defines the layout (folder, file names, keys, the [N, 3072] -> [N, 32, 32, 3] reshape);
the images are then normalized with the standard statistics and kept in memory as one tensor. The train-time
augmentation (RandomCrop(32, padding=4), horizontal flip) is applied per batch by the batch iterator
(`augment_batch`), batched and seeded, instead of per sample in DataLoader workers.

The batches are pickles, and a plain `pickle.load` of a crafted file runs any code it names. torchvision's
`CIFAR10.__init__` reads them with plain `pickle.load`, so `LocalCIFAR10` repeats its few loading steps with
`read_data_file` instead: an unpickler (same `encoding="latin1"`) that admits only what the CIFAR-10 format
pickles, namely plain containers, numbers and strings, and numpy arrays, dtypes and scalars of numeric types
(under numpy 1.x's `numpy.core` names, as the official files carry them, or numpy 2.x's `numpy._core`), plus the
`bytes` helpers of protocol-2 pickles written by Python 3. Anything else is refused before it is called, in one
`DataDirectoryError` line naming the file and the global. numpy's own array and dtype unpickling is not used
either: a crafted dtype state can mark plain integers as object pointers, so arrays are rebuilt here from the
pickled shape, a dtype made from its type code and byte order alone, and the raw bytes (`np.frombuffer`).
A memo index beyond the opcodes before it is refused as well: the C unpickler would size its memo table
by it (a 9-byte opcode can ask for gigabytes).

Every file goes through this reader, the official ones too, so md5s are not computed at all: a match with
torchvision's published md5 (`CIFAR10.train_list`, `test_list`, `meta`) would prove a file official and harmless,
but it would allow nothing the reader does not already allow, and would cost another read of 180 MB. One code
path also means every real copy exercises the reader the tests check. `LocalCIFAR10` keeps torchvision's
presence check (md5 None), so a subset, a test fixture or a re-pickled copy in the same format loads.

After unpickling, each file's structure is checked (a dict with uint8 `data` [N, 3072] and N labels in 0..9;
`label_names` a list of str), so a damaged file is also one line rather than an error deep in torch. This module
imports torchvision (~1.7 s), so `esper.data.datasets` imports it only when CIFAR-10 is asked for.
"""

from __future__ import annotations

import io
import math
import pickle
import pickletools
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np
import torch
from torchvision.datasets import CIFAR10

from esper.data.records import CIFAR10_MEAN, CIFAR10_STD, DataDirectoryError, ImageDataset

BATCH_FOLDER = "cifar-10-batches-py"
PIXELS_PER_IMAGE = 3 * 32 * 32
NUM_CLASSES = 10
# numpy type codes an array or scalar in a data file may have: what `np.dtype(...).__reduce__` writes for the
# bool, integer and float types. Object, void (structured), string and datetime types are refused.
NUMERIC_TYPE_CODES = frozenset({"b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8"})
NESTING_LIMIT = 32  # containers deeper than this are not CIFAR-10 data
MAX_DIMENSIONS = 32  # numpy 1.x's limit (numpy 2.x allows 64)
SHOWN_CHARACTERS = 80  # of a refused global's name or an error's reason: both come from the file


class LocalCIFAR10(CIFAR10):
    """torchvision's CIFAR10 that checks the files exist (md5 None) and reads them with `read_data_file`."""

    # md5 None makes torchvision's `check_integrity` test only that the file exists.
    train_list = [[name, None] for name, _ in CIFAR10.train_list]  # noqa: RUF012 - torchvision's own layout
    test_list = [[name, None] for name, _ in CIFAR10.test_list]  # noqa: RUF012
    meta = {**CIFAR10.meta, "md5": None}  # noqa: RUF012

    def __init__(self, root: str | Path, train: bool = True) -> None:
        # torchvision's CIFAR10.__init__, step by step, with read_data_file in place of its plain pickle.load
        super(CIFAR10, self).__init__(root)  # VisionDataset: root, no transforms
        self.train = train
        if not self._check_integrity():
            raise RuntimeError("Dataset not found or corrupted. You can use download=True to download it")
        folder = Path(self.root) / self.base_folder
        batches: list[np.ndarray] = []
        self.targets: list[int] = []
        for file_name, _ in self.train_list if train else self.test_list:
            data, labels = _checked_batch(read_data_file(folder / file_name), folder / file_name)
            batches.append(data)
            self.targets.extend(labels)
        self.data: np.ndarray = np.vstack(batches).reshape(-1, 3, 32, 32).transpose((0, 2, 3, 1))  # HWC
        self._load_meta()

    def _load_meta(self) -> None:
        path = Path(self.root) / self.base_folder / self.meta["filename"]
        meta = read_data_file(path)
        names = meta.get(self.meta["key"]) if isinstance(meta, dict) else None
        if not (isinstance(names, list) and all(isinstance(name, str) for name in names)):
            raise _not_cifar(path, f"no {self.meta['key']!r} list of class names")
        self.classes = names
        self.class_to_idx = {name: index for index, name in enumerate(names)}


def load_cifar10(data_dir: str, *, train: bool, n_samples: int | None = None) -> ImageDataset:
    """One split of CIFAR-10 from `data_dir` (the folder that contains `cifar-10-batches-py`)."""
    root = Path(data_dir)
    if not (root / BATCH_FOLDER).is_dir():
        raise DataDirectoryError(
            f"no CIFAR-10 at {str(root)!r} (expected {BATCH_FOLDER}/ inside): pass --data-dir pointing at the "
            f"folder that holds {BATCH_FOLDER}"
        )
    try:
        source = LocalCIFAR10(root=str(root), train=train)
    except DataDirectoryError:
        raise  # already one line naming the file
    except (RuntimeError, OSError) as error:  # torchvision's presence check: a file is missing
        raise DataDirectoryError(
            f"CIFAR-10 under {str(root)!r} is incomplete or unreadable ({_reason(error)}): pass --data-dir a "
            "complete copy"
        ) from None
    data = np.asarray(source.data)  # [N, 32, 32, 3] uint8
    labels = np.asarray(source.targets, dtype=np.int64)
    if n_samples is not None:
        data, labels = data[:n_samples], labels[:n_samples]
    images = torch.from_numpy(np.ascontiguousarray(data)).permute(0, 3, 1, 2).float().div_(255.0)
    mean = torch.tensor(CIFAR10_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR10_STD).view(1, 3, 1, 1)
    images = ((images - mean) / std).contiguous()
    split = "train" if train else "test"
    return ImageDataset(images, torch.from_numpy(labels), num_classes=10, name=f"cifar10-{split}", augment=train)


# --- the restricted reader ------------------------------------------------------------------------------------


def read_data_file(path: Path) -> Any:
    """Unpickle one CIFAR-10 file without running code: the value, or a one-line `DataDirectoryError`.

    Refused globals raise before anything is called. Every other failure (truncated or garbled bytes, a numpy
    recipe with the wrong arguments, too deep a nesting, an out-of-range memo index) is reported as an
    incomplete or unreadable file.
    """
    try:
        content = path.read_bytes()  # checked and unpickled from the same bytes: no swap in between
        _check_memo_indices(content)
        value = CifarUnpickler(io.BytesIO(content), path).load()
        return _resolve(value, 0, {})
    except DataDirectoryError:
        raise
    except Exception as error:  # any failure to decode a data file is a fault of the file, reported as one line
        raise DataDirectoryError(
            f"CIFAR-10 data file {str(path)!r} is incomplete or unreadable ({_reason(error)}): replace it with a "
            "genuine CIFAR-10 file or pass --data-dir a complete copy"
        ) from None


def _check_memo_indices(content: bytes) -> None:
    """Refuse a memo index beyond the opcodes before it, before the C unpickler sees it.

    The C unpickler sizes its memo table by the largest index a PUT names and clears the new entries, so one
    `LONG_BINPUT 1376743797` in a 6 kB file made it allocate and clear about 20 GB (found by the fuzzer in
    tests/reliability/test_data_files.py). A pickler numbers its memo entries in order, one per memoized object,
    so no genuine index exceeds the count of opcodes before it. `pickletools.genops` also refuses a garbled
    stream before any object is built.
    """
    for count, (opcode, index, _) in enumerate(pickletools.genops(content)):
        if opcode.name in ("PUT", "BINPUT", "LONG_BINPUT") and isinstance(index, int) and index > count:
            raise ValueError(f"memo index {index} out of range")


class CifarUnpickler(pickle.Unpickler):
    """Unpickler (encoding="latin1", as torchvision's) whose `find_class` admits only the CIFAR-10 format's globals.

    Every opcode that names a global (GLOBAL, STACK_GLOBAL, INST, OBJ, EXT*) goes through `find_class`; names are
    looked up in a fixed table, so nothing is imported either.
    """

    def __init__(self, file: IO[bytes], path: Path) -> None:
        super().__init__(file, encoding="latin1")
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        admitted = _ADMITTED.get((module, name))
        if admitted is None:
            raise DataDirectoryError(
                f"CIFAR-10 data file {str(self.path)!r} holds a pickled reference to "
                f"{_shown(f'{module}.{name}')}, which the CIFAR-10 format never contains: refusing to unpickle "
                "it; replace the file with a genuine CIFAR-10 file or pass --data-dir a clean copy"
            )
        return admitted


class _Dtype:
    """A numpy dtype as a pickle builds it: `numpy.dtype(code, align, copy)`, then BUILD with its state.

    Only the type code and the byte order are taken; the rest of the state (fields, subarray, flags, sizes) is
    refused or ignored, so the dtype is always numpy's own for that code.
    """

    def __init__(self, code: Any, align: Any = False, copy: Any = False) -> None:
        if not (isinstance(code, str) and code in NUMERIC_TYPE_CODES):
            raise ValueError(f"numpy dtype {_shown(repr(code))} is not a plain numeric type")
        self.dtype = np.dtype(code)

    def __setstate__(self, state: Any) -> None:
        if not (isinstance(state, tuple) and len(state) >= 5 and state[1] in ("<", ">", "|", "=")):
            raise ValueError("numpy dtype state is malformed")
        if any(part is not None for part in state[2:5]):  # subarray, names, fields
            raise ValueError("numpy dtype with fields or a subarray")
        self.dtype = self.dtype.newbyteorder(state[1]) if state[1] in "<>" else self.dtype


class _Array:
    """A numpy array as a pickle builds it: `_reconstruct(ndarray, (0,), b"b")` then BUILD with
    (version, shape, dtype, fortran_order, raw bytes); or `_frombuffer(...)` in one step (protocol 5)."""

    def __init__(self) -> None:
        self.array: np.ndarray | None = None

    def __setstate__(self, state: Any) -> None:
        if self.array is not None:
            raise ValueError("numpy array state given twice")
        if isinstance(state, tuple) and len(state) == 5:
            state = state[1:]  # (version, shape, dtype, fortran, raw) -> (shape, dtype, fortran, raw)
        if not (isinstance(state, tuple) and len(state) == 4):
            raise ValueError("numpy array state is malformed")
        shape, dtype, fortran, raw = state
        self.array = _array_from(raw, dtype, shape, "F" if fortran is True or fortran == 1 else "C")


_NDARRAY = object()  # what `numpy.ndarray` unpickles as: a token for `_reconstruct`, not a callable class


def _as_bytes(raw: Any) -> bytes:
    if isinstance(raw, str):  # a Python 2 str read with encoding="latin1"
        return raw.encode("latin1")
    if isinstance(raw, bytes | bytearray):
        return bytes(raw)
    raise ValueError(f"numpy raw data is a {type(raw).__name__}, not bytes")


def _checked_shape(shape: Any) -> tuple[int, ...]:
    """A shape of at most MAX_DIMENSIONS non-negative ints: `math.prod` of anything else could be costly."""
    if not (isinstance(shape, tuple) and len(shape) <= MAX_DIMENSIONS):
        raise ValueError("numpy array shape is malformed")
    if not all(type(size) is int and size >= 0 for size in shape):
        raise ValueError("numpy array shape is malformed")
    return shape


def _array_from(raw: Any, dtype: Any, shape: Any, order: Literal["C", "F"]) -> np.ndarray:
    if not isinstance(dtype, _Dtype):
        raise ValueError("numpy array without a dtype")
    shape = _checked_shape(shape)
    data = _as_bytes(raw)
    if len(data) != math.prod(shape) * dtype.dtype.itemsize:
        raise ValueError("numpy array data does not match its shape")
    return np.frombuffer(data, dtype=dtype.dtype).reshape(shape, order=order)


def _reconstruct(cls: Any, shape: Any, typecode: Any) -> _Array:
    if cls is not _NDARRAY or math.prod(_checked_shape(shape)) != 0:  # numpy writes (0,): BUILD sets the shape
        raise ValueError("numpy array recipe is malformed")
    return _Array()


def _frombuffer(buffer: Any, dtype: Any, shape: Any, order: Any) -> _Array:
    if order not in ("C", "F"):
        raise ValueError("numpy array order is malformed")
    recipe = _Array()
    recipe.array = _array_from(buffer, dtype, shape, "F" if order == "F" else "C")
    return recipe


def _scalar(dtype: Any, raw: Any = None) -> Any:
    if not isinstance(dtype, _Dtype):
        raise ValueError("numpy scalar without a dtype")
    data = _as_bytes(raw)
    if len(data) != dtype.dtype.itemsize:
        raise ValueError("numpy scalar data does not match its dtype")
    return np.frombuffer(data, dtype=dtype.dtype)[0]


def _latin1_bytes(text: Any, encoding: Any = "utf-8") -> bytes:
    """`_codecs.encode(str, "latin1")`: how protocol-2 pickles written by Python 3 store bytes."""
    if not (isinstance(text, str) and encoding in ("latin1", "latin-1")):
        raise ValueError("bytes recipe is malformed")
    return text.encode("latin1")


def _empty_bytes() -> bytes:
    """`bytes()`: how protocol-2 pickles written by Python 3 store b""."""
    return b""


_ADMITTED: dict[tuple[str, str], Any] = {
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): _Dtype,
    ("_codecs", "encode"): _latin1_bytes,
    ("builtins", "bytes"): _empty_bytes,
    ("__builtin__", "bytes"): _empty_bytes,
}
for _core in ("numpy.core", "numpy._core"):  # numpy 1.x's names (the official files), numpy 2.x's
    _ADMITTED[(f"{_core}.multiarray", "_reconstruct")] = _reconstruct
    _ADMITTED[(f"{_core}.multiarray", "scalar")] = _scalar
    _ADMITTED[(f"{_core}.numeric", "_frombuffer")] = _frombuffer


def _resolve(value: Any, depth: int, done: dict[int, Any]) -> Any:
    """The unpickled value with every `_Array` replaced by its array and every `_Dtype` by its dtype."""
    if depth > NESTING_LIMIT:
        raise ValueError(f"nested deeper than {NESTING_LIMIT} levels")
    if isinstance(value, _Array):
        if value.array is None:
            raise ValueError("numpy array without its data")
        return value.array
    if isinstance(value, _Dtype):
        return value.dtype
    if not isinstance(value, list | dict | tuple | set | frozenset):
        return value
    if id(value) in done:
        return done[id(value)]
    done[id(value)] = value
    if isinstance(value, list):
        value[:] = [_resolve(item, depth + 1, done) for item in value]
    elif isinstance(value, dict):
        for key in value:
            if _resolve(key, depth + 1, done) is not key:
                raise ValueError("a numpy array or dtype used as a dict key")
            value[key] = _resolve(value[key], depth + 1, done)
    elif isinstance(value, tuple):
        items = tuple(_resolve(item, depth + 1, done) for item in value)
        if any(new is not old for new, old in zip(items, value)):
            done[id(value)] = value = items
    elif any(_resolve(item, depth + 1, done) is not item for item in value):
        raise ValueError("a numpy array or dtype inside a set")
    return value


# --- structure checks and messages ----------------------------------------------------------------------------


def _checked_batch(entry: Any, path: Path) -> tuple[np.ndarray, list[int]]:
    """The uint8 [N, 3072] pixels and N labels of one batch (`labels`, or CIFAR-100's `fine_labels`)."""
    if not isinstance(entry, dict):
        raise _not_cifar(path, f"a {type(entry).__name__}, not a dict")
    data = entry.get("data")
    if not (isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 2):
        raise _not_cifar(path, "no 'data' uint8 array of rows")
    if data.shape[1] != PIXELS_PER_IMAGE:
        raise _not_cifar(path, f"'data' rows hold {data.shape[1]} values, not {PIXELS_PER_IMAGE}")
    labels = entry["labels"] if "labels" in entry else entry.get("fine_labels")
    if not isinstance(labels, list | np.ndarray) or len(labels) != data.shape[0]:
        raise _not_cifar(path, f"no list of {data.shape[0]} 'labels'")
    if not all(isinstance(label, int | np.integer) and 0 <= label < NUM_CLASSES for label in labels):
        raise _not_cifar(path, f"a label outside 0..{NUM_CLASSES - 1}")
    return data, [int(label) for label in labels]


def _not_cifar(path: Path, what: str) -> DataDirectoryError:
    return DataDirectoryError(
        f"CIFAR-10 data file {str(path)!r} is not in the CIFAR-10 format ({what}): replace it with a genuine "
        "CIFAR-10 file or pass --data-dir a complete copy"
    )


def _escaped(text: str) -> str:
    """No line break, terminal escape or other unprintable character: each is written as its escape."""
    return "".join(char if char.isprintable() else ascii(char)[1:-1] for char in text)


def _shown(text: str) -> str:
    """A name from a data file, safe in a one-line message: escaped, and shortened with a visible mark."""
    if len(text) <= SHOWN_CHARACTERS:
        return _escaped(text)
    return f"{_escaped(text[:SHOWN_CHARACTERS])}... ({len(text)} characters)"


def _reason(error: BaseException) -> str:
    """An exception's first line for a one-line message, escaped, and cut at a word boundary when long."""
    lines = str(error).splitlines()
    text = lines[0] if lines and lines[0] else type(error).__name__
    if len(text) > SHOWN_CHARACTERS:
        cut = text.rfind(" ", SHOWN_CHARACTERS // 2, SHOWN_CHARACTERS)
        text = f"{text[: cut if cut > 0 else SHOWN_CHARACTERS]} ..."
    return _escaped(text)
