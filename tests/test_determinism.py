"""Same seed, same config: identical events, actions, rewards and bitwise-identical final weights.

Checked twice in one process and across two fresh interpreter processes. Only `event_id`, `timestamp` and the
wall-clock fields of `WALL_CLOCK_DATA_KEYS` may differ.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from esper.leyline import AnalyticsKind
from run_helpers import TINY_PPO as SHARED_TINY_PPO
from run_helpers import comparable, first_event_difference, first_weight_difference, recorded_run

TINY_PPO: dict[str, Any] = {**SHARED_TINY_PPO, "seed": 11}

# Runs TINY_PPO (passed as JSON) in a fresh interpreter and saves the comparable outputs with torch.save.
CHILD_SCRIPT = """
import json, sys, torch
from esper.nissa import InMemoryBackend, TelemetryHub
from esper.simic.training.config import TrainingConfig
from esper.simic.training.vectorized import run_training
memory = InMemoryBackend()
hub = TelemetryHub()
hub.add_backend(memory)
result = run_training(TrainingConfig.from_dict(json.loads(sys.argv[1])), hub=hub)
hub.close()
torch.save({"events": [e.to_json_dict() for e in memory.events], "weights": result.final_weights}, sys.argv[2])
"""


def run_in_process(config: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, torch.Tensor]]:
    result, events = recorded_run(config)
    return events, result.final_weights


def run_in_subprocess(config: dict[str, Any], out: Path) -> tuple[list[dict[str, Any]], dict[str, torch.Tensor]]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD_SCRIPT, json.dumps(config), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, f"child run failed:\n{done.stderr[-2000:]}"
    saved = torch.load(out, weights_only=True)
    return saved["events"], saved["weights"]


def actions_and_rewards(events: list[dict[str, Any]]) -> list[tuple[int, int | None, list[int], float]]:
    """(env, epoch, head indices, reward) of every executed action, from the last_action snapshots."""
    return [
        (e["env_id"], e["epoch"], e["data"]["heads"], e["data"]["reward"])
        for e in events
        if e["data"].get("kind") == AnalyticsKind.LAST_ACTION.value
    ]


def test_two_runs_in_one_process_give_identical_events_actions_rewards_and_weights() -> None:
    events_a, weights_a = run_in_process(TINY_PPO)
    events_b, weights_b = run_in_process(TINY_PPO)

    assert first_event_difference(events_a, events_b) is None
    assert actions_and_rewards(events_a) == actions_and_rewards(events_b)
    assert len(actions_and_rewards(events_a)) == TINY_PPO["n_envs"] * TINY_PPO["n_episodes"] * TINY_PPO["max_epochs"]
    assert any(name.startswith("policy.") for name in weights_a)
    assert any(name.startswith("env1.") for name in weights_a)
    assert first_weight_difference(weights_a, weights_b) is None


def test_runs_in_two_processes_match_each_other_and_the_in_process_run(tmp_path: Path) -> None:
    events_a, weights_a = run_in_subprocess(TINY_PPO, tmp_path / "a.pt")
    events_b, weights_b = run_in_subprocess(TINY_PPO, tmp_path / "b.pt")
    events_here, weights_here = run_in_process(TINY_PPO)

    assert first_event_difference(events_a, events_b) is None
    assert first_weight_difference(weights_a, weights_b) is None
    assert first_event_difference(events_a, events_here) is None
    assert first_weight_difference(weights_a, weights_here) is None


def test_a_different_seed_changes_the_final_policy() -> None:
    _, weights_a = run_in_process(TINY_PPO)
    _, weights_b = run_in_process({**TINY_PPO, "seed": TINY_PPO["seed"] + 1})

    assert first_weight_difference(weights_a, weights_b) is not None


def test_wall_clock_keys_are_the_only_payload_fields_dropped() -> None:
    wire = {
        "event_id": "x",
        "timestamp": "t",
        "event_type": "PPO_UPDATE_COMPLETED",
        "data": {"update_time_ms": 3.0, "policy_loss": 1.0},
    }

    assert comparable(wire) == {"event_type": "PPO_UPDATE_COMPLETED", "data": {"policy_loss": 1.0}}
