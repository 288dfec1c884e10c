"""CompileCounter: record what torch.compile does while active, per region, per line and per iteration.

    with CompileCounter(root="src") as compiles, SyncCounter(root="src") as syncs:
        train()
    print(compiles.format())          # graph breaks, recompiles, frames, graphs, eager fallbacks, with call sites
    check_budget(compiles, budget)    # the same budgets, reports and per-iteration checks as syncs

Each event is a `tripwire.sync.state.SyncEvent` of a `compile:` kind (`tripwire.compile.trace`), so everything
that reads a `SyncCounter` reads this too: its `region` is the innermost `hot_path` running when dynamo compiled
(compiling happens on the first calls, inside the caller's region), its `site` the user line dynamo names (the break,
or the compiled function's `def`), its `via` the reason (which guard failed, what broke the graph) and its `callers`
the project lines that called into the compiled code. Counts are per compilation, not per call: a graph break costs
every call, but is reported once, where and when dynamo met it; in a steady-state iteration every count is 0.

The observer does not change what it observes: the counter only reads dynamo's structured trace (a logging handler; no
mode, no patch) and keeps tripwire's own frames out of dynamo's way (`tripwire.sync.dynamo`), so the same frames,
graphs, breaks and recompiles happen with and without it, a `SyncCounter` and instruments placed from outside included
(`tripwire.sync.hooks` says how the sync hooks stay out of what is compiled). One exception, tripwire's own and
said as such: a function compiled before a `SyncCounter` started compiles once more under it (its identity guard on
`torch.cat` meets the stand-in); that compilation is kept out of the events and named in `notes`. What it costs:
dynamo builds each structured record (graph printouts, guards) while a handler listens, so compiling takes longer;
compiled code runs at full speed. This module loads no torch.
"""

from __future__ import annotations

import contextlib
import logging
import os
from types import TracebackType

from tripwire.compile.trace import TRACE_LOGGER, CompileNote, TraceReader, id_guard
from tripwire.sync.dynamo import dynamo_skips_tripwire
from tripwire.sync.kinds import COMPILE_KINDS as KINDS
from tripwire.sync.log import EventLog
from tripwire.sync.state import _STATE, clear_caches, ensure_skipped, event_at, new_recording, set_root

__all__ = ["CompileCounter"]

# The trace logger's level before the first active counter set it to DEBUG, put back when the last one ends (in any
# order): a handler of the loop's own on that logger must not go on receiving dynamo's trace after a recording.
_LISTENING: list[CompileCounter] = []
_LEVEL_BEFORE = [logging.NOTSET]


def _tripwires_guard(reason: str) -> str:
    """What of tripwire's failed a recompile's guard (`torch.cat`: a stand-in stood where a function had been compiled
    with torch's own), else ""."""
    guard = id_guard(reason)
    if guard is None:
        return ""
    from tripwire.sync.explicit import stand_in_guard  # torch is loaded: dynamo is compiling

    return stand_in_guard(*guard)


class CompileCounter(EventLog):
    """Record every compilation event while active (`with CompileCounter() as compiles:`); counters may nest."""

    def __init__(self, *, root: str | os.PathLike[str] | None = None) -> None:
        super().__init__()
        self.root = os.path.join(os.path.abspath(root), "") if root is not None else None
        self._reader = TraceReader(self._deliver, self._is_user, _tripwires_guard)
        self._logger = logging.getLogger(TRACE_LOGGER)
        self._skipping = contextlib.ExitStack()

    @staticmethod
    def _is_user(file: str) -> bool:
        """Whether a file is the user's (neither torch's nor tripwire's): where a graph break is named."""
        return not file.startswith(_STATE.skip_prefixes)

    def _deliver(self, note: CompileNote) -> None:
        self.events.append(event_at(note.kind, note.file, note.line, note.function, note.reason))

    def __enter__(self) -> CompileCounter:
        if not _STATE.active:  # no counter of either kind runs: a recording starts
            set_root(self.root or os.path.join(os.getcwd(), ""))
            new_recording()
        ensure_skipped()
        self._skipping.enter_context(dynamo_skips_tripwire())
        if not _LISTENING:
            _LEVEL_BEFORE[0] = self._logger.level
        _LISTENING.append(self)
        self._logger.setLevel(logging.DEBUG)  # dynamo logs its trace at DEBUG (TORCH_TRACE sets the same)
        self._logger.addHandler(self._reader)
        _STATE.active += 1  # regions are tracked while any counter is active
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._logger.removeHandler(self._reader)
        self._reader.flush()
        _LISTENING[:] = [counter for counter in _LISTENING if counter is not self]
        if not _LISTENING:
            self._logger.setLevel(_LEVEL_BEFORE[0])
        _STATE.active -= 1
        if not _STATE.active:
            clear_caches()
        self._skipping.close()

    @property
    def notes(self) -> list[str]:
        """What was not counted, and why: trace records this tripwire could not read, and compilations tripwire
        caused (a function compiled before a counter, whose guard on `torch.cat` met tripwire's stand-in)."""
        notes = [f"unreadable compile trace record {text}" for text in self._reader.unreadable]
        for (function, file, line, caused), count in self._reader.tripwires_own.items():
            times = f" {count} times" if count > 1 else ""
            notes.append(
                f"tripwire made dynamo compile {function} ({os.path.basename(file)}:{line}) again{times}: it was "
                f"compiled with torch's own {caused} and a counter's stand-in stood there, so its guard failed; not "
                "counted as the loop's (warm it up under a SyncCounter to keep this compile out)"
            )
        return notes

    def format(self) -> str:
        """A per-region table of compilation events and their lines, for logs and failure messages."""
        if not self.events:
            return "\n".join(["no compilation events recorded", *(f"  {note}" for note in self.notes)])
        lines = [f"{self.total} compilation events recorded:"]
        for region, count in self.counts_by_region().items():
            lines.append(f"  region {region!r}: {count}")
            for record in sorted(self.site_records(region), key=lambda r: (r.file, r.line, KINDS.index(r.kind))):
                reason = f"  ({record.via})" if record.via else ""
                lines.append(f"    {record.site} in {record.function}  [{record.kind}×{record.count}]{reason}")
        lines.extend(f"  {note}" for note in self.notes)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"CompileCounter(total={self.total}, kinds={self.counts_by_kind()})"
