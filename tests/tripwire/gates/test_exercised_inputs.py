"""`tripwire exercised` checks every input before use: damaged coverage data, measured paths that climb out of the
tree, and `--modules` / `--exclusions` files that are folders, devices, FIFOs, not UTF-8 or too long a name each end
in one line naming the file (exit 2), never a traceback or a hang.

Each case below was a coverage.py or SQLite traceback (`no such table`, `file is not a database`, `wrong schema`,
`database disk image is malformed`, a non-UTF-8 `path`), a `NoSource` / `NotPython` from reading `/etc/passwd` as
the tree's source, or (a FIFO as `--data`) a hang.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path

import coverage
import pytest

from tripwire.gates import exercised

SOURCE = "def f(x):\n    return x + 1\n\n\ndef g(x):\n    return x - 1\n\n\nf(1)\n"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A tree with one module, committed, and coverage data of a run that executed part of it."""
    root = tmp_path / "tree"
    (root / "src").mkdir(parents=True)
    (root / "src" / "m.py").write_text(SOURCE)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "base"]):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args], cwd=root, check=True)
    data = coverage.CoverageData(basename=str(root / ".coverage"))
    data.add_lines({str(root / "src" / "m.py"): [1, 2, 5, 9]})
    data.write()
    return root


def _collect(box: list[int], call: Callable[[], int]) -> None:
    box.append(call())


def within_seconds(call: Callable[[], int], seconds: float = 20.0) -> int:
    """`call()`'s result, failing (not hanging the suite) when it blocks: a FIFO opened for reading waits forever."""
    box: list[int] = []
    worker = threading.Thread(target=_collect, args=(box, call), daemon=True)
    worker.start()
    worker.join(seconds)
    assert box, f"still running after {seconds} s (blocked on a FIFO?)"
    return box[0]


def refused(capsys: pytest.CaptureFixture[str], argv: list[str], *needles: str) -> str:
    assert within_seconds(partial(exercised.main, argv)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


def run_sql(statement: str, path: Path) -> None:
    with sqlite3.connect(path) as connection:
        connection.executescript(statement)


def sql(statement: str) -> Callable[[Path], None]:
    return partial(run_sql, statement)


def garble(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for index in range(2048, min(len(data), 8192), 7):
        data[index] ^= 0x5A
    path.write_bytes(bytes(data))


def fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "no such table": (sql("DROP TABLE file;"), "no such table: file"),
    "not a database": (lambda p: p.write_bytes(b"SQLite format 3\x00" + b"\x01" * 4000), "file is not a database"),
    "no SQLite header": (lambda p: p.write_bytes(b"hello" * 100), "not coverage.py data (no SQLite header)"),
    "wrong schema": (sql("UPDATE coverage_schema SET version = 3;"), "wrong schema"),
    "malformed": (garble, "malformed"),
    "non-UTF-8 path": (sql("UPDATE file SET path = CAST(X'2F746D702FFF2E7079' AS TEXT);"), "decode to UTF-8"),
    "NULL path": (sql("UPDATE file SET path = NULL;"), "a measured path is NoneType"),
    "text numbits": (sql("UPDATE line_bits SET numbits = 'abc';"), "damaged coverage data"),
    "a FIFO": (fifo, "a FIFO, not a regular file"),
    "a folder": (lambda p: (p.unlink(), p.mkdir()), "a folder, not a regular file"),
}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_damaged_coverage_data_is_one_line_naming_the_file(
    tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    damage, needle = DAMAGE[kind]
    data = tmp_path / "damaged.coverage"
    shutil.copy(tree / ".coverage", data)
    damage(data)
    for extra in ([], ["--against", "HEAD"]):
        refused(capsys, ["--data", str(data), "--root", str(tree), *extra], f"--data {data}", needle)


def test_a_measured_path_climbing_out_of_the_tree_is_refused_not_read(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    climbing = f"{tree}/../../../../etc/passwd"
    data = coverage.CoverageData(basename=str(tree / ".coverage"))
    data.add_lines({climbing: [1]})
    data.write()
    refused(capsys, ["--data", str(tree / ".coverage"), "--root", str(tree)], "lies outside the tree", climbing)


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        (".", "a folder, not a regular file"),
        ("/dev/zero", "lies outside the tree"),
        ("../../etc/passwd", "lies outside the tree"),
        ("x" * 300, "File name too long"),
        ("bad.py", "not UTF-8 text"),
        ("fifo.py", "a FIFO, not a regular file"),
        ("zero.py", "lies outside the tree"),  # a link to /dev/zero
        ("broken.py", "cannot be parsed"),
        ("missing.py", "does not exist"),
    ],
)
def test_a_hostile_modules_entry_is_one_line(
    tree: Path, capsys: pytest.CaptureFixture[str], name: str, needle: str
) -> None:
    (tree / "bad.py").write_bytes(b"x = '\xff'\n")
    os.mkfifo(tree / "fifo.py")
    (tree / "zero.py").symlink_to("/dev/zero")
    (tree / "broken.py").write_text("def (:\n")
    refused(capsys, ["--data", str(tree / ".coverage"), "--root", str(tree), "--modules", name], "--modules", needle)


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("folder", "a folder, not a regular file"),
        ("/dev/zero", "a device, not a regular file"),
        ("x" * 300, "File name too long"),
        ("bad.toml", "not UTF-8 text"),
        ("fifo.toml", "a FIFO, not a regular file"),
        ("missing.toml", "does not exist"),
        ("outside.toml", "lies outside the tree"),
        ("device_entry.toml", "lies outside the tree"),  # an entry naming a link to /dev/null
    ],
)
def test_a_hostile_exclusions_file_or_entry_is_one_line(
    tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, needle: str
) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "bad.toml").write_bytes(b'[[unexercised]]\nwhere = "\xff"\n')
    os.mkfifo(tmp_path / "fifo.toml")
    (tmp_path / "outside.toml").write_text('[[unexercised]]\nwhere = "../../../etc/passwd"\nreason = "r"\n')
    (tree / "null.py").symlink_to("/dev/null")
    (tmp_path / "device_entry.toml").write_text('[[unexercised]]\nwhere = "null.py"\nreason = "r"\n')
    listing = name if name.startswith("/") else str(tmp_path / name)
    argv = ["--data", str(tree / ".coverage"), "--root", str(tree), "--against", "HEAD", "--exclusions", listing]
    refused(capsys, argv, needle)


def test_a_new_file_that_leads_to_a_fifo_is_refused_not_read(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(tree / "pipe")
    (tree / "src" / "new.py").symlink_to("../pipe")  # git lists it as untracked: it was read as a new file's text
    refused(capsys, ["--data", str(tree / ".coverage"), "--root", str(tree), "--against", "HEAD"], "a FIFO")


def test_intact_inputs_still_report_and_check(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The control: the same tree and data, undamaged, give the report and the check."""
    assert exercised.main(["--data", str(tree / ".coverage"), "--root", str(tree), "--modules", "src/m.py"]) == 0
    assert "src/m.py (4/" in capsys.readouterr().out
    (tree / "src" / "m.py").write_text(SOURCE.replace("x + 1", "x + 2"))  # a line the run executed
    assert exercised.main(["--data", str(tree / ".coverage"), "--root", str(tree), "--against", "HEAD"]) == 0
    assert "every one run by a scenario" in capsys.readouterr().out
