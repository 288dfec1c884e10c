"""Every git command tripwire runs, built so that no argument from outside can reach git as an option.

A command is `git -C REPO COMMAND [OPTIONS] --end-of-options [OPERANDS] [-- PATHS]`: options are tripwire's own
literals; operands (refs, shas, worktree folders) come after `--end-of-options` and are refused when they start
with `-` (a folder is passed as its absolute path, which never does); paths come after `--`. A ref taken from a
user (`--against`, `--range`, a scenario's `Tree.is_ancestor`) is checked first by `check_ref`, whose refusal names
the flag: `--against '--output=x' is not a commit (a ref never starts with '-' ...)`. git older than 2.24 lacks
`--end-of-options`; the refusal of a leading `-` holds there too. Loads no torch.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tripwire.common.errors import TripwireError

__all__ = ["GitError", "check_ref", "git_argv", "git_output", "git_run", "is_ancestor"]

# `git checkout` reads `--end-of-options` as a path (git 2.39): its operands are only checked, never marked.
_NO_END_OF_OPTIONS = frozenset({"checkout"})


class GitError(TripwireError, ValueError):
    """git refused a command, or an argument could have reached it as an option; one line naming which."""


def check_ref(ref: str, what: str, error: type[TripwireError] = GitError) -> str:
    """`ref` itself when git can only read it as a revision; otherwise `error` naming `what` (the flag or file it
    came from): empty, starting with `-` (an option: `--output=FILE` truncates FILE), or holding a space or a
    control character (no ref does)."""
    if not ref or ref.startswith("-") or any(char.isspace() or not char.isprintable() for char in ref):
        raise error(
            f"{what} {ref!r} is not a commit (a ref never starts with '-' or holds a space or control "
            "character): pass a branch, tag or sha"
        )
    return ref


def git_argv(
    repo: str | Path,
    command: str,
    *options: str,
    operands: Sequence[str | Path] = (),
    paths: Sequence[str] | None = None,
) -> list[str]:
    """The argument vector of one git command (module docstring; `command` may name a subcommand too: "worktree
    add"); raises GitError for an operand that starts with `-` and for an option that does not (an operand slipped
    in among the options)."""
    for option in options:
        if not option.startswith("-"):
            raise GitError(f"git {command}: {option!r} passed as an option: pass it as an operand")
    if command == "rev-parse" and operands and "--verify" not in options:  # else it echoes --end-of-options
        raise GitError("git rev-parse: operands need --verify")
    argv = ["git", "-C", os.fspath(Path(repo).absolute()), *command.split(), *options]
    checked = []
    for operand in operands:
        text = os.fspath(operand.absolute()) if isinstance(operand, Path) else operand
        check_ref(text, f"git {command}: operand")
        checked.append(text)
    if checked and command not in _NO_END_OF_OPTIONS:
        argv.append("--end-of-options")
    argv += checked
    if paths is not None:
        argv += ["--", *paths]
    return argv


def git_run(
    repo: str | Path,
    command: str,
    *options: str,
    operands: Sequence[str | Path] = (),
    paths: Sequence[str] | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run one git command (`git_argv`), whatever its exit status; raw bytes out. No git on the path, a folder that
    is gone or a timeout is a GitError."""
    argv = git_argv(repo, command, *options, operands=operands, paths=paths)
    try:
        return subprocess.run(argv, capture_output=True, check=False, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise GitError(f"git {command} could not run in {repo} ({type(error).__name__}: {error})") from None


def git_output(
    repo: str | Path,
    command: str,
    *options: str,
    operands: Sequence[str | Path] = (),
    paths: Sequence[str] | None = None,
    error: type[TripwireError] = GitError,
) -> str:
    """The text git prints for one command; a non-zero exit raises `error` with git's own last line."""
    done = git_run(repo, command, *options, operands=operands, paths=paths)
    if done.returncode:
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines() or ["(no message)"]
        raise error(f"git {command} failed in {repo}: {lines[-1]}")
    return done.stdout.decode("utf-8", "surrogateescape")


def is_ancestor(repo: str | Path, ref: str, of: str) -> bool:
    """Whether commit `ref` is `of` or one of its ancestors; False when git cannot say (an unknown ref, no
    repository). A ref that could reach git as an option is refused (GitError)."""
    return git_run(repo, "merge-base", "--is-ancestor", operands=(ref, of)).returncode == 0
