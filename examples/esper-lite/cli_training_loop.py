"""A short esper-lite training loop through its own CLI: one round of one env for 5 epochs, on mock data, on CPU.

This is the refactor plans' validation command (`ppo --preset cifar_baseline --task cifar_baseline --rounds 1
--envs 1 --episode-length 5`) with the CPU settings the original needs (`--device cpu --num-workers 0
--compile-mode off --no-tui`) and its telemetry written to a folder. Two things are added from outside, never
written into the tree: the task's CIFAR-10 loader is asked for its own mock data (random images, so no download),
and every random generator is seeded before the CLI starts (as shipped, the original seeds torch only after the
policy and the mock data are drawn, so no two runs would agree). tripwire counts the host syncs of every epoch and
of the PPO update, digests the policy network after each update and reads the run's events.
"""

from __future__ import annotations

import random
import sys
from typing import Any

from tripwire.scenario import Adapter, Checkpoint, Iteration, Region, Scenario

ARGV = [
    "ppo", "--preset", "cifar_baseline", "--task", "cifar_baseline", "--rounds", "1", "--envs", "1",
    "--episode-length", "5", "--device", "cpu", "--num-workers", "0", "--compile-mode", "off", "--no-tui",
    "--telemetry-dir", "telemetry", "--seed", "42",
]  # fmt: skip


def train_cli() -> None:
    """Seed everything, then run `python -m esper.scripts.train ARGV` in this process."""
    import numpy
    import torch

    random.seed(0)
    numpy.random.seed(0)
    torch.manual_seed(0)
    from esper.scripts import train

    sys.argv = ["esper.scripts.train", *ARGV]
    train.main()


_HOOK: dict[str, Any] = {}


def _mock_datasets(*args: Any, **kwargs: Any) -> Any:
    return _HOOK["original"](*args, **{**kwargs, "mock": True})


def _mock(original: Any) -> Any:
    """The task's dataset hook, always on the original's own mock data (the task passes `mock=False`)."""
    _HOOK["original"] = original
    return _mock_datasets


# Fields of the original's events that differ between two runs of one commit: wall-clock durations, CPU ratios and
# rates (found by running 2016337e three times and comparing every field; the patterns also cover their like in
# other commits).
WALL_CLOCK = [
    "timestamp", "event_id", "data.*_ms", "data.*python_cpu_ratio", "data.*wait_ratio", "data.*_sec",
    "data.*seconds", "data.*per_sec*", "data.*throughput*", "data.*memory*", "data.*_mb", "data.*_gb",
]  # fmt: skip

scenario = Scenario(
    name="esper-lite-cli-loop",
    call=train_cli,
    paths=["src", "."],
    regions=[
        Region("esper.simic.agent:PPOAgent.update", "ppo_update"),
    ],
    iteration=Iteration("esper.simic.agent:PPOAgent.update", at="end"),
    checkpoints=[Checkpoint("esper.simic.agent:PPOAgent.update", capture=("return", "self.policy.network"))],
    events="telemetry/**/*.jsonl",
    exclude=WALL_CLOCK,
    adapters=[Adapter(wraps={"esper.runtime.tasks:get_cifar10_datasets": _mock}, note="mock CIFAR-10, no download")],
)
