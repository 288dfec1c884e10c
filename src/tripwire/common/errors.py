"""Exceptions raised by tripwire; every message names the file, region, checkpoint or flag at fault.

How to read them: `TripwireError` subclasses are usage or input problems (a malformed golden or
events file, a timer used out of order) and say what to fix. The `*Failure` classes subclass
`AssertionError` so pytest reports them as test failures; their message is the guardrail's full report
(which region, call site, checkpoint or tensor changed) and no traceback is needed to act on it. This module loads
no torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class TripwireError(Exception):
    """Base class for tripwire usage and input errors."""


class TelemetryParseError(TripwireError, ValueError):
    """An events file has a malformed or partial line; the message is `path:line: what is wrong`."""


class GoldenFileError(TripwireError, ValueError):
    """A golden file (sync budget, trajectory) is missing, unreadable or in an unknown format."""


class TimerStateError(TripwireError, RuntimeError):
    """A timer was stopped without being started, or started twice."""


class GuardrailFailure(AssertionError):
    """Base class for guardrail failures; the message is the full, human-readable report."""


class SyncBudgetExceeded(GuardrailFailure):
    """A hot-path region made more host syncs than its budget, or a region has no budget."""


class CompileBudgetExceeded(SyncBudgetExceeded):
    """What torch.compile did exceeds the committed compile budget (a new graph break, a recompile); the message
    names the region, the line and the reason."""


class TrajectoryDivergence(GuardrailFailure):
    """A recorded trajectory differs from its golden; the message names the first divergence."""


# The command that records goldens on purpose, named in every "regenerate with ..." message. Under pytest the plugin
# sets it from the `tripwire_update_command` ini option (default DEFAULT_UPDATE_COMMAND; this repository: `nox -s
# baselines`); outside pytest, messages name tripwire's own commands (OUTSIDE_PYTEST_UPDATE_COMMAND), and
# `python -m tripwire budget check` names the exact `budget write` line.
DEFAULT_UPDATE_COMMAND = "pytest --tripwire-update --snapshot-update"
OUTSIDE_PYTEST_UPDATE_COMMAND = (
    "python -m tripwire budget write RESULT FILE (RESULT: a `python -m tripwire run` folder)"
)
_update_command = OUTSIDE_PYTEST_UPDATE_COMMAND


# How to compare a head tree against its base on one machine when no committed golden applies (ini option
# `tripwire_against_command`; this repository: `nox -s guardrails -- --against origin/main`).
DEFAULT_AGAINST_COMMAND = (
    "record the base tree's goldens into a scratch folder (pytest --tripwire-update -o tripwire_baselines=DIR), "
    "then run this tree with -o tripwire_baselines=DIR --tripwire-against BASE"
)
_against_command = DEFAULT_AGAINST_COMMAND


def against_command() -> str:
    return _against_command


def set_against_command(command: str | None) -> None:
    global _against_command
    _against_command = command or DEFAULT_AGAINST_COMMAND


def update_command() -> str:
    """How this project records goldens on purpose (for messages)."""
    return _update_command


def set_update_command(command: str | None) -> None:
    """Name the project's own update command in messages (None or "" restores pytest's default)."""
    global _update_command
    _update_command = command or DEFAULT_UPDATE_COMMAND


@contextlib.contextmanager
def naming_update_command(command: str) -> Iterator[None]:
    """Name `command` in messages for the duration of the block (a CLI command's own update line), then restore the
    command named before: one command's messages never leak into the next one run in the same process."""
    global _update_command
    before = _update_command
    _update_command = command
    try:
        yield
    finally:
        _update_command = before


def read_golden_json(path: Path, missing: str) -> Any:
    """Parse a JSON golden file; any unreadable file raises `GoldenFileError` naming it.

    `missing` is the message used when the file does not exist (it says what to do).
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise GoldenFileError(f"{path}: {missing}") from None
    except NotADirectoryError:
        raise GoldenFileError(f"{path}: a file stands where a folder is expected on this path") from None
    except (OSError, ValueError) as error:  # a loop of symbolic links, a name too long, a NUL byte
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise GoldenFileError(f"{path}: cannot be read ({reason}): put the file itself there") from None
    if not stat.S_ISREG(mode):  # a folder, or a FIFO that would block the read forever
        raise GoldenFileError(f"{path}: not a regular file: put the file itself there")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise GoldenFileError(
            f"{path}: cannot be read ({error.strerror or error}): put the file itself there"
        ) from None
    except RecursionError:
        raise GoldenFileError(f"{path}: JSON nested too deeply to be one of tripwire's files: regenerate it") from None
    except json.JSONDecodeError as error:
        raise GoldenFileError(f"{path}:{error.lineno}: not valid JSON ({error.msg})") from None
    except UnicodeDecodeError:
        raise GoldenFileError(f"{path}: not UTF-8 text (binary-corrupted?): regenerate it") from None
    except ValueError as error:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        reason = str(error).split(":")[0]
        raise GoldenFileError(f"{path}: holds a number Python will not read ({reason}): regenerate it") from None


class NoGoldenApplies(GuardrailFailure):
    """A golden check found nothing to compare against where a comparison is required (under CI)."""
