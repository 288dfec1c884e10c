"""The public entry point: `run_training(config)` (and `train_ppo_vectorized(**kwargs)`) builds a run with
`wiring`, runs the trainer, and closes what it opened."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from esper.leyline.seeding import derive_seed
from esper.messages import first_line
from esper.nissa.backends import TelemetryWriteError
from esper.nissa.hub import TelemetryHub
from esper.simic.training import emitters, wiring
from esper.simic.training.config import TrainingConfig
from esper.simic.training.outputs import claim_outputs
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
    with claim_outputs(config):  # output paths checked and the checkpoint path locked before any work
        return _run(config, controller, hub, progress, probe, stop)


def _run(
    config: TrainingConfig,
    controller: str,
    hub: TelemetryHub | None,
    progress: bool,
    probe: TrainingProbe | None,
    stop: Callable[[], bool] | None,
) -> TrainingResult:
    torch.manual_seed(derive_seed(config.seed, "global"))
    setup = wiring.prepare_run(config, controller)
    telemetry, own_hub, events_path = wiring.open_hub(config, hub)
    engine = wiring.build_engine(setup)
    display = ProgressDisplay(
        rounds=config.n_episodes,
        start_round=setup.start_round,
        env_epochs=(config.n_episodes - setup.start_round) * config.max_epochs * config.n_envs,
        enabled=progress,
    )
    try:
        wiring.announce(telemetry, setup)
        parts = wiring.trainer_parts(
            setup, telemetry, engine, events_path=events_path, on_epoch=display.advance, probe=probe, stop=stop
        )
        trainer = VectorizedPPOTrainer(parts)
        try:
            result = trainer.run()
        except BaseException as exc:
            _report_failure(telemetry, trainer.result, exc)
            raise
        _report_end(telemetry, result)
        result.final_state = {"config": config.to_dict()}
        if events_path is not None:
            result.outputs["events"] = str(events_path)
        if config.save_path is not None and result.rounds:
            result.outputs["checkpoint"] = config.save_path
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


def _report_end(hub: TelemetryHub, result: TrainingResult) -> None:
    """TRAINING_ENDED for a run that returned: completed, or interrupted with the round it discarded."""
    rounds = result.start_round + len(result.rounds)
    if result.interrupted_at is None:
        emitters.emit_training_ended(hub, "completed", rounds)
        return
    round_idx, epoch = result.interrupted_at
    emitters.emit_training_ended(hub, "interrupted", rounds, discarded_round=round_idx, stopped_after_epoch=epoch)


def _report_failure(hub: TelemetryHub, partial: TrainingResult, exc: BaseException) -> None:
    """TRAINING_ENDED for a run that raised (best effort: when telemetry itself failed, nothing more is written)."""
    if isinstance(exc, TelemetryWriteError):
        return
    rounds = partial.start_round + len(partial.rounds)
    if isinstance(exc, KeyboardInterrupt):
        outcome, cause = "interrupted", "aborted by a second stop signal"
    else:
        outcome, cause = "failed", f"{type(exc).__name__}: {first_line(exc, fallback='')}"
    with contextlib.suppress(Exception):
        emitters.emit_training_ended(hub, outcome, rounds, discarded_round=rounds, cause=cause)
