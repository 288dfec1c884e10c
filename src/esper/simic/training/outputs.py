"""Output paths, checked and claimed before any work starts.

`claim_outputs(config)` runs before data, models or the telemetry run folder are made:
- `--save PATH` must not be a directory (nor end in '/'), its folder must be writable, and an existing file there
  must be one of our checkpoints (or the `--resume` file) unless `--overwrite` is given: a typo cannot replace
  someone's notes;
- the checkpoint path is held by an exclusive lock (`flock` on a sidecar `.<name>.lock` file next to it) for
  the run's life, so a second run saving to the same path is refused at start instead of silently losing one
  run's checkpoint;
- `--telemetry-dir` must be a folder that can be created and written. Each run writes into its own run folder
  inside it (the directory backend never reuses one and locks its events file).

Every refusal is one `OutputPathError` line naming the path, the cause and the fix (exit 2).
"""

from __future__ import annotations

import errno
import fcntl
import os
from dataclasses import dataclass, field
from pathlib import Path

from esper.simic.training.checkpoint import is_checkpoint
from esper.simic.training.config import TrainingConfig


class OutputPathError(ValueError):
    """An output path that cannot be used; one line naming the flag, the path and the fix."""


@dataclass
class OutputLocks:
    """The exclusive locks a run holds on its outputs; `release()` (or leaving the `with`) removes the lock files
    and lets the locks go, so a finished or refused run leaves nothing behind."""

    held: list[tuple[Path, int]] = field(default_factory=list)

    def release(self) -> None:
        while self.held:
            path, fd = self.held.pop()
            path.unlink(missing_ok=True)  # unlink while locked: a run that opens it now sees a stale inode, retries
            os.close(fd)  # closing the descriptor drops its flock

    def __enter__(self) -> OutputLocks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def claim_outputs(config: TrainingConfig, *, lock_checkpoint: bool = True) -> OutputLocks:
    """Check every output path of `config` and lock the checkpoint path; raises OutputPathError.

    `lock_checkpoint=False` (the ranks of a sharded run other than rank 0, which alone writes the checkpoint)
    checks the telemetry folder only."""
    locks = OutputLocks()
    try:
        if config.telemetry_dir is not None:
            _check_folder(Path(config.telemetry_dir), "--telemetry-dir")
        if config.save_path is not None and lock_checkpoint:
            target = Path(config.save_path)
            _check_save_target(target, config)
            locks.held.append(_lock(target))
    except OSError as error:  # a name too long, a loop of links, ...: raised by the checks themselves
        locks.release()
        raise OutputPathError(
            f"output path {error.filename or config.save_path or config.telemetry_dir} cannot be used "
            f"({error.strerror}): pass another --save / --telemetry-dir"
        ) from None
    except BaseException:
        locks.release()
        raise
    return locks


def _check_folder(folder: Path, flag: str) -> None:
    if folder.exists() and not folder.is_dir():
        raise OutputPathError(f"{flag} {folder} is a file, not a folder: pass a folder path")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OutputPathError(f"{flag} {folder} cannot be created ({error.strerror}): pass a writable folder") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputPathError(f"{flag} {folder} is not writable: pass a folder you can write to")


def _check_save_target(target: Path, config: TrainingConfig) -> None:
    if str(config.save_path).endswith(("/", os.sep)):  # Path() drops the slash: the file would not be where it says
        raise OutputPathError(
            f"--save {config.save_path} ends in '/', so it names a folder: pass a file path such as "
            f"{target / 'run.ckpt'}, or {target} without the '/'"
        )
    if target.is_dir():
        raise OutputPathError(f"--save {target} is a folder: pass a file path such as {target / 'run.ckpt'}")
    _check_folder(target.parent, "--save's folder")
    resuming_it = config.resume_path is not None and Path(config.resume_path).resolve() == target.resolve()
    if target.exists() and not (config.overwrite or resuming_it or is_checkpoint(target)):
        raise OutputPathError(
            f"--save {target} exists and is not an esper checkpoint: pass another path, or --overwrite to replace it"
        )


def _lock(target: Path) -> tuple[Path, int]:
    """Hold an exclusive lock on the checkpoint path: a sidecar lock file, since the checkpoint itself is replaced
    atomically by rename and cannot carry a lock. The file lives as long as the run."""
    lock_path = target.parent / f".{target.name}.lock"
    while True:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise OutputPathError(f"--save {target}: cannot create its lock file ({error.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise OutputPathError(
                    f"--save {target} is in use by another run (it holds {lock_path}): wait for that run to finish "
                    "or pass another --save path"
                ) from None
            raise OutputPathError(f"--save {target}: cannot lock it ({error.strerror})") from None
        try:
            current = os.stat(lock_path).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(fd).st_ino:
            return lock_path, fd
        os.close(fd)  # the previous holder removed the file as we opened it: lock the new one
