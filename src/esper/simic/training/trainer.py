"""VectorizedPPOTrainer: the round / epoch loop, reading top to bottom.

Per epoch: train pass -> fused validation -> one batched transfer -> signals and governor -> observations ->
one batched policy call -> action execution and rewards -> slot ticks -> buffer. After the last epoch of a
round: normalizer update and PPO update (inside the client), round telemetry, checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import torch

from esper.leyline import BatchSummary, SlotConfig
from esper.nissa.hub import TelemetryHub
from esper.simic.agent.ppo import PPOMetrics
from esper.simic.rewards import RewardConfig, RewardMode
from esper.simic.training import action_execution as actions
from esper.simic.training import emitters
from esper.simic.training.config import TrainingConfig
from esper.simic.training.counterfactual_eval import CounterfactualLayout, attribute, build_layout
from esper.simic.training.env_factory import EnvFactory
from esper.simic.training.observations import ObservationBatch, build_observations
from esper.simic.training.parallel_env_state import EnvOutcome, ParallelEnvState
from esper.simic.training.policy_client import PolicyClient
from esper.simic.training.progress import EpochProgress
from esper.simic.training.sharding import EnvShard, LocalShard, Phase
from esper.tolaria.batches import SharedBatchIterator
from esper.tolaria.engine import VectorizedEngine
from esper.tolaria.epoch import EnvEpochResult
from tripwire.timing import CUDATimer

ROLLING_WINDOW = 5


@dataclass
class TrainingResult:
    """What a run returns: per-round summaries, the PPO metrics and the final weights."""

    rounds: list[BatchSummary] = field(default_factory=list)
    ppo_metrics: list[PPOMetrics] = field(default_factory=list)
    final_state: dict[str, Any] = field(default_factory=dict)
    # CPU copies of the last round's env models ("env{i}.<name>") and the policy ("policy.<name>"), so that
    # determinism and resume checks can compare runs bitwise.
    final_weights: dict[str, torch.Tensor] = field(default_factory=dict)
    # (round, epoch) after which a stop request ended the run early (epoch 0: before the round began); that
    # round's rollout was discarded.
    interrupted_at: tuple[int, int] | None = None
    start_round: int = 0  # rounds the resumed checkpoint already held (0 for a fresh run)
    # Files the run wrote: "events" (events.jsonl) and "checkpoint" (the --save file, once a round completed).
    outputs: dict[str, str] = field(default_factory=dict)


class TrainingProbe(Protocol):
    """Optional observer (tests record trajectories with it); called only at epoch and round boundaries."""

    def after_train_pass(self, round_idx: int, epoch: int, envs: Sequence[ParallelEnvState]) -> None: ...

    def after_actions(
        self, round_idx: int, epoch: int, heads: Sequence[Sequence[int]], rewards: Sequence[float]
    ) -> None: ...

    def after_record(self, round_idx: int, epoch: int, policy: PolicyClient) -> None: ...

    def after_update(self, round_idx: int, policy: PolicyClient) -> None: ...


@dataclass(frozen=True)
class LoopSettings:
    """What the trainer reads of a run's configuration; nothing else of the config reaches it."""

    rounds: int  # --rounds: rounds to reach (a resumed run starts at TrainerParts.start_round)
    n_envs: int
    max_epochs: int  # --episode-length
    max_seeds: int | None
    seed: int
    train_samples: int  # per env per epoch (throughput telemetry)
    plateau_threshold: float
    improvement_threshold: float
    inject_nan_epoch: int | None = None  # fault injection (reliability tests)
    inject_rank_failure: tuple[int, ...] | None = None  # (rank, epoch): that rank raises at that epoch of round 0

    @classmethod
    def from_config(cls, config: TrainingConfig) -> LoopSettings:
        return cls(
            rounds=config.n_episodes,
            n_envs=config.n_envs,
            max_epochs=config.max_epochs,
            max_seeds=config.max_seeds,
            seed=config.seed,
            train_samples=config.train_samples,
            plateau_threshold=config.plateau_threshold,
            improvement_threshold=config.improvement_threshold,
            inject_nan_epoch=config.inject_nan_epoch,
            inject_rank_failure=config.inject_rank_failure,
        )


@dataclass
class TrainerParts:
    """The explicit dependency surface of the trainer (built by wiring.trainer_parts)."""

    loop: LoopSettings
    slot_config: SlotConfig
    hub: TelemetryHub
    engine: VectorizedEngine
    env_factory: EnvFactory
    policy: PolicyClient
    train_batches: Callable[[int, int], SharedBatchIterator]  # (round, epoch) -> iterator
    val_batches: Callable[[int, int], SharedBatchIterator]
    policy_device: torch.device
    reward_mode: RewardMode
    reward_config: RewardConfig
    save_checkpoint: Callable[[int, dict[str, Any]], None]  # (rounds completed, trainer state) -> None
    start_round: int = 0
    trainer_state: dict[str, Any] = field(default_factory=dict)  # restored on resume
    on_epoch: Callable[[EpochProgress], None] | None = None  # progress hook, after every epoch
    probe: TrainingProbe | None = None  # observer hook; None costs one attribute check per epoch
    stop_requested: Callable[[], bool] | None = None  # polled after each epoch (the CLI's SIGINT flag)
    shard: EnvShard | None = None  # the envs this rank runs and the exchanges between ranks (None: all, alone)


class InjectedRankFailure(RuntimeError):
    """The test fault `inject_rank_failure`: one rank of a sharded run raises at a chosen epoch."""


class VectorizedPPOTrainer:
    """Runs rounds of K parallel episodes and one policy update per round.

    In a run sharded over ranks (`sharding`), this rank runs the envs of `shard.env_ids`; the policy side (act,
    record, update) always sees all K envs, gathered in env-id order, exactly as one process does.
    """

    def __init__(self, parts: TrainerParts) -> None:
        self.parts = parts
        self.loop = parts.loop
        self.shard: EnvShard = parts.shard or LocalShard(parts.loop.n_envs)
        self.result = TrainingResult(start_round=parts.start_round)
        self.round_accuracies: list[float] = list(parts.trainer_state.get("round_accuracies", []))
        self.last_envs: list[ParallelEnvState] = []

    def run(self) -> TrainingResult:
        for round_idx in range(self.parts.start_round, self.loop.rounds):
            if round_idx > self.parts.start_round and self.stop_requested():  # asked during the last round's end
                self.result.interrupted_at = (round_idx, 0)
                break
            if not self.run_round(round_idx):
                break
            self.parts.save_checkpoint(round_idx + 1, {"round_accuracies": list(self.round_accuracies)})
        self.parts.hub.flush()
        for env in self.last_envs:
            self.result.final_weights.update(weights_copy(f"env{env.env_id}.", env.model))
        return self.result

    def run_round(self, round_idx: int) -> bool:
        """Run one round; False when a stop request ended it after an epoch (its rollout is then discarded)."""
        self.parts.env_factory.clock.epoch = 0
        envs = self.parts.env_factory.create_envs(round_idx, self.shard.env_ids)
        self.parts.policy.begin_round(self.loop.n_envs)
        timer = CUDATimer(self.parts.policy_device)
        epoch_ms: list[float] = []
        outcomes: list[EnvOutcome] = []
        for epoch in range(1, self.loop.max_epochs + 1):
            timer.start()
            outcomes = self.run_epoch(envs, round_idx, epoch)
            epoch_ms.append(timer.stop())
            if self.parts.on_epoch is not None:
                self.parts.on_epoch(self.epoch_progress(outcomes, round_idx, epoch))
            if epoch < self.loop.max_epochs and self.stop_requested():
                self.result.interrupted_at = (round_idx, epoch)
                return False
        self.finish_round(envs, outcomes, round_idx, epoch_ms)
        self.last_envs = envs
        return True

    def epoch_progress(self, outcomes: Sequence[EnvOutcome], round_idx: int, epoch: int) -> EpochProgress:
        return EpochProgress(
            round_idx=round_idx,
            epoch=epoch,
            max_epochs=self.loop.max_epochs,
            n_envs=len(outcomes),
            mean_accuracy=sum(outcome.val_acc for outcome in outcomes) / len(outcomes),
            mean_reward=sum(outcome.total_reward for outcome in outcomes) / len(outcomes),
        )

    def stop_requested(self) -> bool:
        """Whether to stop at this epoch boundary; in a sharded run every rank gets the same answer."""
        return self.shard.any(self.parts.stop_requested is not None and self.parts.stop_requested())

    def observe(self, envs: Sequence[ParallelEnvState]) -> ObservationBatch:
        """Every env's observation (this rank's envs, then the others' gathered in env-id order) for one policy call."""
        return build_observations(
            envs, max_seeds=self.loop.max_seeds, device=self.parts.policy_device, exchange=self.shard.gather
        )

    def run_epoch(self, envs: list[ParallelEnvState], round_idx: int, epoch: int) -> list[EnvOutcome]:
        """One epoch of this rank's envs; returns every env's outcome (all K, in env-id order)."""
        parts, mark = self.parts, self.shard.mark
        parts.env_factory.clock.epoch = epoch
        mark(round_idx, epoch, Phase.TRAIN)
        self.arm_faults(envs, round_idx, epoch)
        layouts = [build_layout(env.model) for env in envs]
        results = parts.engine.run_epoch(
            [env.runtime for env in envs],
            parts.train_batches(round_idx, epoch),
            parts.val_batches(round_idx, epoch),
            [layout.plan for layout in layouts],
        )
        if parts.probe is not None:  # after the epoch's one transfer, so a probe adds no sync inside the pass
            parts.probe.after_train_pass(round_idx, epoch, envs)
        mark(round_idx, epoch, Phase.ABSORB)
        for env, result, layout in zip(envs, results, layouts):
            self.absorb_epoch(env, result, layout, epoch)
        mark(round_idx, epoch, Phase.GOVERNOR)
        rolled_back = [self.check_governor(env, epoch) for env in envs]
        decided = parts.policy.act(self.observe(envs))
        mark(round_idx, epoch, Phase.ACT)
        ctx = self.execution_context(round_idx, epoch)
        mine = []
        for env, rollback in zip(envs, rolled_back):
            env_ctx = replace(ctx, rollback_penalty=env.runtime.governor.death_penalty) if rollback else ctx
            outcome = actions.execute_action(env, decided.heads[env.env_id], env_ctx)
            mine.append(EnvOutcome.of(env, outcome.reward, int(outcome.effective_op), rollback))
            env.model.step_epoch()
            emitters.emit_epoch_completed(parts.hub, env, round_idx, epoch)
            emitters.emit_last_action(parts.hub, env, epoch, outcome, decided)
            emitters.emit_counterfactual_matrix(parts.hub, env, epoch)
        outcomes = self.shard.gather(mine)
        rewards = [o.reward for o in outcomes]
        if parts.probe is not None:
            parts.probe.after_actions(round_idx, epoch, [decided.heads[o.env_id] for o in outcomes], rewards)
        parts.policy.record(epoch - 1, [o.effective_op for o in outcomes], rewards, [o.rolled_back for o in outcomes])
        if parts.probe is not None:  # the reward normalizer has just absorbed this step's rewards
            parts.probe.after_record(round_idx, epoch, parts.policy)
        if epoch == self.loop.max_epochs:
            parts.policy.bootstrap(self.observe(envs))
        return outcomes

    def arm_faults(self, envs: Sequence[ParallelEnvState], round_idx: int, epoch: int) -> None:
        """Fault injection for reliability tests: poison env 0's loss at the configured epoch of round 0, or make
        the configured rank of a sharded run raise there."""
        if round_idx == 0 and self.loop.inject_nan_epoch == epoch and envs[0].env_id == 0:
            envs[0].runtime.poison_next_batch = True
        if round_idx == 0 and self.loop.inject_rank_failure == (self.shard.rank, epoch):
            raise InjectedRankFailure(f"injected failure of rank {self.shard.rank} at epoch {epoch} of round 1")

    def absorb_epoch(
        self, env: ParallelEnvState, result: EnvEpochResult, layout: CounterfactualLayout, epoch: int
    ) -> None:
        """Write one env's epoch results into its state, its slots and its signal tracker."""
        counterfactual = attribute(layout, result.validation)
        env.epoch_result, env.counterfactual = result, counterfactual
        env.acc_history.append(counterfactual.val_acc)
        for index, (slot_id, slot) in enumerate(env.model.seed_slots.items()):
            if slot.state is None:
                continue
            if slot_id in counterfactual.contributions:
                slot.record_contribution(counterfactual.contributions[slot_id])
                env.counterfactual_age[slot_id] = 0
            else:
                env.counterfactual_age[slot_id] = env.counterfactual_age.get(slot_id, 0) + 1
            if slot.seed_trainable:
                slot.record_grad_norm(result.seed_grad_norms[index])
        observed = self.observed_loss(env, counterfactual.val_loss)
        env.signals = env.signal_tracker.update(epoch, observed, counterfactual.val_acc)
        if env.signal_tracker.initiated_now:
            emitters.emit_tamiyo_initiated(self.parts.hub, env, epoch)

    def observed_loss(self, env: ParallelEnvState, val_loss: float) -> float:
        """The loss the controller observes: a non-finite one (the governor rolls that epoch back) reads as the
        env's last finite loss, or chance level before it has one. A NaN in the observation would poison the
        observation normalizer and make every later PPO update non-finite, ending the run."""
        if math.isfinite(val_loss):
            env.last_finite_loss = val_loss
            return val_loss
        return env.runtime.governor.chance_loss if env.last_finite_loss is None else env.last_finite_loss

    def check_governor(self, env: ParallelEnvState, epoch: int) -> bool:
        """Governor vital signs; on panic roll back to the last snapshot and prune live seeds."""
        governor = env.runtime.governor
        verdict = governor.check_vital_signs(env.val_loss)
        if not verdict.panic:
            governor.maybe_snapshot(epoch)
            return False
        report = governor.execute_rollback(epoch, verdict.reason)
        env.runtime.reset_optimizer_state()
        env.rollbacks += 1
        emitters.emit_governor_rollback(self.parts.hub, env, epoch, verdict.reason, report.pruned_seed_ids)
        return True

    def execution_context(self, round_idx: int, epoch: int) -> actions.ExecutionContext:
        return actions.ExecutionContext(
            round_idx=round_idx,
            epoch=epoch,
            max_epochs=self.loop.max_epochs,
            run_seed=self.loop.seed,
            slot_config=self.parts.slot_config,
            reward_mode=self.parts.reward_mode,
            reward_config=self.parts.reward_config,
            max_seeds=self.loop.max_seeds,
        )

    def finish_round(
        self, envs: list[ParallelEnvState], outcomes: Sequence[EnvOutcome], round_idx: int, epoch_ms: list[float]
    ) -> None:
        """Episode outcomes, the policy update, round telemetry and throughput."""
        hub = self.parts.hub
        self.shard.mark(round_idx, self.loop.max_epochs, Phase.OUTCOMES)
        for env in envs:
            emitters.emit_episode_outcome(hub, env, round_idx)
        self.shard.mark(round_idx, self.loop.max_epochs, Phase.UPDATE)
        metrics = self.parts.policy.end_round()
        self.shard.check_replicas(self.parts.policy.state_dict, round_idx)
        if self.parts.probe is not None:
            self.parts.probe.after_update(round_idx, self.parts.policy)
        if metrics is not None:
            emitters.emit_ppo_round(hub, metrics, round_idx)
            self.result.ppo_metrics.append(metrics)
        summary = self.summarize(outcomes, round_idx, sum(epoch_ms) / 1000.0)
        previous = rolling_mean(self.round_accuracies[:-1])
        thresholds = (self.loop.plateau_threshold, self.loop.improvement_threshold)
        emitters.emit_round_summary(hub, summary, previous, thresholds, outcomes)
        emitters.emit_throughput(hub, round_idx, self.throughput(epoch_ms))
        self.result.rounds.append(summary)

    def summarize(self, outcomes: Sequence[EnvOutcome], round_idx: int, seconds: float) -> BatchSummary:
        finals = tuple(outcome.val_acc for outcome in outcomes)
        totals = tuple(outcome.total_reward for outcome in outcomes)
        mean_final = sum(finals) / len(finals)
        self.round_accuracies.append(mean_final)
        env_epochs = len(outcomes) * self.loop.max_epochs
        return BatchSummary(
            round_idx=round_idx,
            episodes_completed=(round_idx + 1) * len(outcomes),
            mean_reward=sum(totals) / len(totals),
            mean_final_accuracy=mean_final,
            rolling_accuracy=rolling_mean(self.round_accuracies) or 0.0,
            env_final_accuracies=finals,
            env_total_rewards=totals,
            rollbacks=sum(outcome.rollbacks for outcome in outcomes),
            train_time_s=seconds,
            env_epochs_per_s=env_epochs / seconds if seconds > 0 else 0.0,
        )

    def throughput(self, epoch_ms: Sequence[float]) -> dict[str, Any]:
        n_envs = self.loop.n_envs
        step_ms = sum(epoch_ms) / max(len(epoch_ms), 1)
        return {
            "timer": "cuda_event" if self.parts.policy_device.type == "cuda" else "perf_counter",
            "epochs": len(epoch_ms),
            "step_time_ms": step_ms,
            "fps": 1000.0 / step_ms if step_ms > 0 else 0.0,
            "env_epochs_per_s": 1000.0 * n_envs / step_ms if step_ms > 0 else 0.0,
            "samples_per_s": 1000.0 * n_envs * self.loop.train_samples / step_ms if step_ms > 0 else 0.0,
        }


def weights_copy(prefix: str, module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Detached CPU clones of `module`'s state dict, keys prefixed with `prefix`."""
    copies: dict[str, torch.Tensor] = {}
    for name, value in module.state_dict().items():
        copies[f"{prefix}{name}"] = value.detach().to("cpu", copy=True)
    return copies


def rolling_mean(values: Sequence[float]) -> float | None:
    """Mean of the last ROLLING_WINDOW values, None when there are none."""
    window = list(values)[-ROLLING_WINDOW:]
    return sum(window) / len(window) if window else None
