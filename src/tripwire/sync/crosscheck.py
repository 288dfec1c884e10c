"""The device cross-check: torch's own sync detector beside tripwire's count, compared site by site.

With `SyncCounter(cuda_cross_check=True)` on CUDA, torch's sync debug mode (`torch.cuda.set_sync_debug_mode("warn")`)
warns at each operation it sees synchronize. torch names a warning at the innermost Python frame, which under a
counter is tripwire's stand-in; `WarningSites` names each one as tripwire names its own events, at the first frame
outside torch and tripwire, while it is raised (`file:line`), so the two can be compared line by line:

- **missed**: a line where torch warned more often than tripwire counted. It must be empty: a sync torch sees and
  tripwire does not is a hole in the gate.
- **unflagged**: what tripwire counts that torch does not flag, per kind, with the reason (`REASONS`): a read of a
  tensor in host memory that tripwire does not know is there (a read of one built there while it watched is not
  counted, on a CPU run and on a GPU alike: `tripwire.sync.copies.host_born`), an upload from pageable memory, an
  explicit wait.
"""

from __future__ import annotations

import re
import sys
import warnings
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import FrameType, TracebackType
from typing import Any, TextIO

from tripwire.common.quiet import take_out
from tripwire.sync import kinds
from tripwire.sync import state as sync

__all__ = ["READS", "REASONS", "CrossCheck", "WarningSites", "compare"]

SYNC_WARNING = "synchronizing CUDA operation"  # what torch's sync debug mode says
_READ = (
    "a read of a tensor in host memory that tripwire does not know is there (an op's result, a tensor built before "
    "the recording), or the second read of one copy (`.cpu().tolist()`): no wait on the device; tripwire counts "
    "such a read on a CPU run and on a GPU alike, so one budget serves both"
)
_UPLOAD = "an upload from pageable host memory: the copy waits for the stream, which torch's detector does not flag"
_WAIT = "an explicit wait: torch's detector flags the syncs it makes itself, not a wait the code asks for"
# The reads: torch's detector flags each one that waits on the device, so one it leaves unflagged read host memory
READS = frozenset({kinds.ITEM, kinds.CPU, kinds.TOLIST, kinds.NUMPY, kinds.BOOL, kinds.FLOAT, kinds.INT, kinds.INDEX})
READS |= {kinds.COMPLEX, kinds.FORMAT, kinds.CONTAINS}
REASONS: dict[str, str] = {
    **dict.fromkeys(READS, _READ),
    **{name: _UPLOAD for name in (kinds.TO_DEVICE, kinds.COPY_TO_DEVICE, kinds.TENSOR_TO_DEVICE)},
    **{name: _WAIT for name in (kinds.CUDA_SYNCHRONIZE, kinds.ACCELERATOR_SYNCHRONIZE, kinds.STREAM_SYNCHRONIZE)},
    kinds.EVENT_SYNCHRONIZE: _WAIT,
    **{name: _WAIT for name in (kinds.CUDA_EMPTY_CACHE, kinds.ACCELERATOR_EMPTY_CACHE)},
    kinds.TIMER_SYNC: _WAIT,
    kinds.TO_CPU_NONBLOCKING: "a copy queued without a wait",
    kinds.COPY_TO_CPU_NONBLOCKING: "a copy queued without a wait",
}
_FAMILIES = {kinds.COLLECTIVE.prefix: "a collective waits for the other ranks, not for this device's stream"}


def reason(kind: str) -> str:
    """Why torch's detector may not flag an event of this kind ("" when it should)."""
    if kind in REASONS:
        return REASONS[kind]
    return next((text for prefix, text in _FAMILIES.items() if kind.startswith(prefix)), "")


class WarningSites:
    """While active, each of torch's sync warnings is counted at the line that made it (`sites`), and any other
    warning is filtered and shown as it would have been. `debug_mode` turns torch's sync debug mode on (CUDA only).

    One filter is added, `always` for torch's sync warning alone, so a line that syncs at every step is counted at
    every step; the loop's own filters (`-W error`, an `ignore` it set, Python's once per line) still decide every
    other warning, and a filter the loop adds while this is active stays after it. Adding a filter has one effect
    Python gives every filter change: a warning shown once per line before is shown once more."""

    def __init__(self, *, debug_mode: bool = True) -> None:
        self.debug_mode = debug_mode
        self.sites: Counter[str] = Counter()
        self._filter: Any = None
        self._shown: Any = None
        self._previous_mode: int | None = None

    @property
    def total(self) -> int:
        return sum(self.sites.values())

    def __enter__(self) -> WarningSites:
        warnings.filterwarnings("always", message=f".*{re.escape(SYNC_WARNING)}", category=UserWarning)
        self._filter = warnings.filters[0]
        self._shown = warnings.showwarning
        warnings.showwarning = self._on_warning
        if self.debug_mode:
            import torch

            self._previous_mode = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self._previous_mode is not None:
                import torch

                torch.cuda.set_sync_debug_mode(self._previous_mode)
        finally:
            self._put_back()

    def _put_back(self) -> None:
        """Take out this filter and this `showwarning`, and nothing the loop set meanwhile."""
        entry, self._filter = self._filter, None
        take_out(entry)  # an `always` for one message: no once-per-line record depended on it
        if warnings.showwarning == self._on_warning:  # else the loop's own, which may hand on to this one
            warnings.showwarning = self._shown

    def _on_warning(
        self,
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if SYNC_WARNING in str(message):
            self.sites[_site_now()] += 1
        elif self._shown is not None:
            self._shown(message, category, filename, lineno, file, line)


def _site_now() -> str:
    """`relpath:line` of the first frame outside torch and tripwire running now, past the warnings module's own."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename in (warnings.__file__, "<frozen warnings>"):
        frame = frame.f_back
    outside = sync._outside(frame)[0] if frame is not None else None
    if outside is None:
        return "<unknown>"
    return f"{sync.relative_path(outside.f_code.co_filename)}:{outside.f_lineno}"


@dataclass
class CrossCheck:
    """tripwire's events against torch's warnings, line by line."""

    counted: int
    warned: int
    missed: dict[str, tuple[int, int]] = field(default_factory=dict)  # line -> (tripwire, torch)
    unflagged: dict[str, int] = field(default_factory=dict)  # kind -> events torch did not flag

    @property
    def ok(self) -> bool:
        return not self.missed

    def format(self) -> str:
        lines = [f"cross-check: tripwire counted {self.counted}, torch warned {self.warned}"]
        if self.missed:
            lines.append(f"  MISSED by tripwire ({sum(w - t for t, w in self.missed.values())}):")
            lines += [f"    {site}: tripwire {t}, torch {w}" for site, (t, w) in self.missed.items()]
        else:
            lines.append("  missed by tripwire: none")
        for kind, count in sorted(self.unflagged.items(), key=lambda item: -item[1]):
            lines.append(f"  counted, not flagged by torch: {kind} x{count} ({reason(kind) or 'no known reason'})")
        return "\n".join(lines)


def compare(events: Iterable[Any], warned: Counter[str]) -> CrossCheck:
    """`events` (tripwire's `SyncEvent`s) against `warned` (torch's warnings by line): what torch flagged that
    tripwire missed, and what tripwire counted that torch did not flag, by kind."""
    by_line: Counter[str] = Counter()
    kinds_at: dict[str, Counter[str]] = {}
    total = 0
    for event in events:
        if kinds.COMPILE.holds(event.kind):
            continue
        total += 1
        by_line[event.site] += 1
        kinds_at.setdefault(event.site, Counter())[event.kind] += 1
    check = CrossCheck(total, sum(warned.values()))
    for site in sorted(set(by_line) | set(warned)):
        counted, flagged = by_line[site], warned[site]
        if flagged > counted:
            check.missed[site] = (counted, flagged)
        elif counted > flagged:
            excess = counted - flagged
            for kind, count in sorted(kinds_at[site].items(), key=lambda item: (reason(item[0]) == "", item[0])):
                taken = min(count, excess)
                check.unflagged[kind] = check.unflagged.get(kind, 0) + taken
                excess -= taken
                if not excess:
                    break
    return check
