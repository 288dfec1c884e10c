"""Numerical faults through the CLI: a NaN host loss is rolled back and training goes on; non-finite PPO updates
are skipped and reported, and the third consecutive one stops the run with exit code 1 and one line."""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Any

import pytest
from reliability_helpers import SMALL_POLICY, TINY, complete_lines, rounds_in

from esper.scripts import train
from esper.simic.agent.ppo import PPOAgent
from esper.tolaria.governor import DEATH_PENALTY

pytestmark = pytest.mark.slow  # two CLI runs of a few seconds each

EPISODE = 4  # epochs per episode here (overrides TINY's 3): two healthy epochs follow the poisoned one


def cli(tmp_path: Path, rounds: int, *extra: str) -> list[str]:
    return [
        "ppo",
        "--rounds",
        str(rounds),
        "--envs",
        "2",
        *TINY,
        "--episode-length",
        str(EPISODE),
        *SMALL_POLICY,
        "--telemetry-dir",
        str(tmp_path / "tel"),
        "--run-name",
        "run",
        "--save",
        str(tmp_path / "ck.pt"),
        "--quiet",
        *extra,
    ]


@pytest.fixture(scope="module")
def nan_loss_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, list[dict[str, Any]]]:
    root = tmp_path_factory.mktemp("nan_loss")
    config = root / "inject.json"
    config.write_text(json.dumps({"inject_nan_epoch": 2}))
    code = train.main(cli(root, 1, "--config-json", str(config)))
    return code, complete_lines(root / "tel" / "run" / "events.jsonl")


def test_a_nan_host_loss_does_not_fail_the_run(nan_loss_run: tuple[int, list[dict[str, Any]]]) -> None:
    code, events = nan_loss_run
    assert code == 0 and rounds_in(events) == 1


def test_a_nan_host_loss_triggers_one_governor_rollback_at_that_epoch(
    nan_loss_run: tuple[int, list[dict[str, Any]]],
) -> None:
    _, events = nan_loss_run
    [rollback] = [e for e in events if e["event_type"] == "GOVERNOR_ROLLBACK"]
    assert (rollback["env_id"], rollback["epoch"]) == (0, 2)
    [action] = [e for e in events if e["data"].get("kind") == "last_action" and (e["env_id"], e["epoch"]) == (0, 2)]
    assert action["data"]["reward"] == -DEATH_PENALTY


def test_training_continues_with_finite_losses_after_the_rollback(
    nan_loss_run: tuple[int, list[dict[str, Any]]],
) -> None:
    _, events = nan_loss_run
    losses = {
        e["epoch"]: e["data"]["val_loss"] for e in events if e["event_type"] == "EPOCH_COMPLETED" and e["env_id"] == 0
    }
    assert losses[2] == "nan"  # the poisoned epoch, written as a string by the wire format
    assert all(isinstance(losses[epoch], float) and math.isfinite(losses[epoch]) for epoch in range(3, EPISODE + 1))
    [update] = [e for e in events if e["event_type"] == "PPO_UPDATE_COMPLETED"]
    assert update["data"]["skipped"] is False


def poisoned_update(original: Any) -> Any:
    """PPOAgent.update over a rollout whose rewards are all NaN: its loss is non-finite, so it must be skipped."""

    def update(self: PPOAgent) -> Any:
        self.buffer.rewards.fill_(math.nan)
        return original(self)

    return update


@pytest.fixture(scope="module")
def nonfinite_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, list[dict[str, Any]]]:
    """Every rollout the PPO update sees has NaN rewards, so every update is non-finite."""
    root = tmp_path_factory.mktemp("nonfinite")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PPOAgent, "update", poisoned_update(PPOAgent.update))
        err = root / "stderr.txt"
        with err.open("w") as handle, contextlib.redirect_stderr(handle):
            code = train.main(cli(root, 5))
    return code, err.read_text(), complete_lines(root / "tel" / "run" / "events.jsonl")


def test_a_non_finite_update_is_skipped_reported_and_training_goes_on(
    nonfinite_run: tuple[int, str, list[dict[str, Any]]],
) -> None:
    _, _, events = nonfinite_run
    updates = [e for e in events if e["event_type"] == "PPO_UPDATE_COMPLETED"]
    assert [u["data"]["skipped"] for u in updates] == [True, True]
    assert [e["epoch"] for e in events if e["event_type"] == "NUMERICAL_INSTABILITY_DETECTED"] == [0, 1]
    assert rounds_in(events) == 2  # rounds 1 and 2 finished despite their skipped updates


def test_the_third_consecutive_non_finite_update_stops_with_exit_1_in_one_line(
    nonfinite_run: tuple[int, str, list[dict[str, Any]]],
) -> None:
    code, stderr, _ = nonfinite_run
    assert code == 1
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("train: error: 3 consecutive non-finite PPO updates"), stderr
