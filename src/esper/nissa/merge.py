"""Merge a sharded run's per-rank event files into one `events.jsonl`, in the order one process emits events.

Each rank of a run sharded over torch.distributed writes its own `events.rank<r>.jsonl` (every line flushed
as it is emitted, so a rank that dies has lost nothing it emitted); every line carries its `rank` and its
merge key `order` = [round, epoch, phase, env_id, sequence], stamped where the loop was when it was emitted.
Sorting by that key reproduces the single-process order: within one phase of an epoch the single-process loop
walks the envs in id order, and each rank walks its own envs in the same order.

- Per-env events (`env_id >= 0`) are emitted only by the rank that runs the env.
- Run-level events (`env_id == -1`: TRAINING_STARTED, the PPO update, round summaries) are emitted alike by
  every rank (each runs the same update on the same gathered rollout); one copy per merge key is kept, the
  lowest rank's, so they survive as long as any rank wrote them.
- TRAINING_ENDED ends the stream exactly once: when a rank failed, that rank's own report (else a survivor's,
  which names the failed rank); otherwise the lowest rank's.
- A damaged line (invalid UTF-8, not JSON, cut short, JSON that is not a per-rank event) is dropped, never the
  file: every good line of every rank is merged, the kept TRAINING_ENDED gains `dropped_lines` (how many) and
  `dropped_from` (each as "events.rank<r>.jsonl:<line> (<why>)"), and `MergeResult.dropped_summary()` is the
  one-line report the trainer and `main` print on stderr. Only a merge that finds no event at all is refused.

The merged lines keep `rank` and drop `order`. The file is replaced atomically (temp file, rename) under a lock
on the run folder, so survivors of a failed run merging at once cannot interleave. By hand, e.g. after every
rank was killed: `python -m esper.nissa.merge RUN_DIR`.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from esper.files import replace_atomically
from esper.messages import escape
from esper.nissa.backends import EVENTS_FILE

RANK_FILE = re.compile(r"^events\.rank(\d+)\.jsonl$")
LOCK_FILE = ".merge.lock"


class MergeError(ValueError):
    """A per-rank file that cannot be merged; one line naming the file and the line."""


def rank_file_name(rank: int) -> str:
    return f"events.rank{rank}.jsonl"


@dataclass(frozen=True)
class MergeResult:
    """What a merge wrote: the merged file, its event count, the ranks read and the terminal event kept."""

    path: Path
    events: int
    ranks: tuple[int, ...]
    outcome: str | None  # the kept TRAINING_ENDED's outcome; None when no rank wrote one
    failed_rank: int | None = None
    dropped: tuple[DroppedLine, ...] = ()

    def dropped_summary(self) -> str | None:
        """One line naming every damaged line the merge dropped (file and line number), None when none was."""
        if not self.dropped:
            return None
        shown = ", ".join(str(line) for line in self.dropped[:MAX_NAMED])
        more = f" and {len(self.dropped) - MAX_NAMED} more" if len(self.dropped) > MAX_NAMED else ""
        return escape(
            f"dropped {len(self.dropped)} damaged line(s) while merging into {self.path}: {shown}{more}; "
            "every other line was merged"
        )


MAX_NAMED = 5  # damaged lines named one by one in the one-line report (all of them in TRAINING_ENDED's data)


@dataclass(frozen=True)
class DroppedLine:
    """A line of a per-rank file that could not be merged: where it is and why."""

    path: Path
    number: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path.name}:{self.number} ({self.reason})"


def read_rank_file(path: Path) -> list[dict[str, Any]]:
    """Every event line of one rank's file; a line without a merge key or that does not parse is refused."""
    events = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                event = json.loads(line)
            except json.JSONDecodeError as exc:
                raise MergeError(f"{path}:{number} is not a JSON event ({exc.msg}): the file is damaged") from None
            if not isinstance(event, dict) or not isinstance(event.get("order"), list):
                raise MergeError(f"{path}:{number} has no merge key 'order': not a per-rank event file")
            events.append(event)
    return events


def read_rank_lines(path: Path) -> tuple[list[dict[str, Any]], list[DroppedLine]]:
    """Every good event line of one rank's file, and the damaged lines it dropped (with their line numbers)."""
    events: list[dict[str, Any]] = []
    dropped: list[DroppedLine] = []
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            reason = None
            try:
                event = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError:
                reason = "invalid UTF-8"
            except json.JSONDecodeError as exc:
                reason = "cut short" if not raw.endswith(b"\n") else f"not JSON: {exc.msg} column {exc.colno}"
            else:
                if not _is_rank_event(event):
                    reason = "not a per-rank event"
            if reason is None:
                events.append(event)
            else:
                dropped.append(DroppedLine(path, number, reason))
    return events, dropped


def _is_rank_event(event: Any) -> bool:
    return (
        isinstance(event, dict)
        and isinstance(event.get("order"), list)
        and isinstance(event.get("event_type"), str)
        and isinstance(event.get("env_id"), int)
        and isinstance(event.get("data"), dict)
    )


def merge_events(
    by_rank: Mapping[int, Sequence[dict[str, Any]]], dropped: Sequence[DroppedLine] = ()
) -> list[dict[str, Any]]:
    """The merged stream of every rank's events (see the module docstring); `order` is dropped. Lines dropped
    as damaged are counted and named in the kept TRAINING_ENDED."""
    kept: dict[tuple[int, ...], dict[str, Any]] = {}
    ends: list[dict[str, Any]] = []
    for rank in sorted(by_rank):
        for event in by_rank[rank]:
            if event["event_type"] == "TRAINING_ENDED":
                ends.append(event)
                continue
            key = tuple(event["order"])
            if event["env_id"] >= 0:
                key = (*key, rank)  # never deduplicated: only the env's own rank emits it
            kept.setdefault(key, event)  # a run-level event: the lowest rank's copy
    merged = [kept[key] for key in sorted(kept)]
    terminal = terminal_event(ends)
    if terminal is not None:
        if dropped:
            data = {**terminal["data"], "dropped_lines": len(dropped), "dropped_from": [str(line) for line in dropped]}
            terminal = {**terminal, "data": data}
        merged.append(terminal)
    return [{name: value for name, value in event.items() if name != "order"} for event in merged]


def terminal_event(ends: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The one TRAINING_ENDED of the merged stream: a failed rank's own report first, then one naming it."""
    if not ends:
        return None
    failed = [end for end in ends if end["data"].get("outcome") == "failed"]
    own = [end for end in failed if end["data"].get("failed_rank") == end.get("rank")]
    named = [end for end in failed if end["data"].get("failed_rank") is not None]
    return min(own or named or failed or ends, key=lambda end: int(end.get("rank", 0)))


def rank_files(run_dir: Path) -> dict[int, Path]:
    """The per-rank event files of a run folder, by rank."""
    found = {}
    for path in run_dir.iterdir():
        match = RANK_FILE.match(path.name)
        if match:
            found[int(match.group(1))] = path
    return found


def warn_on_stderr(summary: str) -> None:
    print(f"warning: {summary}", file=sys.stderr, flush=True)


def merge_run_dir(
    run_dir: str | os.PathLike[str], *, warn: Callable[[str], None] | None = warn_on_stderr
) -> MergeResult:
    """Read every `events.rank<r>.jsonl` of `run_dir` and (re)write its merged `events.jsonl` atomically.

    Damaged lines are dropped, and `warn` (None: nothing) gets the one line naming them."""
    folder = Path(run_dir)
    files = rank_files(folder)
    if not files:
        raise MergeError(f"{folder} holds no per-rank event files (events.rank<r>.jsonl): not a sharded run's folder")
    lock = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # survivors of a failed run may merge at once: one after the other
        by_rank: dict[int, list[dict[str, Any]]] = {}
        dropped: list[DroppedLine] = []
        for rank, path in sorted(files.items()):
            by_rank[rank], damaged = read_rank_lines(path)
            dropped.extend(damaged)
        if dropped and not any(by_rank.values()):
            first = dropped[0]
            raise MergeError(f"{first.path}:{first.number} ({first.reason}): no line of any rank file is an event")
        merged = merge_events(by_rank, dropped)
        target = folder / EVENTS_FILE
        _write_atomically(target, merged)
    finally:
        os.close(lock)
    end = merged[-1] if merged and merged[-1]["event_type"] == "TRAINING_ENDED" else None
    result = MergeResult(
        path=target,
        events=len(merged),
        ranks=tuple(sorted(files)),
        outcome=None if end is None else end["data"].get("outcome"),
        failed_rank=None if end is None else end["data"].get("failed_rank"),
        dropped=tuple(dropped),
    )
    summary = result.dropped_summary()
    if summary is not None and warn is not None:
        warn(summary)
    return result


def _write_atomically(target: Path, events: Sequence[dict[str, Any]]) -> None:
    replace_atomically(target, functools.partial(_write_lines, events))


def _write_lines(events: Sequence[dict[str, Any]], handle: IO[bytes]) -> None:
    for event in events:
        handle.write((json.dumps(event, allow_nan=False) + "\n").encode("utf-8"))


def main(argv: Sequence[str]) -> int:
    """`python -m esper.nissa.merge RUN_DIR`: merge a sharded run's per-rank files by hand."""
    if len(argv) != 1:
        print("usage: python -m esper.nissa.merge RUN_DIR", file=sys.stderr)
        return 2
    try:
        result = merge_run_dir(argv[0], warn=None)
    except (MergeError, OSError) as exc:
        print(f"merge: error: {escape(str(exc))}", file=sys.stderr)
        return 2
    summary = result.dropped_summary()
    if summary is not None:
        print(f"merge: warning: {summary}", file=sys.stderr)
    ending = "no TRAINING_ENDED" if result.outcome is None else f"ends {result.outcome}"
    print(f"merged {result.events} events of ranks {list(result.ranks)} into {result.path} ({ending})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
