"""The public entry point: `run_training(config)` (and `train_ppo_vectorized(**kwargs)`) builds a run with
`wiring`, runs the trainer, and closes what it opened."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from esper.leyline.seeding import derive_seed
from esper.messages import escape, first_line
from esper.nissa.backends import TelemetryWriteError
from esper.nissa.hub import TelemetryHub
from esper.simic.training import emitters, wiring
from esper.simic.training.config import TrainingConfig
from esper.simic.training.outputs import claim_outputs
from esper.simic.training.policy_client import PPOClient
from esper.simic.training.progress import ProgressDisplay
from esper.simic.training.run_telemetry import open_run_telemetry
from esper.simic.training.sharding import END_ROUND, EnvShard, LocalShard, Phase
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
    shard: EnvShard | None = None,
    on_ready: Callable[[], None] | None = None,
) -> TrainingResult:
    """Build every part of a run from its config, run the trainer, close what it opened.

    `stop` is polled after each epoch; when it returns True the run ends there (the round in progress is
    discarded, the checkpoint keeps the last completed round) and `result.interrupted_at` says where.
    `shard` is this process's rank of a run sharded over torch.distributed (`launch.open_shard`); None runs
    every env here. `on_ready` is called once the run is set up (data loaded, checkpoint read, models built) and
    before its telemetry opens: the command line stops at once on a signal before it, after an epoch after it.
    """
    shard = shard or LocalShard(config.n_envs)
    # output paths checked and the checkpoint path locked (by the rank that writes it) before any work
    with claim_outputs(config, lock_checkpoint=shard.is_leader):
        return _run(config, controller, hub, progress, probe, stop, shard, on_ready)


def _run(
    config: TrainingConfig,
    controller: str,
    hub: TelemetryHub | None,
    progress: bool,
    probe: TrainingProbe | None,
    stop: Callable[[], bool] | None,
    shard: EnvShard,
    on_ready: Callable[[], None] | None = None,
) -> TrainingResult:
    torch.manual_seed(derive_seed(config.seed, "global"))
    setup = wiring.prepare_run(config, controller, shard)
    if on_ready is not None:
        on_ready()
    if shard.is_leader:
        for note in setup.notes:
            print(f"train: note: {escape(note)}", file=sys.stderr)
    telemetry = open_run_telemetry(config, hub, shard)
    engine = wiring.build_engine(setup)
    display = ProgressDisplay(
        rounds=config.n_episodes,
        start_round=setup.start_round,
        env_epochs=(config.n_episodes - setup.start_round) * config.max_epochs * config.n_envs,
        enabled=progress and shard.is_leader,
    )
    failed = True
    trainer: VectorizedPPOTrainer | None = None
    try:
        try:  # from here on, any failure (user code included) ends the events with a failed TRAINING_ENDED
            wiring.announce(telemetry.hub, setup)
            parts = wiring.trainer_parts(
                setup,
                telemetry.hub,
                engine,
                events_path=telemetry.events_path,
                on_epoch=display.advance,
                probe=probe,
                stop=stop,
                shard=shard,
            )
            trainer = VectorizedPPOTrainer(parts)
            result = trainer.run()
        except BaseException as exc:
            partial = trainer.result if trainer is not None else TrainingResult(start_round=setup.start_round)
            _report_failure(telemetry.hub, partial, exc, shard)
            raise
        _report_end(telemetry.hub, result, shard)
        failed = False
    finally:
        engine.close()
        display.close()
        telemetry.close(failed=failed)
    return _finish(result, config, setup, telemetry.events_path)


def _finish(
    result: TrainingResult, config: TrainingConfig, setup: wiring.RunSetup, events: Path | None
) -> TrainingResult:
    """The result's config, the files the run wrote and the policy's final weights."""
    result.final_state = {"config": config.to_dict()}
    if events is not None:
        result.outputs["events"] = str(events)
    if config.save_path is not None and result.rounds:
        result.outputs["checkpoint"] = config.save_path
    if isinstance(setup.client, PPOClient):
        result.final_weights.update(weights_copy("policy.", setup.client.agent.policy))
    return result


def _report_end(hub: TelemetryHub, result: TrainingResult, shard: EnvShard) -> None:
    """TRAINING_ENDED for a run that returned: completed, or interrupted with the round it discarded."""
    rounds = result.start_round + len(result.rounds)
    shard.mark(END_ROUND, 0, Phase.END)
    if result.interrupted_at is None:
        emitters.emit_training_ended(hub, "completed", rounds)
        return
    round_idx, epoch = result.interrupted_at
    emitters.emit_training_ended(hub, "interrupted", rounds, discarded_round=round_idx, stopped_after_epoch=epoch)


def _report_failure(hub: TelemetryHub, partial: TrainingResult, exc: BaseException, shard: EnvShard) -> None:
    """TRAINING_ENDED for a run that raised (best effort: when telemetry itself failed, nothing more is written).

    In a sharded run it names the rank that failed: this one (which tells the others through the store), or the
    peer whose loss made this rank's collective fail."""
    rank_failure = shard.failure(exc)
    if isinstance(exc, TelemetryWriteError):
        return
    rounds = partial.start_round + len(partial.rounds)
    shard.mark(END_ROUND, 0, Phase.END)
    if isinstance(exc, KeyboardInterrupt):
        outcome, cause = "interrupted", "aborted by a second stop signal"
    else:
        outcome, cause = "failed", f"{type(exc).__name__}: {first_line(exc, fallback='')}"
    failed_rank = None
    if rank_failure is not None and outcome == "failed":
        cause, failed_rank = rank_failure.cause, rank_failure.rank
    with contextlib.suppress(Exception):
        emitters.emit_training_ended(hub, outcome, rounds, discarded_round=rounds, cause=cause, failed_rank=failed_rank)
