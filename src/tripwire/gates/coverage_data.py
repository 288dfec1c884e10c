"""What the scenarios ran, read from coverage.py data and the tree's sources, each checked before use.

The changed-line gate (`tripwire.gates.exercised`) reads three kinds of input it did not write: a coverage.py data
file (an SQLite database), the source files it measured, and the files a user names (`--modules`, an exclusion's
`where`). Each is checked here first, and any damage is one `ExercisedError` line naming the file and what to do:

- the data file must be a regular file (a FIFO would block SQLite forever, `/dev/zero` never ends) that starts
  with SQLite's header; coverage.py's own refusals (`no such table`, `file is not a database`, `wrong schema`,
  `database disk image is malformed`), SQLite's (a `path` that is not UTF-8) and malformed rows are read once,
  whole, inside one guard (`read_lines`);
- a measured path that climbs out of the tree (`ROOT/../../etc/passwd`) is refused, never read as source;
- a source file must lie inside the tree once links are resolved, be a regular file of UTF-8 text and parse
  (`source_text`); only then does coverage.py analyse it for its statements (`statements`).

coverage.py is imported when a data file is read (tripwire's `coverage` extra). Loads no torch.
"""

from __future__ import annotations

import ast
import os
import re
import sqlite3
from pathlib import Path
from typing import Any

from tripwire.common.errors import TripwireError
from tripwire.common.files import input_file, read_text, shown, within

__all__ = ["ExercisedError", "coverage_of", "executed_lines", "read_lines", "source_text", "statements"]

SQLITE_HEADER = b"SQLite format 3\x00"
RECORD_AGAIN = "run the scenarios under coverage again (coverage run ...; coverage combine) and pass that file"
# Whatever a damaged database or row makes coverage.py or SQLite raise while the data is read.
_UNREADABLE = (sqlite3.Error, OSError, TypeError, ValueError, OverflowError, KeyError, IndexError, AttributeError)


class ExercisedError(TripwireError):
    """The inputs of the changed-line check are unusable (no coverage data, a bad exclusion list, git refused)."""


def _coverage_module() -> Any:
    try:
        import coverage
    except ImportError as error:  # pragma: no cover - the extra is part of the test environment
        raise ExercisedError("coverage.py is not installed: pip install 'tripwire-gate[coverage]'") from error
    return coverage


def check_data_file(data_file: Path) -> None:
    """Refuse, before SQLite opens it, a data file that is missing, not a regular file or not an SQLite file."""
    if not os.path.lexists(data_file):
        first = "run the scenarios under coverage first (coverage run -m pytest ...)"
        raise ExercisedError(f"no coverage data at {shown(data_file)}: {first}")
    input_file(data_file, "--data", ExercisedError, RECORD_AGAIN)
    try:
        with open(data_file, "rb") as stream:
            header = stream.read(len(SQLITE_HEADER))
    except OSError as error:
        raise ExercisedError(f"--data {shown(data_file)}: cannot be read ({error.strerror}): {RECORD_AGAIN}") from None
    if header != SQLITE_HEADER:
        raise ExercisedError(f"--data {shown(data_file)}: not coverage.py data (no SQLite header): {RECORD_AGAIN}")


def read_lines(data_file: Path) -> dict[str, set[int]]:
    """Every measured file's executed lines, as the data file names them; read whole, so damage surfaces here."""
    check_data_file(data_file)
    coverage = _coverage_module()
    try:
        data = coverage.CoverageData(basename=str(data_file))
        data.read()
        lines: dict[str, set[int]] = {}
        for name in data.measured_files():
            if not isinstance(name, str):
                raise TypeError(f"a measured path is {type(name).__name__}")
            lines[name] = {int(number) for number in data.lines(name) or ()}
            data.file_tracer(name)  # the analysis reads it too: its table damaged is the data's fault, said here
    except (coverage.exceptions.CoverageException, *_UNREADABLE) as error:
        raise _damaged(data_file, error) from None
    return lines


def _damaged(data_file: Path, error: BaseException) -> ExercisedError:
    reason = re.sub(r"^Couldn't use data file '[^']*': ", "", str(error))  # the file is named once, in front
    first = (reason.splitlines() or [type(error).__name__])[0]
    return ExercisedError(f"--data {shown(data_file)}: damaged coverage data ({shown(first)}): {RECORD_AGAIN}")


def executed_lines(data_file: Path, root: Path) -> dict[str, set[int]]:
    """Lines coverage.py saw run, per file under `root` (root-relative; copies of the tree elsewhere are ignored). A
    measured path under `root` that climbs out of it (`..`) is refused: it would be read as the tree's source."""
    prefix = str(root.resolve()) + os.sep
    executed: dict[str, set[int]] = {}
    for name, lines in read_lines(data_file).items():
        if not name.startswith(prefix):
            continue
        if not os.path.normpath(name).startswith(prefix):
            raise ExercisedError(
                f"--data {shown(data_file)}: measured file {shown(name)} lies outside the tree {root} (a '..' climbs "
                f"out of it): {RECORD_AGAIN}"
            )
        executed[name[len(prefix) :]] = lines
    return executed


def source_text(root: Path, name: str, what: str) -> str:
    """The text of the tree's Python file `name` (root-relative), checked: inside the tree once links are
    resolved, a regular file, UTF-8, and Python that parses. `what` says where the name came from (`--modules`)."""
    path = root / name
    if os.path.isabs(name) or not within(root, path):
        raise ExercisedError(f"{what} {shown(name)}: lies outside the tree {root}: name a file inside it")
    text = read_text(path, what, ExercisedError, "name a Python source file of the tree")
    try:
        ast.parse(text)
    except SyntaxError as error:
        raise ExercisedError(
            f"{what} {shown(name)}:{error.lineno}: cannot be parsed ({error.msg}); fix the syntax first"
        ) from None
    except (ValueError, RecursionError, MemoryError) as error:  # NUL bytes; nesting too deep for the parser
        raise ExercisedError(
            f"{what} {shown(name)}: cannot be parsed ({type(error).__name__}): name a Python source file"
        ) from None
    return text


def coverage_of(data_file: Path) -> Any:
    """A `coverage.Coverage` holding the data file, read and checked first (`read_lines`), for `statements`."""
    read_lines(data_file)
    cov = _coverage_module().Coverage(data_file=str(data_file))
    cov.load()
    return cov


def statements(cov: Any, root: Path, name: str, what: str) -> set[int]:
    """The executable statements coverage.py finds in the tree's file `name`, its source checked first."""
    source_text(root, name, what)
    coverage = _coverage_module()
    try:
        return set(cov.analysis2(str(root / name))[1])
    except coverage.exceptions.DataError as error:  # the data, read again for this file
        raise _damaged(Path(cov.config.data_file), error) from None
    except (coverage.exceptions.CoverageException, SyntaxError, *_UNREADABLE) as error:  # NoSource, NotPython
        raise ExercisedError(
            f"{what} {shown(name)}: coverage.py cannot analyse it ({type(error).__name__}: {error}): name a Python "
            "source file of the tree"
        ) from None
