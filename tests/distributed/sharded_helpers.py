"""Shared by the sharded-run tests: the one-process reference run, and what is compared between runs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from guardrail_scenarios import TrajectoryProbe, single_threaded

from esper.nissa import InMemoryBackend, TelemetryHub
from esper.scripts.train import build_parser, config_from_args
from esper.simic.training.vectorized import run_training
from run_helpers import comparable
from tripwire.bitwise.trajectory import Trajectory, TrajectoryRecorder
from tripwire.common.context import capture_context

# Five envs shard unevenly over 2 ranks (3 + 2) and 4 ranks (2 + 1 + 1 + 1); two slots and two rounds give
# lifecycle events and a second round acting with the updated policy.
ARGV = (
    *("ppo", "--preset", "cifar_baseline", "--task", "cifar_baseline", "--envs", "5", "--slots", "r0c0", "r0c1"),
    *("--episode-length", "3", "--train-samples", "25", "--val-samples", "25", "--batch-size", "25", "--quiet"),
)


@dataclass
class OneProcessRun:
    """The reference: the same command line in this process."""

    trajectory: Trajectory
    events: list[dict[str, Any]]
    weights: dict[str, torch.Tensor]


def one_process_run(argv: tuple[str, ...]) -> OneProcessRun:
    args = build_parser().parse_args(list(argv))
    config = config_from_args(args)
    recorder = TrajectoryRecorder(context=capture_context(config.device))
    hub = TelemetryHub()
    memory = InMemoryBackend()
    hub.add_backend(memory)
    with single_threaded():
        result = run_training(config, controller=args.command, hub=hub, probe=TrajectoryProbe(recorder))
    hub.close()
    return OneProcessRun(recorder.trajectory, [event.to_json_dict() for event in memory.events], result.final_weights)


def without_rank(event: dict[str, Any], location: tuple[str, ...] = ("path", "previous_events")) -> dict[str, Any]:
    """An event as compared across runs: no id, timestamp, wall-clock field, rank, or file location."""
    kept = comparable({key: value for key, value in event.items() if key != "rank"})
    kept["data"] = {key: value for key, value in kept["data"].items() if key not in location}
    return kept


def checkpoint_state(path: Path) -> dict[str, Any]:
    """A checkpoint's saved state, less the events file it names (runs write to different folders)."""
    payload = torch.load(path, map_location="cpu", weights_only=True)
    state: dict[str, Any] = payload["state"]
    state["trainer"].pop("events", None)
    return {"rounds_completed": payload["rounds_completed"], **state}


def same_state(a: Any, b: Any, path: str = "") -> str | None:
    """None when two nested states are bitwise equal, else the path of the first difference."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        same = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
        return None if same else path
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{path}: keys {sorted(map(str, a.keys() ^ b.keys()))}"
        return next((d for key in a if (d := same_state(a[key], b[key], f"{path}/{key}")) is not None), None)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        return next(
            (d for i, (x, y) in enumerate(zip(a, b)) if (d := same_state(x, y, f"{path}/{i}")) is not None), None
        )
    return None if a == b else path
