"""Progress display for long runs: a rich progress bar on a terminal, nothing otherwise.

The bar is drawn on stderr, the stream whose terminal check enables it, so `train ... > results.txt` keeps the
bar on the terminal and the redirected stdout free of control characters.
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn


class ProgressDisplay:
    """Counts env-epochs of a run; silent when disabled or when stderr is not a terminal."""

    def __init__(self, *, total: int, enabled: bool) -> None:
        self.progress: Progress | None = None
        if enabled and sys.stderr.isatty():
            self.progress = Progress(
                TextColumn("round {task.fields[round]}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.task = self.progress.add_task("train", total=total, round=0)
            self.progress.start()

    def advance(self, round_idx: int, epoch: int) -> None:
        if self.progress is not None:
            self.progress.update(self.task, advance=1, round=round_idx)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
