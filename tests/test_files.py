"""esper.files: a save killed mid-write leaves its temporary file, and the next save of that file removes it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from esper import files
from esper.files import replace_atomically

# A child that saves `target` and is SIGKILLed inside its write, as a run killed mid-save is.
KILLED_MID_SAVE = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from esper.files import replace_atomically

    def write(handle):
        handle.write(b"half a checkpoint")
        handle.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    replace_atomically(Path(sys.argv[1]), write)
    """
)


def _temporaries(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir() if path.name.endswith(".tmp"))


def _killed_mid_save(target: Path) -> str:
    done = subprocess.run([sys.executable, "-c", KILLED_MID_SAVE, str(target)], capture_output=True, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    [left] = _temporaries(target.parent)
    return left


def test_the_next_save_removes_the_temporary_file_a_killed_save_left(tmp_path: Path) -> None:
    target = tmp_path / "ck.pt"
    replace_atomically(target, lambda handle: handle.write(b"round 1"))
    left = _killed_mid_save(target)
    assert left.startswith(".ck.pt.") and (tmp_path / left).read_bytes() == b"half a checkpoint"
    assert target.read_bytes() == b"round 1"  # the killed save changed nothing

    replace_atomically(target, lambda handle: handle.write(b"round 2"))
    assert target.read_bytes() == b"round 2"
    assert _temporaries(tmp_path) == []


def test_a_live_writers_another_machines_and_an_unnamed_temporary_file_are_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "ck.pt"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        host = files._host_tag()
        other_host = f"{int(host, 16) ^ 1:08x}"
        kept = [
            f".ck.pt.{sleeper.pid}-{host}.abcd1234.tmp",  # a save still writing, in another process
            f".ck.pt.{os.getpid()}-{host}.abcd1234.tmp",  # this process's own (another thread's save)
            f".ck.pt.{_dead_pid()}-{other_host}.abcd1234.tmp",  # another machine's, on a shared file system
            ".ck.pt.abcd1234.tmp",  # written before temporary files named their writer
            f".other.pt.{_dead_pid()}-{host}.abcd1234.tmp",  # another file's
            f".ck.pt.0-{host}.abcd1234.tmp",  # not a process id: os.kill(0, ...) would signal the process group
        ]
        for name in kept:
            (tmp_path / name).write_bytes(b"x")
        stale = f".ck.pt.{_dead_pid()}-{host}.abcd1234.tmp"
        (tmp_path / stale).write_bytes(b"x")

        replace_atomically(target, lambda handle: handle.write(b"saved"))
        assert _temporaries(tmp_path) == sorted(kept)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_name_too_long_to_carry_its_writer_still_saves(tmp_path: Path) -> None:
    target = tmp_path / ("c" * 240)
    replace_atomically(target, lambda handle: handle.write(b"saved"))
    assert target.read_bytes() == b"saved" and _temporaries(tmp_path) == []


def test_a_failing_sweep_never_fails_the_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(path: object) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    target = tmp_path / "ck.pt"
    stale = tmp_path / f".ck.pt.{_dead_pid()}-{files._host_tag()}.abcd1234.tmp"
    stale.write_bytes(b"x")
    monkeypatch.setattr(files.os, "scandir", refuse)
    replace_atomically(target, lambda handle: handle.write(b"saved"))
    assert target.read_bytes() == b"saved" and stale.exists()


def _dead_pid() -> int:
    """The id of a process that has exited and been reaped."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    return int(done.stdout)
