"""The committed versions of a baseline file, read from git, for the baseline-history plot.

`baseline_history(path)` lists the commits that changed `path` (newest last, at most `limit`), reads each version
with `git show` and verifies it like any baseline (`store.parse_baseline`). A version that does not verify, or a
file outside a git work tree, is left out: the history is an aid for reading, never an input of the gate.
"""

from __future__ import annotations

from pathlib import Path

from tripwire.bench.store import BaselineError, BenchRun, parse_baseline
from tripwire.common.git import GitError, git_run


def _git(
    cwd: Path, command: str, *options: str, operands: tuple[str, ...] = (), paths: tuple[str, ...] = ()
) -> str | None:
    try:
        done = git_run(cwd, command, *options, operands=operands, paths=paths or None, timeout=30)
    except GitError:
        return None
    return done.stdout.decode("utf-8", "replace") if done.returncode == 0 else None


def baseline_history(path: Path, limit: int = 12) -> list[tuple[str, BenchRun]]:
    """(label "<short sha> <date>", run) for each committed version of `path`, oldest first."""
    path = path.resolve()
    top = _git(path.parent, "rev-parse", "--show-toplevel")
    if top is None:
        return []
    root = Path(top.strip())
    relative = path.relative_to(root).as_posix()
    log = _git(root, "log", f"-{limit}", "--format=%h %cs", paths=(relative,))
    history: list[tuple[str, BenchRun]] = []
    for line in reversed((log or "").splitlines()):
        sha = line.split()[0]
        text = _git(root, "show", operands=(f"{sha}:{relative}",))
        if text is None:
            continue
        try:
            history.append((line, parse_baseline(text, Path(f"{sha}:{relative}"))))
        except BaselineError:
            continue
    return history
