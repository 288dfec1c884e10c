"""Hostile CIFAR-10 data files: a pickle in `--data-dir` is read without running any code it carries.

Every crafted file here would run its payload under a plain `pickle.load` (torchvision's own reader): it would
create the marker file. The restricted reader in `esper.data.cifar` admits only the globals a CIFAR-10 batch
pickles (numpy arrays, dtypes and scalars, and the bytes helpers of protocol-2 pickles); anything else is
refused in one `DataDirectoryError` line naming the file and the refused global, and the CLI exits 2.
numpy's array and dtype recipes are rebuilt from type code, shape and raw bytes (a crafted dtype state never
reaches numpy), and a memo index past the opcodes before it is refused before the C unpickler sizes its memo.
The fuzzer feeds 4,000 random and mutated files through the same path, under an audit hook that fails the test
on any exec, compile, import, process start or `os.system` made while a file is being read.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import pickle
import pickletools
import random
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from reliability_helpers import child_env
from torchvision.datasets import CIFAR10

from cifar_files import NAMES, PER_BATCH, write_tiny_cifar
from cifar_files import labels as _labels
from cifar_files import pixels as _pixels
from esper.data import DataDirectoryError, cifar, load_task_data
from esper.data.cifar import BATCH_FOLDER, LocalCIFAR10

TINY_RUN = ("--train-samples", "4", "--val-samples", "4", "--batch-size", "2")


class TrustedCIFAR10(CIFAR10):
    """torchvision's own reader with plain `pickle.load`, md5 off: the reference for files the test wrote itself."""

    train_list = [[name, None] for name, _ in CIFAR10.train_list]  # noqa: RUF012 - torchvision's own layout
    test_list = [[name, None] for name, _ in CIFAR10.test_list]  # noqa: RUF012
    meta = {**CIFAR10.meta, "md5": None}  # noqa: RUF012


class Payload:
    """Unpickles as `function(*args)`: what an attacker puts in a data file."""

    def __init__(self, function: Any, *args: Any) -> None:
        self.function = function
        self.args = args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.function, self.args


class ArrayWithState:
    """Pickles as numpy's own array recipe, `_reconstruct(ndarray, (0,), b"b")` then BUILD, with a chosen state."""

    def __init__(self, state: tuple[Any, ...]) -> None:
        self.state = state

    def __reduce__(self) -> tuple[Any, ...]:
        from numpy._core.multiarray import _reconstruct

        return _reconstruct, (np.ndarray, (0,), b"b"), self.state


def touch_code(marker: Path) -> str:
    return f"open({str(marker)!r}, 'w').close()"


def payloads(marker: Path) -> dict[str, tuple[Any, str]]:
    """name -> (object whose unpickling creates `marker`, the global the refusal must name)."""
    from numpy.testing._private.utils import runstring  # exec(astr, dict): a numpy global that is not data

    return {
        "builtins-exec": (Payload(builtins.exec, touch_code(marker)), "exec"),
        "os-system": (Payload(os.system, f"touch {shlex.quote(str(marker))}"), "system"),
        "numpy-runstring": (Payload(runstring, touch_code(marker), {}), "runstring"),
    }


def batch(n: int = PER_BATCH, offset: int = 0) -> dict[str, Any]:
    return {"batch_label": "crafted", "labels": _labels(n, offset), "data": _pixels(n, offset), "filenames": []}


def assert_refused(error: DataDirectoryError, file_name: str, global_name: str) -> None:
    message = str(error)
    assert "\n" not in message
    assert file_name in message, message
    assert global_name in message, message
    assert "refusing to unpickle it" in message, message
    assert message.endswith("pass --data-dir a clean copy"), message  # the whole message: nothing cut off


@pytest.fixture
def marker(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "pwned-marker"
    yield path
    assert not path.exists(), "a data file ran code while it was read"


# (a) a payload in a data batch ------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", [0, 2, 4])
@pytest.mark.parametrize("kind", ["builtins-exec", "os-system", "numpy-runstring"])
def test_a_data_batch_with_a_payload_is_refused_in_one_line_naming_the_file(
    tmp_path: Path, marker: Path, kind: str, protocol: int
) -> None:
    root = write_tiny_cifar(tmp_path / "data")
    payload, global_name = payloads(marker)[kind]
    (root / BATCH_FOLDER / "data_batch_1").write_bytes(pickle.dumps(payload, protocol=protocol))
    with pytest.raises(DataDirectoryError) as info:
        load_task_data("cifar10", split="train", n_samples=None, seed=0, data_dir=str(root))
    assert_refused(info.value, "data_batch_1", global_name)
    assert not marker.exists()


@pytest.mark.parametrize(
    "where",
    ["label", "dict-key", "array-state", "after-the-data", "inst-opcode"],
)
def test_a_payload_hidden_inside_a_genuine_batch_is_refused(tmp_path: Path, marker: Path, where: str) -> None:
    root = write_tiny_cifar(tmp_path / "data")
    payload = Payload(builtins.exec, touch_code(marker))
    entry = batch()
    if where == "label":
        entry["labels"][3] = payload
        content = pickle.dumps(entry, protocol=2)
    elif where == "dict-key":
        entry[payload] = 1  # type: ignore[index]
        content = pickle.dumps(entry, protocol=2)
    elif where == "array-state":  # the state numpy's BUILD receives holds the payload where the raw bytes belong
        entry["data"] = ArrayWithState((1, (PER_BATCH, 3072), np.dtype("u1"), False, payload))
        content = pickle.dumps(entry, protocol=2)
    elif where == "after-the-data":
        entry["zzz"] = payload
        content = pickle.dumps(entry, protocol=4)
    else:  # protocol 0's INST opcode: the class is looked up and called in one step
        code = touch_code(marker).encode()
        content = b"(S" + repr(code.decode()).encode() + b"\nibuiltins\nexec\n."
    (root / BATCH_FOLDER / "test_batch").write_bytes(content)
    with pytest.raises(DataDirectoryError) as info:
        load_task_data("cifar10", split="test", n_samples=None, seed=0, data_dir=str(root))
    assert_refused(info.value, "test_batch", "exec")
    assert not marker.exists()


def test_a_refused_name_with_line_breaks_or_great_length_stays_one_readable_line(tmp_path: Path) -> None:
    """STACK_GLOBAL takes any str: the name is escaped and shortened with a visible mark, the fix stays whole."""
    root = write_tiny_cifar(tmp_path / "data")
    module = "os\n\x1b[2J" + "x" * 10_000
    content = pickle.dumps([1], protocol=4)[:-1]  # everything up to STOP
    for text in (module, "system"):
        content += b"\x8d" + len(text.encode()).to_bytes(8, "little") + text.encode()  # BINUNICODE8
    (root / BATCH_FOLDER / "test_batch").write_bytes(content + b"\x93.")  # STACK_GLOBAL, STOP
    with pytest.raises(DataDirectoryError) as info:
        load_task_data("cifar10", split="test", n_samples=None, seed=0, data_dir=str(root))
    message = str(info.value)
    assert "\x1b" not in message and "\\n\\x1b[2J" in message
    assert f"... ({len(module) + len('.system')} characters)" in message
    assert len(message) < 500
    assert_refused(info.value, "test_batch", "os")


def test_the_cli_refuses_a_payload_with_exit_2_in_one_line_and_runs_nothing(tmp_path: Path, marker: Path) -> None:
    root = write_tiny_cifar(tmp_path / "data")
    payload, _ = payloads(marker)["os-system"]
    (root / BATCH_FOLDER / "data_batch_1").write_bytes(pickle.dumps(payload, protocol=2))
    argv = [
        sys.executable, "-m", "esper.scripts.train", "heuristic", "--dataset", "cifar10", "--data-dir", str(root),
        "--rounds", "1", "--envs", "1", "--episode-length", "1", *TINY_RUN, "--telemetry-level", "off", "--quiet",
    ]  # fmt: skip
    result = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("train: error: CIFAR-10 data file "), lines[0]
    assert "data_batch_1" in lines[0] and "system" in lines[0], lines[0]
    assert lines[0].endswith("pass --data-dir a clean copy"), lines[0]
    assert not marker.exists()


# (b) genuine files still load, and never through plain pickle.load ------------------------------------------


def _forbid_plain_pickle(monkeypatch: pytest.MonkeyPatch) -> None:
    def plain_load(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a data file went through plain pickle.load")

    monkeypatch.setattr(pickle, "load", plain_load)


@pytest.mark.parametrize("train", [True, False])
def test_a_genuine_folder_loads_the_same_arrays_as_torchvision_without_plain_pickle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, train: bool
) -> None:
    root = write_tiny_cifar(tmp_path / "data")
    reference = TrustedCIFAR10(root=str(root), train=train)
    _forbid_plain_pickle(monkeypatch)
    loaded = LocalCIFAR10(root=str(root), train=train)
    np.testing.assert_array_equal(loaded.data, reference.data)
    assert loaded.data.dtype == np.uint8 and loaded.data.shape == reference.data.shape
    assert loaded.targets == reference.targets
    assert loaded.classes == reference.classes == NAMES
    assert loaded.class_to_idx == reference.class_to_idx
    offsets = range(5) if train else [99]
    assert loaded.targets == [label for offset in offsets for label in _labels(PER_BATCH, offset)]
    first = _pixels(PER_BATCH, next(iter(offsets)))[0].reshape(3, 32, 32).transpose(1, 2, 0)
    np.testing.assert_array_equal(loaded.data[0], first)


@pytest.mark.parametrize("protocol", [2, 4, 5])
@pytest.mark.parametrize("numpy_names", ["numpy 1.x", "numpy 2.x"])
def test_batches_written_by_python_3_or_numpy_1_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, protocol: int, numpy_names: str
) -> None:
    """A user's re-pickled subset (str keys, any protocol), with numpy 1.x's or 2.x's global names."""
    root = write_tiny_cifar(tmp_path / "data")
    entry = batch(offset=7)
    entry["labels"] = np.asarray(entry["labels"], dtype=np.int64)  # a label array instead of a list
    entry["extra"] = [np.int64(3), np.float32(0.5), np.zeros((2, 3), ">f8", order="F"), b"", b"raw", None, 2**70]
    content = pickle.dumps(entry, protocol=protocol)
    if numpy_names == "numpy 1.x":
        content = as_numpy_1(content)
    (root / BATCH_FOLDER / "test_batch").write_bytes(content)
    _forbid_plain_pickle(monkeypatch)
    loaded = LocalCIFAR10(root=str(root), train=False)
    np.testing.assert_array_equal(loaded.data, entry["data"].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    assert loaded.targets == _labels(PER_BATCH, 7)


def as_numpy_1(content: bytes) -> bytes:
    """numpy 1.x's global names (`numpy.core.*`) in place of numpy 2.x's (`numpy._core.*`), as the official files
    carry them. Protocol 4's FRAME opcodes only hint at lengths that the renaming changes; they are optional, so
    they are dropped first."""
    frames = [position for opcode, _, position in pickletools.genops(content) if opcode.name == "FRAME"]
    for position in reversed(frames):
        content = content[:position] + content[position + 9 :]
    for new in (b"numpy._core.multiarray", b"numpy._core.numeric"):
        old = new.replace(b"numpy._core", b"numpy.core")
        content = content.replace(b"c" + new + b"\n", b"c" + old + b"\n")  # GLOBAL
        content = content.replace(b"\x8c" + bytes([len(new)]) + new, b"\x8c" + bytes([len(old)]) + old)
    assert b"numpy._core" not in content
    return content


# (c) batches.meta ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["builtins-exec", "os-system"])
def test_a_meta_file_with_a_payload_is_refused_in_one_line_naming_the_file(
    tmp_path: Path, marker: Path, kind: str
) -> None:
    root = write_tiny_cifar(tmp_path / "data")
    payload, global_name = payloads(marker)[kind]
    meta = {"label_names": [*NAMES[:9], payload], "num_vis": 3072}
    (root / BATCH_FOLDER / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))
    with pytest.raises(DataDirectoryError) as info:
        load_task_data("cifar10", split="test", n_samples=None, seed=0, data_dir=str(root))
    assert_refused(info.value, "batches.meta", global_name)
    assert not marker.exists()


def test_a_genuine_meta_file_gives_the_class_names_without_plain_pickle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write_tiny_cifar(tmp_path / "data")
    (root / BATCH_FOLDER / "batches.meta").write_bytes(
        pickle.dumps({"label_names": list(reversed(NAMES)), "num_cases_per_batch": 10000, "num_vis": 3072})
    )
    _forbid_plain_pickle(monkeypatch)
    loaded = LocalCIFAR10(root=str(root), train=False)
    assert loaded.classes == list(reversed(NAMES))
    assert loaded.class_to_idx == {name: i for i, name in enumerate(reversed(NAMES))}


# numpy's own recipes and the C unpickler's memo: the two holes a restricted find_class alone leaves open ----------


class CraftedDtype:
    """Pickles as numpy's dtype recipe, `numpy.dtype(code, False, True)` then BUILD, with a chosen state."""

    def __init__(self, code: str, state: tuple[Any, ...]) -> None:
        self.code = code
        self.state = state

    def __reduce__(self) -> tuple[Any, ...]:
        return np.dtype, (self.code, False, True), self.state


REFCOUNT_FLAG = 0x01  # numpy's NPY_ITEM_REFCOUNT: "the items are object pointers"


def test_a_dtype_state_that_marks_integers_as_object_pointers_never_reaches_numpy(tmp_path: Path) -> None:
    """numpy's own dtype unpickling accepts any flags: this state makes a uint64 dtype claim `hasobject`."""
    raw = (2**64 - 1).to_bytes(8, "little") * 2  # as object pointers: an address nowhere
    crafted = CraftedDtype("u8", (3, "<", None, None, None, -1, -1, REFCOUNT_FLAG))
    path = tmp_path / "test_batch"
    path.write_bytes(pickle.dumps({"x": ArrayWithState((1, (2,), crafted, False, raw))}, protocol=2))
    loaded = cifar.read_data_file(path)["x"]
    assert loaded.dtype == np.dtype("<u8") and not loaded.dtype.hasobject and loaded.dtype.flags == 0
    assert loaded.tolist() == [2**64 - 1, 2**64 - 1]


@pytest.mark.parametrize(
    ("code", "state"),
    [
        ("u1", (3, "|", (np.dtype("u1"), (10**9,)), None, None, -1, -1, 0)),  # a subarray of 10**9 items in 1 byte
        ("i8", (3, "<", None, ("a",), {"a": (np.dtype("i8"), 100)}, 8, 8, 0)),  # a field 100 bytes past the item
        ("O", (3, "|", None, None, None, -1, -1, 63)),  # object arrays: pointers read from the file
        ("V8", (3, "|", None, None, None, 8, 1, 0)),
    ],
)
def test_a_structured_or_object_dtype_in_a_data_file_is_refused(
    tmp_path: Path, code: str, state: tuple[Any, ...]
) -> None:
    path = tmp_path / "data_batch_1"
    array = ArrayWithState((1, (0,), CraftedDtype(code, state), False, b""))
    path.write_bytes(pickle.dumps({"data": array}, protocol=2))
    with pytest.raises(DataDirectoryError, match="incomplete or unreadable") as info:
        cifar.read_data_file(path)
    assert "\n" not in str(info.value) and "data_batch_1" in str(info.value)


def test_an_out_of_range_memo_index_is_refused_before_the_unpickler_sizes_its_memo(tmp_path: Path) -> None:
    """`LONG_BINPUT n` makes the C unpickler allocate and clear a memo table of n entries: 8n bytes, from 9 bytes
    of file. The fuzzer found n = 1,376,743,797 (about 20 GB); this test uses 2 * 10**7 (160 MB) so that the
    unfixed reader only slows down."""
    root = write_tiny_cifar(tmp_path / "data")
    index = 2 * 10**7
    (root / BATCH_FOLDER / "batches.meta").write_bytes(b"\x80\x02}r" + index.to_bytes(4, "little") + b".")
    started = time.perf_counter()
    with pytest.raises(DataDirectoryError, match=f"memo index {index} out of range") as info:
        load_task_data("cifar10", split="test", n_samples=None, seed=0, data_dir=str(root))
    assert time.perf_counter() - started < 5
    assert "\n" not in str(info.value) and "batches.meta" in str(info.value)


# (d) fuzzing -----------------------------------------------------------------------------------------------------

FUZZ_INPUTS = 4000
WATCHED_EVENTS = {"exec", "compile", "import", "os.system", "subprocess.Popen", "os.exec", "os.posix_spawn", "os.fork"}
_audit: dict[str, Any] = {"armed": False, "seen": []}


def _audit_hook(event: str, args: tuple[Any, ...]) -> None:
    audit = _audit  # None while the interpreter tears the module down: the hook outlives it, and must stay quiet
    if audit is not None and audit["armed"] and (event in WATCHED_EVENTS or event.startswith(("os.spawn", "os.exec"))):
        audit["seen"].append((event, repr(args)[:200]))


_hook_installed = False


def _install_audit_hook() -> None:
    """One process-wide audit hook (they cannot be removed), recording only while armed."""
    global _hook_installed
    if not _hook_installed:
        sys.addaudithook(_audit_hook)
        _hook_installed = True


def _mutations(rng: random.Random, seeds: list[bytes], count: int) -> Iterator[bytes]:
    opcodes = [bytes([code]) for code in b"()01.NRSVXabcdeghijlopqrstu}~\x80\x81\x82\x85\x86\x87\x88\x89\x8c\x93\x94"]
    for index in range(count):
        shape = index % 8
        if shape == 0:
            yield rng.randbytes(rng.randrange(0, 200))
        elif shape == 1:
            yield b"\x80" + bytes([rng.randrange(6)]) + rng.randbytes(rng.randrange(0, 120))
        else:
            data = bytearray(rng.choice(seeds))
            for _ in range(rng.randrange(1, 6)):
                action = rng.randrange(5)
                position = rng.randrange(len(data) + 1)
                if action == 0 and data:
                    data[min(position, len(data) - 1)] = rng.randrange(256)
                elif action == 1:
                    data[position:position] = rng.choice(opcodes)
                elif action == 2:
                    del data[position : position + rng.randrange(1, 16)]
                elif action == 3:
                    data = data[:position]
                else:
                    other = rng.choice(seeds)
                    start = rng.randrange(len(other) + 1)
                    data[position:position] = other[start : start + rng.randrange(1, 64)]
            yield bytes(data)


def _fuzz_seeds(marker: Path) -> list[bytes]:
    small = {"batch_label": "s", "labels": [1, 2], "data": _pixels(2, 5), "filenames": ["a.png", "b.png"]}
    seeds = [pickle.dumps(small, protocol=protocol) for protocol in range(6)]
    seeds += [pickle.dumps({"label_names": NAMES, "num_vis": 3072}, protocol=protocol) for protocol in (0, 2, 4)]
    seeds.append(pickle.dumps({"data": np.zeros((1, 3072), ">i8"), "labels": np.arange(1)}, protocol=2))
    seeds.append(pickle.dumps([np.float32(1.5), np.dtype("f4"), np.zeros((2, 2), order="F")], protocol=2))
    seeds.append(pickle.dumps({"labels": Payload(builtins.exec, touch_code(marker))}, protocol=2))
    return seeds


@pytest.mark.filterwarnings("ignore:invalid escape sequence:DeprecationWarning")  # protocol 0 strings, mutated
def test_fuzzed_data_files_load_or_fail_in_one_line_and_never_run_code(tmp_path: Path, marker: Path) -> None:
    root = write_tiny_cifar(tmp_path / "data")
    folder = root / BATCH_FOLDER
    genuine = {name: (folder / name).read_bytes() for name in ("test_batch", "batches.meta")}
    rng = random.Random(20240601)
    seeds = _fuzz_seeds(marker) + list(genuine.values())
    outcomes = {"loaded": 0, "refused": 0}
    _install_audit_hook()
    for seed in seeds:  # unarmed: the stdlib codecs that decoding protocol-0 strings imports are loaded here
        with contextlib.suppress(ValueError):
            list(pickletools.genops(seed))
    started = time.perf_counter()
    for index, content in enumerate(_mutations(rng, seeds, FUZZ_INPUTS)):
        target = "test_batch" if index % 2 == 0 else "batches.meta"
        for name, original in genuine.items():
            (folder / name).write_bytes(content if name == target else original)
        _audit["armed"] = True
        try:
            load_task_data("cifar10", split="test", n_samples=None, seed=0, data_dir=str(root))
        except DataDirectoryError as error:
            message = str(error)
            assert "\n" not in message and target in message, (content, message)
            outcomes["refused"] += 1
        except Exception as error:  # anything else is a finding: report the input that caused it
            raise AssertionError(f"input {index} {content!r} raised {type(error).__name__}: {error}") from error
        else:
            outcomes["loaded"] += 1
        finally:
            _audit["armed"] = False
        assert not _audit["seen"], (content, _audit["seen"])
        assert not marker.exists(), content
    elapsed = time.perf_counter() - started
    print(f"{FUZZ_INPUTS} fuzzed files in {elapsed:.1f} s: {outcomes}")
    assert outcomes["refused"] > FUZZ_INPUTS // 2, outcomes
    assert outcomes["loaded"] > 0, outcomes  # some mutations keep a valid batch: the path to success is fuzzed too
    assert elapsed < 60, elapsed
