"""Progress display for runs: a live rich bar on a terminal, one plain line per round otherwise.

Counts env-epochs (one env's one epoch), shows the round (counted from 1, as every message does), the mean
episode reward so far, the mean validation accuracy of the last epoch, and the time left. Everything goes to
stderr, so `train ... > results.txt` keeps stdout free of control characters. `--quiet` turns it off.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn


@dataclass(frozen=True)
class EpochProgress:
    """What the trainer reports after each epoch (its `on_epoch` hook)."""

    round_idx: int  # 0-based, as in events
    epoch: int  # 1-based within the episode
    max_epochs: int
    n_envs: int
    mean_accuracy: float  # percent, over envs, of this epoch's validation
    mean_reward: float  # over envs, of the episode's reward so far


class ProgressDisplay:
    """A rich bar when stderr is a terminal; one plain line per finished round when it is not."""

    def __init__(self, *, rounds: int, start_round: int, env_epochs: int, enabled: bool) -> None:
        self.rounds = rounds  # the run's last round, counted from 1
        self.total = env_epochs  # env-epochs this process will run
        self.enabled = enabled
        self.done = 0
        self.started = time.monotonic()
        self.progress: Progress | None = None
        if enabled and sys.stderr.isatty():
            self.progress = Progress(
                TextColumn("round {task.fields[round]}/{task.fields[rounds]}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("env-epochs  reward {task.fields[reward]}  accuracy {task.fields[accuracy]}"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.task = self.progress.add_task(
                "train", total=env_epochs, round=start_round + 1, rounds=rounds, reward="-", accuracy="-"
            )
            self.progress.start()

    def advance(self, step: EpochProgress) -> None:
        self.done += step.n_envs
        if self.progress is not None:
            self.progress.update(
                self.task,
                advance=step.n_envs,
                round=step.round_idx + 1,
                reward=f"{step.mean_reward:.2f}",
                accuracy=f"{step.mean_accuracy:.1f}%",
            )
        elif self.enabled and step.epoch == step.max_epochs:
            sys.stderr.write(self.round_line(step) + "\n")
            sys.stderr.flush()

    def round_line(self, step: EpochProgress) -> str:
        elapsed = time.monotonic() - self.started
        left = elapsed * (self.total - self.done) / self.done if self.done else 0.0
        return (
            f"round {step.round_idx + 1}/{self.rounds} done: {self.done}/{self.total} env-epochs, "
            f"mean episode reward {step.mean_reward:.2f}, accuracy {step.mean_accuracy:.1f}%, "
            f"about {_duration(left)} left"
        )

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()  # also restores the cursor rich hid
            self.progress = None


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
