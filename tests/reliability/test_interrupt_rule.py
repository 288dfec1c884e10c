"""The stop rule in-process: a stop request ends the run after the current epoch and keeps the last completed
round; the CLI's one-line message says how to continue (or that there is nothing to resume)."""

from __future__ import annotations

from pathlib import Path

import pytest

from esper.leyline import TelemetryEventType as T
from esper.leyline import TelemetryLevel
from esper.nissa import InMemoryBackend, TelemetryHub
from esper.scripts.train import interrupted_message
from esper.simic.training.checkpoint import CheckpointLayout, load_checkpoint
from esper.simic.training.checkpoint_schema import Plain
from esper.simic.training.config import TrainingConfig
from esper.simic.training.vectorized import run_training

RUN = {"n_envs": 2, "max_epochs": 3, "train_samples": 50, "val_samples": 25, "batch_size": 25}
SMALL = {"hidden_dim": 16, "lstm_hidden_dim": 16}
LAYOUT = CheckpointLayout(n_envs=2, slot_ids=("r0c1",), task="cifar_baseline", controller="ppo")


class StopAfter:
    """A stop flag that turns on after `polls` polls.

    The trainer polls after every epoch but a round's last, and before every round but the first.
    """

    def __init__(self, polls: int) -> None:
        self.left = polls

    def __call__(self) -> bool:
        self.left -= 1
        return self.left < 0


def run_until_stopped(tmp_path: Path, polls: int) -> tuple[TrainingConfig, InMemoryBackend, tuple[int, int] | None]:
    config = TrainingConfig.from_dict({**RUN, **SMALL, "n_episodes": 3, "save_path": str(tmp_path / "ck.pt")})
    hub = TelemetryHub(TelemetryLevel.NORMAL)
    memory = InMemoryBackend()
    hub.add_backend(memory)
    result = run_training(config, hub=hub, stop=StopAfter(polls))
    hub.close()
    return config, memory, result.interrupted_at


def test_a_stop_in_the_first_round_writes_no_checkpoint(tmp_path: Path) -> None:
    config, memory, interrupted_at = run_until_stopped(tmp_path, polls=0)
    assert interrupted_at == (0, 1)
    assert not (tmp_path / "ck.pt").exists()
    assert [e.epoch for e in memory.of_type(T.EPOCH_COMPLETED)] == [1, 1]  # epoch 1 finished for both envs
    assert memory.of_type(T.PPO_UPDATE_COMPLETED) == []  # the unfinished round was discarded
    message = interrupted_message(config, interrupted_at, rounds_run=0)
    assert message.endswith("no round completed, so no checkpoint was written: start again")


def test_a_stop_in_a_later_round_keeps_the_completed_rounds(tmp_path: Path) -> None:
    # polls: round 0 after epochs 1 and 2, round 1 before it starts, then after its epoch 1 (the fourth)
    config, memory, interrupted_at = run_until_stopped(tmp_path, polls=3)
    assert interrupted_at == (1, 1)
    assert load_checkpoint(tmp_path / "ck.pt", layout=LAYOUT, state=Plain())[0] == 1
    assert len(memory.of_type(T.PPO_UPDATE_COMPLETED)) == 1
    message = interrupted_message(config, interrupted_at, rounds_run=1)
    assert message == (
        f"train: interrupted in round 2 after epoch 1 of 3; checkpoint {tmp_path / 'ck.pt'} holds 1 round(s): "
        f"continue with --resume {tmp_path / 'ck.pt'}"
    )


def test_a_stop_asked_during_a_rounds_last_epoch_ends_the_run_at_the_round_boundary(tmp_path: Path) -> None:
    config, memory, interrupted_at = run_until_stopped(tmp_path, polls=2)
    assert interrupted_at == (1, 0)
    assert load_checkpoint(tmp_path / "ck.pt", layout=LAYOUT, state=Plain())[0] == 1
    assert [e.epoch for e in memory.of_type(T.EPOCH_COMPLETED)] == [1, 1, 2, 2, 3, 3]  # round 1 never began
    assert interrupted_message(config, interrupted_at, rounds_run=1).startswith(
        "train: interrupted at the start of round 2; checkpoint "
    )


@pytest.mark.parametrize(
    ("save", "resume", "tail"),
    [
        (None, None, "no --save was given, so there is nothing to resume"),
        (None, "old.pt", "no round completed since resuming: continue with --resume old.pt"),
    ],
)
def test_the_message_says_what_can_be_resumed(save: str | None, resume: str | None, tail: str) -> None:
    config = TrainingConfig.from_dict({**RUN, "save_path": save, "resume_path": resume})
    assert interrupted_message(config, (0, 2), rounds_run=0).endswith(tail)
