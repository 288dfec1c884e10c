"""Shared by the determinism, resume, env-worker and checkpoint tests: record a run's events, compare runs, craft a
checkpoint field."""

from __future__ import annotations

import copy
from typing import Any

import torch

from esper.leyline import WALL_CLOCK_DATA_KEYS
from esper.nissa import InMemoryBackend, TelemetryHub
from esper.simic.training.config import TrainingConfig
from esper.simic.training.trainer import TrainingResult
from esper.simic.training.vectorized import run_training

# A PPO run of two rounds, two envs and three epochs on a tiny task: seconds, yet every part of the loop runs.
TINY_PPO: dict[str, Any] = {
    "n_episodes": 2,
    "n_envs": 2,
    "max_epochs": 3,
    "task": "cifar_baseline",
    "train_samples": 32,
    "val_samples": 16,
    "batch_size": 16,
    "hidden_dim": 32,
    "lstm_hidden_dim": 32,
    "seed": 5,
}
# Three envs, two slots and six epochs: long enough for the heuristic controller to germinate, blend and fossilize
SEEDED_RUN: dict[str, Any] = {
    **TINY_PPO,
    "n_envs": 3,
    "max_epochs": 6,
    "slots": ["r0c0", "r0c1"],
    "train_samples": 48,
    "val_samples": 24,
    "batch_size": 8,
}


def recorded_run(config: dict[str, Any], *, controller: str = "ppo") -> tuple[TrainingResult, list[dict[str, Any]]]:
    """Run `config` with an in-memory telemetry backend: the result and every event's wire form, in order."""
    memory = InMemoryBackend()
    hub = TelemetryHub()
    hub.add_backend(memory)
    result = run_training(TrainingConfig.from_dict(config), controller=controller, hub=hub)
    hub.close()
    return result, [event.to_json_dict() for event in memory.events]


def comparable(event: dict[str, Any]) -> dict[str, Any]:
    """An event's wire form without its id, timestamp and wall-clock measurements."""
    kept = {key: value for key, value in event.items() if key not in ("event_id", "timestamp")}
    kept["data"] = {key: value for key, value in event["data"].items() if key not in WALL_CLOCK_DATA_KEYS}
    return kept


def first_weight_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> str | None:
    """None when both hold the same tensor names with bitwise-equal values, else what differs first."""
    if a.keys() != b.keys():
        return f"different tensors: {sorted(a.keys() ^ b.keys())[:5]}"
    for name in a:
        if not torch.equal(a[name], b[name]):
            return f"tensor {name} differs"
    return None


def first_event_difference(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> str | None:
    """None when both event lists are equal up to `comparable`, else the first difference."""
    if len(a) != len(b):
        return f"{len(a)} events vs {len(b)}"
    for index, (left, right) in enumerate(zip(a, b)):
        if comparable(left) != comparable(right):
            return f"event {index} ({left['event_type']}) differs: {comparable(left)} vs {comparable(right)}"
    return None


def replaced(value: Any, keys: tuple[Any, ...], new: Any) -> Any:
    """A copy of `value` (nested dicts, lists, tuples) with the item at `keys` replaced by `new`; only the containers
    on the way are copied, so the original is left as it was."""
    if not keys:
        return new
    copied = list(value) if isinstance(value, tuple) else copy.copy(value)
    copied[keys[0]] = replaced(value[keys[0]], keys[1:], new)
    return tuple(copied) if isinstance(value, tuple) else copied
