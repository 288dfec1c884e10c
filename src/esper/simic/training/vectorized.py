"""The public entry point: `run_training(config)` (and `train_ppo_vectorized(**kwargs)`) builds a run with
`wiring`, runs the trainer, and closes what it opened."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from esper.leyline.seeding import derive_seed
from esper.nissa.hub import TelemetryHub
from esper.simic.training import wiring
from esper.simic.training.config import TrainingConfig
from esper.simic.training.policy_client import PPOClient
from esper.simic.training.progress import ProgressDisplay
from esper.simic.training.trainer import TrainingProbe, TrainingResult, VectorizedPPOTrainer, weights_copy


def train_ppo_vectorized(
    *,
    n_episodes: int,
    n_envs: int,
    max_epochs: int,
    slots: list[str],
    controller: str = "ppo",
    hub: TelemetryHub | None = None,
    probe: TrainingProbe | None = None,
    **overrides: Any,
) -> TrainingResult:
    """Train a PPO (or heuristic) controller over `n_envs` parallel envs for `n_episodes` rounds."""
    config = TrainingConfig.from_dict(
        {
            "n_episodes": n_episodes,
            "n_envs": n_envs,
            "max_epochs": max_epochs,
            "slots": list(slots),
            **overrides,
        }
    )
    return run_training(config, controller=controller, hub=hub, probe=probe)


def run_training(
    config: TrainingConfig,
    *,
    controller: str = "ppo",
    hub: TelemetryHub | None = None,
    progress: bool = False,
    probe: TrainingProbe | None = None,
    stop: Callable[[], bool] | None = None,
) -> TrainingResult:
    """Build every part of a run from its config, run the trainer, close what it opened.

    `stop` is polled after each epoch; when it returns True the run ends there (the round in progress is
    discarded, the checkpoint keeps the last completed round) and `result.interrupted_at` says where.
    """
    torch.manual_seed(derive_seed(config.seed, "global"))
    setup = wiring.prepare_run(config, controller)
    telemetry, own_hub = wiring.open_hub(config, hub)
    engine = wiring.build_engine(setup)
    display = ProgressDisplay(total=(config.n_episodes - setup.start_round) * config.max_epochs, enabled=progress)
    try:
        wiring.announce(telemetry, setup)
        parts = wiring.trainer_parts(setup, telemetry, engine, on_epoch=display.advance, probe=probe, stop=stop)
        result = VectorizedPPOTrainer(parts).run()
        result.final_state = {"config": dataclasses.asdict(config)}
        if isinstance(setup.client, PPOClient):
            result.final_weights.update(weights_copy("policy.", setup.client.agent.policy))
        return result
    finally:
        engine.close()
        display.close()
        if own_hub:
            telemetry.close()
        else:
            telemetry.flush()
