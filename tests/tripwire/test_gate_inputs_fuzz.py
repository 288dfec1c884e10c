"""Fuzzing the gate's newest inputs: coverage data for `tripwire exercised` and values files and stores for compare.
1,300 inputs (700 coverage data files, 600 values files), in-process; each loads and is used, or is refused in one
line naming the file; never a traceback, a hang or a read outside the tree.

Coverage data: a real coverage.py database with one cell of any table replaced by a value of any SQLite type (text
that is not UTF-8, a path climbing out of the tree, a blob where line numbers belong), a table dropped, rows added,
or its bytes overwritten or cut. Values files: a real values file (self-contained or keyed into a store) with one
part replaced by a value of another type, a tensor of another kind, a key that names a path, or a store entry
replaced by other bytes, a FIFO, a folder or a link out of the store. Examples are derandomized: the same inputs
every run.
"""

from __future__ import annotations

import io
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import coverage
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tripwire.bitwise.magnitude import checkpoint_deltas
from tripwire.bitwise.values import LEGACY_FORMAT, load_values, save_values
from tripwire.common.errors import GoldenFileError
from tripwire.gates import exercised

FUZZ = settings(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
SOURCE = "def f(x):\n    return x + 1\n\n\ndef g(x):\n    return x - 1\n\n\nf(1)\n"
CELLS = [
    ("coverage_schema", "version"),
    ("meta", "key"),
    ("meta", "value"),
    ("file", "id"),
    ("file", "path"),
    ("context", "context"),
    ("line_bits", "file_id"),
    ("line_bits", "context_id"),
    ("line_bits", "numbits"),
]
TABLES = ["coverage_schema", "meta", "file", "context", "line_bits", "arc", "tracer"]
PATHS = ["{root}/../../../etc/passwd", "{root}/src/../../x.py", "/etc/passwd", "{root}/src", "{root}/missing.py", ""]
SQL_VALUE = (
    st.none()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats()
    | st.text(max_size=12)
    | st.binary(max_size=40)
    | st.sampled_from(PATHS)
)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fuzz_tree")
    (root / "src").mkdir()
    (root / "src" / "m.py").write_text(SOURCE)
    data = coverage.CoverageData(basename=str(root / "pristine.coverage"))
    data.add_lines({str(root / "src" / "m.py"): [1, 2, 5, 9]})
    data.write()
    return root


def damage_database(data: Any, path: Path, root: Path) -> None:
    """One drawn change to the database at `path`: a cell, a table, an added row, or its raw bytes."""
    kind = data.draw(st.sampled_from(["cell", "not UTF-8", "drop", "row", "bytes", "cut"]))
    if kind in ("bytes", "cut"):
        raw = bytearray(path.read_bytes())
        if kind == "cut":
            del raw[data.draw(st.integers(0, len(raw))) :]
        else:
            for _ in range(data.draw(st.integers(1, 8))):
                raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
        path.write_bytes(bytes(raw))
        return
    with sqlite3.connect(path) as connection:
        if kind == "drop":
            connection.execute(f"DROP TABLE {data.draw(st.sampled_from(TABLES))}")
        elif kind == "row":
            name = data.draw(st.sampled_from(PATHS) | st.text(max_size=12)).replace("{root}", str(root))
            connection.execute("INSERT INTO file (path) VALUES (?)", (name,))
        else:
            table, column = data.draw(st.sampled_from(CELLS))
            value = data.draw(SQL_VALUE)
            value = value.replace("{root}", str(root)) if isinstance(value, str) else value
            cast = "CAST(? AS TEXT)" if kind == "not UTF-8" else "?"
            value = data.draw(st.binary(min_size=1, max_size=12)) if kind == "not UTF-8" else value
            connection.execute(f"UPDATE {table} SET {column} = {cast}", (value,))


@settings(FUZZ, max_examples=700)
@given(data=st.data())
def test_damaged_coverage_data_reports_or_is_refused_in_one_line(
    tree: Path, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str], data: Any
) -> None:
    path = tmp_path_factory.mktemp("cov") / "damaged.coverage"
    shutil.copy(tree / "pristine.coverage", path)
    try:
        damage_database(data, path, tree)
    except sqlite3.Error:
        return  # the change itself was refused by SQLite: nothing to read
    modules = data.draw(st.sampled_from([[], ["--modules", "src/m.py"]]))
    code = exercised.main(["--data", str(path), "--root", str(tree), *modules])
    out, err = capsys.readouterr()
    if code == 0:
        assert err == "" and out.startswith("scenario coverage: "), (out, err)
        return
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err


TENSORS = st.sampled_from(
    [
        torch.zeros(3),
        torch.tensor(1.5),
        torch.arange(4, dtype=torch.int64),
        torch.tensor([True, False]),
        torch.zeros(2, 2).to_sparse(),
        torch.empty(2, device="meta"),
        torch.zeros(0),
        torch.ones(2, dtype=torch.complex64),
        torch.ones(3, dtype=torch.bfloat16),
    ]
)
KEYS = st.sampled_from(["/etc/passwd", "../../../x", "ab" * 32, "zz", "", ".", "..", "a/b", "\x00", "cd" * 32])
HOSTILE = (
    st.none()
    | st.integers()
    | st.floats()
    | st.text(max_size=8)
    | KEYS
    | TENSORS
    | st.lists(st.integers() | TENSORS, max_size=3)
    | st.dictionaries(st.text(max_size=4) | st.integers(), st.integers() | TENSORS | KEYS, max_size=3)
)


def _places(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _places(item, (*prefix, key))
    return found


def _replaced(value: Any, place: tuple[Any, ...], new: Any) -> Any:
    if not place:
        return new
    copy = dict(value)
    copy[place[0]] = _replaced(value[place[0]], place[1:], new)
    return copy


def damage_store(data: Any, store: Path, folder: Path) -> None:
    """One store entry replaced: other bytes, a pickle of another value, a FIFO, a folder, or a link out."""
    entries = sorted(store.rglob("*.pt"))
    entry = data.draw(st.sampled_from(entries))
    kind = data.draw(st.sampled_from(["bytes", "value", "fifo", "folder", "link", "gone"]))
    entry.unlink()
    if kind == "bytes":
        entry.write_bytes(data.draw(st.binary(max_size=64)))
    elif kind == "value":
        buffer = io.BytesIO()
        torch.save(data.draw(HOSTILE), buffer)
        entry.write_bytes(buffer.getvalue())
    elif kind == "fifo":
        os.mkfifo(entry)
    elif kind == "folder":
        entry.mkdir()
    elif kind == "link":
        entry.symlink_to(folder / "values.pt")


def read_everything(path: Path) -> None:
    """Load a values file and read every tensor it names, comparing each with itself; refusals are one line."""
    try:
        values = load_values(path)
        for checkpoint in values.values():
            names = list(checkpoint)
            for name in names:
                tensor = checkpoint[name]
                assert isinstance(tensor, torch.Tensor) and tensor.layout == torch.strided
                assert tensor.device.type == "cpu"
            checkpoint_deltas(names, checkpoint, checkpoint)
    except GoldenFileError as error:
        assert "\n" not in str(error) and str(error).startswith(str(path.parent)), str(error)


@settings(FUZZ, max_examples=600)
@given(data=st.data())
def test_a_mutated_values_file_or_store_loads_and_compares_or_is_refused_in_one_line(
    tmp_path_factory: pytest.TempPathFactory, data: Any
) -> None:
    folder = tmp_path_factory.mktemp("values")
    store = folder / "store" if data.draw(st.booleans()) else None
    kept = {"c": {"w": torch.arange(3.0), "n": torch.tensor(7)}, "d": {"w": torch.arange(3.0)}}
    digests = {"c": {"w": "ab" * 32, "n": "cd" * 32}, "d": {"w": "ab" * 32}}
    path = save_values(folder / "values.pt", kept, digests, store)
    if store is not None and data.draw(st.booleans()):
        damage_store(data, store, folder)
    else:
        document = torch.load(path, weights_only=True)
        if data.draw(st.booleans()):
            document = {"format": LEGACY_FORMAT, "checkpoints": kept}
        place = data.draw(st.sampled_from(_places(document)))
        torch.save(_replaced(document, place, data.draw(HOSTILE)), path)
    read_everything(path)


def test_a_store_named_with_a_nul_character_is_refused_in_one_line(tmp_path: Path) -> None:
    """Found by the test above: a store name holding a NUL reached `os.path.realpath`, which raised ValueError."""
    kept = {"c": {"w": torch.arange(3.0)}}
    path = save_values(tmp_path / "values.pt", kept, {"c": {"w": "ab" * 32}}, tmp_path / "store")
    document = torch.load(path, weights_only=True)
    torch.save({**document, "store": "store\x00"}, path)
    with pytest.raises(GoldenFileError, match="holds a NUL character") as refused:
        load_values(path)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("damage", [b"M", b"J\x01", b"\x80\x02M\x01"])  # a 2- or 4-byte integer opcode cut short
def test_a_store_entry_cut_inside_an_integer_is_refused_in_one_line(tmp_path: Path, damage: bytes) -> None:
    """Found by the fuzz above: torch's unpickler reads a truncated integer with `struct.unpack`, whose
    `struct.error` escaped as a traceback instead of the one-line refusal."""
    store = tmp_path / "store"
    path = save_values(tmp_path / "values.pt", {"c": {"w": torch.arange(3.0)}}, {"c": {"w": "ab" * 32}}, store)
    (entry,) = store.rglob("*.pt")
    entry.write_bytes(damage)
    with pytest.raises(GoldenFileError, match=r"unreadable values file \(error\): record it again$") as raised:
        load_values(path)["c"]["w"]
    assert "\n" not in str(raised.value)
