"""Paths tripwire reads and writes, checked before use: inputs are regular files, outputs can be written.

Inputs (`input_file`, `read_text`): a folder, a FIFO (reading it blocks forever), a device (`/dev/zero` never
ends), a link loop, a name too long or a file over its size limit is refused before it is opened, in one line
naming the file and what to do. `within(root, path)` says whether a path stays inside a tree once `..` and links
are resolved. Outputs (`output_folder`, `output_file`): checked before any work, without creating anything, so a
run's result is never lost to a path that cannot be written (a file standing where a folder belongs, `/proc`, a
read-only disk): the nearest existing folder on the path must be a folder that accepts a new file. `write_text`
writes a file whole or not at all (a temporary file renamed). Loads no torch.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from tripwire.common.errors import TripwireError

__all__ = ["PathError", "input_file", "output_file", "output_folder", "read_text", "shown", "within", "write_text"]

TEXT_LIMIT_BYTES = 64 * 2**20  # a TOML list, a source file: far below; /dev/zero's "file" is refused before this


class PathError(TripwireError, ValueError):
    """A path that cannot be read or written as asked; one line naming it, why, and what to do."""


def shown(path: object) -> str:
    """`path` as text with its control characters escaped as Python's repr writes them (`\\n`, `\\x1b`), so a
    name holding one cannot split a one-line message or drive the terminal."""
    text = str(path)
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a file" if stat.S_ISREG(mode) else "not a regular file"


def _named(what: str, path: Path) -> str:
    """How a message names an input: `--data x.db` (a flag or a role, then the path) or, without one, `x.db`."""
    return f"{what} {shown(path)}" if what else shown(path)


def input_file(path: Path, what: str, error: type[TripwireError] = PathError, fix: str = "") -> os.stat_result:
    """The status of `path` when it is a regular file (links followed); else `error`, one line of the form
    `<what> <path>: <problem>: <fix>` (the fix says what to pass instead, unless `fix` is given)."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        raise error(f"{_named(what, path)}: does not exist: {fix or 'pass an existing file'}") from None
    except (OSError, ValueError) as failure:  # a link loop, a name too long, a NUL byte, no permission
        reason = failure.strerror if isinstance(failure, OSError) and failure.strerror else str(failure)
        raise error(f"{_named(what, path)}: cannot be read ({reason}): {fix or 'pass a readable file'}") from None
    if not stat.S_ISREG(status.st_mode):
        kind = _kind(status.st_mode)
        raise error(f"{_named(what, path)}: {kind}, not a regular file: {fix or 'pass the file itself'}")
    return status


def read_text(
    path: Path, what: str, error: type[TripwireError] = PathError, fix: str = "", limit: int = TEXT_LIMIT_BYTES
) -> str:
    """A UTF-8 text file's content, checked first (`input_file`, at most `limit` bytes); one line otherwise."""
    status = input_file(path, what, error, fix)
    if status.st_size > limit:
        too_big = f"{status.st_size} bytes, over the limit of {limit}"
        raise error(f"{_named(what, path)}: {too_big}: {fix or 'pass the right file'}")
    try:
        return path.read_bytes()[: limit + 1].decode("utf-8")
    except UnicodeDecodeError as failure:
        raise error(
            f"{_named(what, path)}: not UTF-8 text (byte {failure.start}): {fix or 'pass a text file'}"
        ) from None
    except OSError as failure:
        reason = failure.strerror or type(failure).__name__
        raise error(f"{_named(what, path)}: cannot be read ({reason}): {fix or 'pass a readable file'}") from None


def within(root: Path, path: Path) -> bool:
    """Whether `path` lies inside `root` once `..` and symbolic links are resolved on both."""
    try:
        return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root))
    except (OSError, ValueError):
        return False


def _nearest_existing(path: Path) -> tuple[Path, os.stat_result]:
    """The longest prefix of `path` that exists, and its status; OSError for a link loop, a name too long. The path
    is not normalized: `afile/..` goes through `afile` as the system would, not around it as `abspath` would."""
    current = path if path.is_absolute() else Path.cwd() / path
    while True:
        try:
            return current, os.stat(current)
        except (FileNotFoundError, NotADirectoryError):
            if current.parent == current:
                raise
            current = current.parent


def _writable_folder(folder: Path) -> str | None:
    """None when a new file can be created in `folder`, else the system's reason."""
    try:
        handle, probe = tempfile.mkstemp(dir=folder, prefix=".tripwire-probe-")
    except OSError as failure:
        return failure.strerror or type(failure).__name__
    os.close(handle)
    os.unlink(probe)
    return None


def _check_output(path: Path, flag: str, error: type[TripwireError], *, folder: bool, noun: str = "folder") -> None:
    wanted = f"a {noun} path" if folder else "a file path"
    try:
        existing, status = _nearest_existing(path)
    except (OSError, ValueError) as failure:
        reason = failure.strerror if isinstance(failure, OSError) and failure.strerror else str(failure)
        raise error(f"{flag} {shown(path)} cannot be used ({reason}): pass {wanted} you can write") from None
    same = existing == (path if path.is_absolute() else Path.cwd() / path)
    if same and folder and not stat.S_ISDIR(status.st_mode):
        raise error(f"{flag} {shown(path)} is {_kind(status.st_mode)}, not a {noun}: pass {wanted}")
    if same and not folder and not stat.S_ISREG(status.st_mode):
        raise error(
            f"{flag} {shown(path)} is {_kind(status.st_mode)}: pass a file path (a new file, or one to replace)"
        )
    if not same and not stat.S_ISDIR(status.st_mode):
        kind = _kind(status.st_mode)
        raise error(f"{flag} {shown(path)}: {shown(existing)} on the way is {kind}, not a folder: pass {wanted}")
    too_long = [part for part in Path(path).parts if len(os.fsencode(part)) > 255]
    if too_long:
        raise error(f"{flag} {shown(path)}: a name on it is longer than 255 bytes: pass a shorter path")
    holder = existing if stat.S_ISDIR(status.st_mode) else existing.parent
    refused = _writable_folder(holder)
    if refused is not None:
        raise error(
            f"{flag} {shown(path)} cannot be written ({refused} in {shown(holder)}): pass {wanted} you can write"
        )


def output_folder(path: Path, flag: str, error: type[TripwireError] = PathError, noun: str = "folder") -> None:
    """Refuse (`error`, one line naming `flag` and calling the folder a `noun`) a folder that cannot be made and
    written, before any work."""
    _check_output(path, flag, error, folder=True, noun=noun)


def output_file(path: str | Path, flag: str, error: type[TripwireError] = PathError) -> None:
    """Refuse (`error`, one line naming `flag`) a file path that cannot be written, before any work; given as text,
    a path ending in '/', '.' or '..' (which `Path` drops or folds) names a folder and is refused too."""
    if isinstance(path, str) and os.path.basename(path) in ("", ".", ".."):  # `Path` would drop or fold it
        raise error(f"{flag} {shown(path)} ends in '/', '.' or '..', so it names a folder: pass a file path")
    _check_output(Path(path), flag, error, folder=False)


def write_text(path: Path, text: str) -> None:
    """Write `text` to `path` whole or not at all: a temporary file beside it, renamed over it (OSError raised).
    A folder made on the way is removed again when the write fails: `a/new/../x` makes `a/new` to reach `a/x`, and a
    refused write leaves no trace."""
    made: list[str] = []
    try:
        _make_folders(path.parent, made)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            os.fchmod(handle, _mode_for(path))  # a temporary file is private (0600); the file keeps its own mode
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                stream.write(text)
            os.replace(temporary, path)
        finally:
            if os.path.exists(temporary):
                os.unlink(temporary)
    except BaseException:
        for folder in reversed(made):
            with contextlib.suppress(OSError):  # only an empty folder goes: something else may have used it since
                os.rmdir(folder)
        raise


def _mode_for(path: Path) -> int:
    """The permissions a rewritten file keeps: its own, or a new file's under the process's umask."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    """The process's umask, read without changing it (Linux's `/proc/self/status`; 0o022 where it cannot be read)."""
    try:
        with open("/proc/self/status", "rb") as status:  # bytes: no codec to import mid-recording
            for line in status:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _make_folders(folder: Path, made: list[str]) -> None:
    """Make `folder` and each missing folder on its way, as the path spells them (`..` after a folder made here),
    adding the real path of each one made to `made`, outermost first."""
    current = Path(folder.anchor) if folder.is_absolute() else Path()
    for part in folder.parts[1:] if folder.is_absolute() else folder.parts:
        current = current / part
        if os.path.lexists(current):
            continue
        try:
            os.mkdir(current)
        except FileExistsError:  # made meanwhile by another process: not ours to remove
            continue
        made.append(os.path.realpath(current))
