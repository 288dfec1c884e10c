"""Checkpoints: atomic save (temp file, fsync, rename) and safe load (`torch.load(weights_only=True)`).

A checkpoint holds the controller (policy, optimizer, both normalizers, sampling generator), the trainer's
rolling accuracy, the round counter, the layout it was saved with, (in its state's "data") the data signature:
dataset, image channels, image size and classes, and its content digest (`checkpoint_digest`). Resuming with another
env count, slot layout or data is refused, and so is a checkpoint whose content no longer matches its digest.
"""

from __future__ import annotations

import errno
import os
import pickle
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from esper.files import replace_atomically
from esper.messages import first_line
from esper.simic.training.checkpoint_digest import DIGEST_KEY, content_digest, host_copy
from esper.simic.training.checkpoint_schema import (
    BOOL,
    COUNT,
    INT,
    NON_NEGATIVE,
    NONE,
    STR,
    Fields,
    ListOf,
    OneOf,
    Plain,
    problem,
)

CHECKPOINT_FORMAT = "esper-checkpoint"
CHECKPOINT_VERSION = 1
REASON_CHARACTERS = 160  # of an exception's message quoted in a one-line error


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message is one line naming the file and what to do."""


class CheckpointWriteError(RuntimeError):
    """A checkpoint that could not be written (disk full, file-size limit, ...): one line naming the file, the
    system's reason and the fix; the previous checkpoint, if any, is left as it was."""


@dataclass(frozen=True)
class CheckpointLayout:
    """What must match between the run that saved a checkpoint and the run that resumes it."""

    n_envs: int
    slot_ids: tuple[str, ...]
    task: str
    controller: str


def save_checkpoint(
    path: str | Path, *, layout: CheckpointLayout, rounds_completed: int, state: dict[str, Any]
) -> None:
    """Write atomically: a crash mid-save leaves the previous checkpoint (or none), never a partial one."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    payload = host_copy(
        {
            "format": CHECKPOINT_FORMAT,
            "version": CHECKPOINT_VERSION,
            "rounds_completed": rounds_completed,
            "n_envs": layout.n_envs,
            "slot_ids": list(layout.slot_ids),
            "task": layout.task,
            "controller": layout.controller,
            "state": state,
        }
    )  # the one copy of the state to the host: digested and written as it is
    payload[DIGEST_KEY] = content_digest(payload)
    existed = target.exists()
    try:
        replace_atomically(target, lambda handle: torch.save(payload, handle))
    except (OSError, RuntimeError) as exc:
        cause = _os_error(exc)
        if cause is None:
            raise
        raise CheckpointWriteError(write_failure(target, cause, existed=existed)) from None


def _os_error(exc: BaseException) -> OSError | None:
    """The OSError behind `exc`: itself, or the one torch's zip writer turned into a RuntimeError."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, OSError) and current.errno is not None:
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def write_failure(target: Path, error: OSError, *, existed: bool) -> str:
    """One line: which checkpoint could not be written, the system's reason, what was kept and how to fix it."""
    code = error.errno or 0
    reason = f"{os.strerror(code)} ({errno.errorcode.get(code, code)})"
    fixes = {
        errno.EFBIG: "raise the file-size limit (ulimit -f) or --save to a file system that allows larger files",
        errno.ENOSPC: "free space on that disk or --save to another disk",
        errno.EDQUOT: "free space within your disk quota or --save to another disk",
    }
    fix = fixes.get(code, "check the file system, or --save to another path")
    kept = f"the previous checkpoint {target} is unchanged" if existed else "no partial file was left"
    return f"cannot write checkpoint {target}: {reason}; {kept}: {fix}"


PAYLOAD_SPEC = Fields(
    {
        "format": STR,
        "version": INT,
        "rounds_completed": COUNT,
        "n_envs": COUNT,
        "slot_ids": ListOf(STR),
        "task": STR,
        "controller": STR,
        "state": Plain(),  # checked against the resuming run's own spec (`state_spec`)
        DIGEST_KEY: STR,  # absent in checkpoints written before digests
    },
    optional=frozenset({DIGEST_KEY}),
)


def state_spec(client: Any) -> Fields:
    """What a checkpoint's "state" must hold for this run: the client's state (its spec is the resuming client's,
    `PolicyClient.state_spec()`), the trainer's rolling accuracies and events path, and the data signature (absent
    in checkpoints from before it was recorded)."""
    trainer = Fields({"round_accuracies": ListOf(NON_NEGATIVE), "events": OneOf((STR, NONE))}, partial=True)
    data = Fields({"dataset": STR, "channels": COUNT, "image_size": COUNT, "classes": COUNT})
    determinism = Fields({name: BOOL for name in DETERMINISM_FLAGS} | {"cublas_workspace_config": STR})
    fields = {"client": client, "trainer": trainer, "data": data, "determinism": determinism}
    return Fields(fields, optional=frozenset({"data", "determinism"}))


def _refuse_shape(source: Path, found: str) -> CheckpointError:
    return CheckpointError(
        f"checkpoint {source} does not hold what this trainer saves ({found}): resume from a file written by --save, "
        "or start without --resume"
    )


# what decides whether a CUDA run repeats (`esper.tolaria.determinism`), recorded with the checkpoint since stop 52
DETERMINISM_FLAGS = ("requested", "algorithms", "cudnn_deterministic", "cudnn_benchmark")
DATA_FIELDS = {"dataset": "dataset", "channels": "image channels", "image_size": "image size", "classes": "classes"}
# What a checkpoint from an older esper lacks, and what resuming it therefore does not check (`unchecked_note`).
NO_DATA_SIGNATURE = ("data signature", "that it was trained on this dataset, image shape and class count")
NO_DIGEST = ("digest", "that its content is what --save wrote (silent corruption)")


def unchecked_note(path: str | Path, missing: list[tuple[str, str]]) -> str:
    """One line: what an older checkpoint does not record (`NO_DIGEST`, `NO_DATA_SIGNATURE`), so is not checked."""
    names = " and no ".join(name for name, _ in missing)
    checks = ", nor ".join(check for _, check in missing)
    return f"checkpoint {path} records no {names} (written by an older esper): resuming without checking {checks}"


def check_data_signature(path: str | Path, saved: Any, current: dict[str, Any]) -> str | None:
    """Refuse (CheckpointError) a resume whose data differs from the data the checkpoint was trained on, naming
    each field that differs with both values. A checkpoint from before data signatures were recorded is accepted:
    the returned note says its data could not be checked (None when it could)."""
    if not isinstance(saved, dict):
        return unchecked_note(path, [NO_DATA_SIGNATURE])
    differ = [
        f"{label} {saved.get(key)!r} (checkpoint) vs {current.get(key)!r} (this run)"
        for key, label in DATA_FIELDS.items()
        if saved.get(key) != current.get(key)
    ]
    if differ:
        raise CheckpointError(
            f"checkpoint {path} was trained on other data: {'; '.join(differ)}: resume with the --dataset (and "
            "--data-dir) it was saved with, or start without --resume"
        )
    return None


def _verify_archive(source: Path) -> None:
    """Check the zip structure and every member's CRC: torch.load itself reads a flipped bit in tensor data
    silently, so a damaged checkpoint would resume with corrupted weights."""
    try:
        with zipfile.ZipFile(source) as archive:
            damaged = archive.testzip()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
        reason = first_line(exc, REASON_CHARACTERS)
        raise CheckpointError(
            f"checkpoint {source} is truncated or corrupted (not a readable zip archive: {reason}): "
            "resume from an intact file or start without --resume"
        ) from None
    if damaged is not None:
        raise CheckpointError(
            f"checkpoint {source} is truncated or corrupted (checksum mismatch in {damaged}): "
            "resume from an intact file or start without --resume"
        )


def is_checkpoint(path: str | Path) -> bool:
    """Whether `path` is a readable esper checkpoint (any layout): the files --save may replace."""
    try:
        _read_payload(Path(path))
    except CheckpointError:
        return False
    return True


def load_checkpoint(
    path: str | Path, *, layout: CheckpointLayout, state: Any, missing: list[tuple[str, str]] | None = None
) -> tuple[int, dict[str, Any]]:
    """Load and validate a checkpoint, its "state" against the spec `state` (a run passes `state_spec(...)` of its
    own client; `Plain()` checks nothing) and its content against its digest before any of it is used; returns
    (rounds_completed, state). Errors are one-line CheckpointErrors. A checkpoint written before digests is
    accepted; `NO_DIGEST` is then added to `missing`, for the run's note (`unchecked_note`)."""
    source = Path(path)
    payload = _read_payload(source)
    saved = CheckpointLayout(
        n_envs=int(payload["n_envs"]),
        slot_ids=tuple(payload["slot_ids"]),
        task=str(payload["task"]),
        controller=str(payload["controller"]),
    )
    if saved != layout:
        raise CheckpointError(
            f"checkpoint {source} was saved with {saved.n_envs} envs, slots {','.join(saved.slot_ids)}, task "
            f"{saved.task}, controller {saved.controller}; this run has {layout.n_envs} envs, slots "
            f"{','.join(layout.slot_ids)}, task {layout.task}, controller {layout.controller}: resume with the same "
            "--envs, --slots and --task"
        )
    found = problem(payload["state"], state, "state")
    if found is not None and found.startswith(("state.client.agent.policy", "state.client.obs_normalizer.")):
        raise CheckpointError(
            f"checkpoint {source} holds a controller of another shape or kind ({found}): resume with the "
            "--memory-size, hidden size and controller it was saved with"
        )
    if found is not None:
        raise _refuse_shape(source, found)
    _check_digest(source, payload, missing)
    return int(payload["rounds_completed"]), payload["state"]


def _check_digest(source: Path, payload: dict[str, Any], missing: list[tuple[str, str]] | None) -> None:
    """Refuse a checkpoint whose content differs from the digest written with it (after the schema: the fields are
    the shapes and types hashed)."""
    written = payload.get(DIGEST_KEY)
    if written is None:
        if missing is not None:
            missing.append(NO_DIGEST)
        return
    if written != content_digest(payload):
        raise CheckpointError(
            f"checkpoint {source} does not hold what --save wrote: its content no longer matches the digest saved "
            "with it (silently corrupted, e.g. a flipped bit, or edited): resume from an intact copy, or start "
            "without --resume"
        )


def _read_payload(source: Path) -> dict[str, Any]:
    """The checkpoint's payload dict, its format and version checked; one-line CheckpointErrors otherwise."""
    if not source.is_file():
        raise CheckpointError(f"checkpoint {source} does not exist: pass an existing file to --resume")
    _verify_archive(source)
    try:
        with warnings.catch_warnings():  # e.g. torch's note that it scans a sparse tensor: not the user's concern
            warnings.simplefilter("ignore")
            payload = torch.load(source, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"checkpoint {source} holds objects weights_only loading refuses ({first_line(exc, REASON_CHARACTERS)}): "
            "only checkpoints written by --save can be resumed"
        ) from None
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile, ValueError) as exc:
        raise CheckpointError(
            f"checkpoint {source} is truncated or corrupted ({first_line(exc, REASON_CHARACTERS)}): "
            "resume from an intact file or start without --resume"
        ) from None
    if (
        not isinstance(payload, dict)
        or not isinstance(payload.get("format"), str)
        or payload["format"] != CHECKPOINT_FORMAT
    ):
        raise CheckpointError(f"checkpoint {source} is not an esper checkpoint: pass a file written by --save")
    version = payload.get("version")
    if type(version) is not int or version != CHECKPOINT_VERSION:
        shown = repr(version) if type(version) is int and abs(version) < 10**6 else f"of type {type(version).__name__}"
        raise CheckpointError(
            f"checkpoint {source} has format version {shown}, this trainer reads {CHECKPOINT_VERSION}: resume from a "
            "file this version wrote, or start without --resume"
        )
    found = problem(payload, PAYLOAD_SPEC)
    if found is not None:
        raise _refuse_shape(source, found)
    return payload


def determinism_note(path: str | Path, saved: Any, current: dict[str, Any]) -> str | None:
    """One line when the checkpoint was trained with other deterministic-kernel settings than this run has (the
    resumed run then does not repeat the unbroken one bitwise on CUDA), else None; a checkpoint from before the
    settings were recorded says nothing."""
    if not isinstance(saved, dict):
        return None
    differ = [
        f"{name} {saved.get(name)!r} -> {current.get(name)!r}"
        for name in DETERMINISM_FLAGS
        if saved.get(name) != current.get(name)
    ]
    if not differ:
        return None
    return (
        f"checkpoint {path} was trained with other determinism settings ({', '.join(differ)}): resuming, but on "
        "CUDA the resumed run does not repeat an unbroken one bitwise; resume with the --deterministic setting it was "
        "saved with"
    )
