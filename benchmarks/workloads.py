"""The reference trainer's benchmark workloads, built exactly as `run_training` builds a run.

`build_parts(config)` runs `esper.simic.training.vectorized.run_training` with the trainer class swapped for one
that keeps the assembled `TrainerParts` instead of training, so every workload uses the trainer's own
construction (seeding, data, envs, engine, policy client) with no copy of it here. Each workload is a
`tripwire.bench.fixture.Workload`: `prepare()` is untimed, `run()` is what a round times.

Sizes: GATE (256 train / 64 val samples per env, batch 32) keeps the gated rounds short; ORIGINAL is the workload
the original was measured on (cifar_baseline, 1000 train / 200 val samples per env per epoch, batch 50 per env).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from unittest import mock

import torch
from torch import Tensor
from torch.nn import functional as F

import slowdowns
from esper.data.records import ImageDataset
from esper.kasmina.slot import SeedSlot
from esper.leyline import BlueprintAction, GerminationStyle, TaskSpec, TempoAction, get_task_spec
from esper.leyline.options import CompileBackend
from esper.nissa import TelemetryHub
from esper.simic.training import vectorized
from esper.simic.training.config import TrainingConfig
from esper.simic.training.counterfactual_eval import build_layout
from esper.simic.training.observations import ObservationBatch, build_observations
from esper.simic.training.parallel_env_state import ParallelEnvState
from esper.simic.training.policy_client import PPOClient
from esper.simic.training.trainer import TrainerParts, TrainingResult, VectorizedPPOTrainer
from esper.tolaria.engine import EnvRuntime
from esper.tolaria.epoch import FusedPlan
from tripwire.bench.fixture import Workload
from tripwire.bench.ops import OpCounter
from tripwire.bench.paired_spec import PairedBench
from tripwire.common.context import usable_cpus
from tripwire.sync.counter import SyncCounter


@dataclass(frozen=True)
class Size:
    """Data per env per epoch."""

    train_samples: int
    val_samples: int
    batch_size: int


GATE = Size(train_samples=256, val_samples=64, batch_size=32)
ORIGINAL = Size(train_samples=1000, val_samples=200, batch_size=50)
EPISODE_LENGTH = 5
# Where the host is the bottleneck: cifar_baseline's host on 8x8 images, batches of 4, the original's samples per env.
# Compute is small, so an env-epoch's time is the host's cost of issuing its ops: the regime that bounds a GPU.
HOST_BOUND_TASK = TaskSpec(
    name="host_bound",
    base_channels=8,
    image_size=8,
    dataset="workloads:host_bound_images",
    description="cifar_baseline's host on 8x8 images: per-op host cost, not compute, sets the time",
)


def host_bound_images(split: str, n_samples: int | None, seed: int, data_dir: str | None) -> ImageDataset:
    """The synthetic task's images averaged down to 8x8 (4x4 pixel blocks): HOST_BOUND_TASK's data."""
    from esper.data.synthetic import SYNTHETIC_DEFAULT_SIZES, make_synthetic

    full = make_synthetic(SYNTHETIC_DEFAULT_SIZES[split] if n_samples is None else n_samples, seed=seed, split=split)
    images = F.avg_pool2d(full.images, 4).contiguous()
    return replace(full, images=images)


HOST_BOUND = Size(train_samples=1000, val_samples=200, batch_size=4)
HOST_BOUND_AIM = 1.10  # host cost per env-epoch over the plain loop's, at most (benchmarks/host_cost.py)


def bench_config(
    n_envs: int, size: Size, *, device: str = "cpu", max_epochs: int = EPISODE_LENGTH, task: str = "cifar_baseline"
) -> TrainingConfig:
    return TrainingConfig(
        n_episodes=1,
        n_envs=n_envs,
        max_epochs=max_epochs,
        task=task,
        train_samples=size.train_samples,
        val_samples=size.val_samples,
        batch_size=size.batch_size,
        device=device,
        seed=42,
    )


class _PartsCapture(VectorizedPPOTrainer):
    """A trainer whose run() only hands its assembled parts back (see build_parts)."""

    captured: list[TrainerParts] = []  # noqa: RUF012 - a one-slot mailbox, emptied by build_parts

    def run(self) -> TrainingResult:
        _PartsCapture.captured.append(self.parts)
        return self.result


def build_parts(config: TrainingConfig, hub: TelemetryHub) -> TrainerParts:
    """The TrainerParts `run_training(config)` would train with (deterministic from config.seed)."""
    with mock.patch.object(vectorized, "VectorizedPPOTrainer", _PartsCapture):
        vectorized.run_training(config, controller="ppo", hub=hub)
    return _PartsCapture.captured.pop()


def blend_seed(slot: SeedSlot, init_seed: int) -> None:
    """Germinate a conv_light seed and walk it into BLENDING with alpha > 0, so validation runs 2 configs."""
    slot.germinate(
        BlueprintAction.CONV_LIGHT,
        f"bench-{init_seed}",
        style=GerminationStyle.LINEAR_ADD,
        tempo=TempoAction.FAST,
        alpha_target=1.0,
        init_seed=init_seed,
    )
    slot.advance_stage()
    slot.step_epoch()
    slot.advance_stage()
    slot.step_epoch()


class _TrainerWorkload:
    """Base: the parts of a run, fresh envs on demand."""

    def __init__(self, config: TrainingConfig, hub: TelemetryHub) -> None:
        self.config = config
        self.parts = build_parts(config, hub)
        self.envs: list[ParallelEnvState] = []

    def fresh_envs(self) -> list[ParallelEnvState]:
        self.envs = self.parts.env_factory.create(0, self.config.n_envs)
        return self.envs

    def begin_rollout(self) -> None:
        """Start a round on the policy with an empty rollout buffer (the PPO update would have emptied it)."""
        policy = self.parts.policy
        if isinstance(policy, PPOClient):
            policy.agent.buffer.reset()
        policy.begin_round(self.config.n_envs)

    def observe(self) -> ObservationBatch:
        """Every env's observation after a first epoch's signals (loss 2.3, accuracy 10 %)."""
        for env in self.envs:
            env.signals = env.signal_tracker.update(1, 2.3, 10.0)
        return build_observations(self.envs, max_seeds=self.config.max_seeds, device=self.parts.policy_device)

    @property
    def runtimes(self) -> list[EnvRuntime]:
        return [env.runtime for env in self.envs]


class EpochWorkload(_TrainerWorkload):
    """One full trainer epoch (`VectorizedPPOTrainer.run_epoch`).

    `episodes=False`: every round is epoch 1 of fresh envs. `episodes=True`: rounds walk through whole episodes
    (epochs 1..max_epochs, the last with the bootstrap call), fresh envs at each episode start, which is what the
    trainer's own throughput telemetry averages over.
    """

    def __init__(self, config: TrainingConfig, hub: TelemetryHub, *, episodes: bool = False) -> None:
        super().__init__(config, hub)
        self.trainer = VectorizedPPOTrainer(self.parts)
        self.episodes = episodes
        self.epoch = 0

    def prepare(self) -> None:
        if not self.episodes or self.epoch in (0, self.config.max_epochs):
            self.fresh_envs()
            self.begin_rollout()
            self.epoch = 0

    def run(self) -> None:
        self.epoch += 1
        self.trainer.run_epoch(self.envs, 0, self.epoch)


class TrainPassWorkload(_TrainerWorkload):
    """The engine's train pass alone, every env over the epoch's shared batches."""

    def prepare(self) -> None:
        self.fresh_envs()

    def run(self) -> None:
        self.parts.engine.train_pass(self.runtimes, self.parts.train_batches(0, 1))


class ValidationWorkload(_TrainerWorkload):
    """Fused counterfactual validation with a blending seed in every env (2 alpha configs per forward)."""

    plans: list[FusedPlan]

    def prepare(self) -> None:
        for env in self.fresh_envs():
            for index, slot in enumerate(env.model.seed_slots.values()):
                blend_seed(slot, init_seed=7 + index)
        self.plans = [build_layout(env.model).plan for env in self.envs]

    def run(self) -> None:
        self.parts.engine.validate(self.runtimes, self.parts.val_batches(0, 1), self.plans)


class PolicyCallWorkload(_TrainerWorkload):
    """One batched policy call (`PPOClient.act`) for every env's observation."""

    obs: ObservationBatch

    def prepare(self) -> None:
        self.fresh_envs()
        self.begin_rollout()
        self.obs = self.observe()

    def run(self) -> None:
        self.parts.policy.act(self.obs)


class PPOUpdateWorkload(_TrainerWorkload):
    """One PPO update over a full round's rollout (every env, every epoch), via `PPOClient.end_round`."""

    def prepare(self) -> None:
        envs = self.fresh_envs()
        policy = self.parts.policy
        self.begin_rollout()
        obs = self.observe()
        for step in range(self.config.max_epochs):
            decided = policy.act(obs)
            ops = [heads[0] for heads in decided.heads]
            rewards = [0.1 * (step + 1) - 0.05 * env for env in range(len(envs))]
            policy.record(step, ops, rewards, [False] * len(envs))
        policy.bootstrap(obs)

    def run(self) -> None:
        self.parts.policy.end_round()


class PlainLoopWorkload(_TrainerWorkload):
    """The plain-PyTorch reference: the same hosts and batches, no controller, no seeds: train + validate."""

    def prepare(self) -> None:
        task = get_task_spec(self.config.task)
        self.hosts = [env.model.host for env in self.fresh_envs()]
        self.optimizers = [
            torch.optim.SGD(
                host.parameters(), lr=task.host_lr, momentum=task.momentum, weight_decay=task.weight_decay, foreach=True
            )
            for host in self.hosts
        ]

    def run(self) -> None:
        for host in self.hosts:
            host.train()
        for per_env in self.parts.train_batches(0, 1):
            for host, optimizer, (inputs, targets) in zip(self.hosts, self.optimizers, per_env):
                optimizer.zero_grad(set_to_none=True)
                loss = F.cross_entropy(host(inputs), targets)
                loss.backward()
                optimizer.step()
        torch.cat(self.validate()).cpu()

    def validate(self) -> list[Tensor]:
        """Every host's validation loss and correct count over the val batches, summed on the device."""
        stats: list[Tensor] = [torch.zeros(2, device=env.device) for env in self.runtimes]
        for host in self.hosts:
            host.eval()
        with torch.inference_mode():
            for per_env in self.parts.val_batches(0, 1):
                for host, stat, (inputs, targets) in zip(self.hosts, stats, per_env):
                    logits = host(inputs)
                    stat[0] += F.cross_entropy(logits, targets, reduction="sum")
                    stat[1] += (logits.argmax(dim=1) == targets).sum()
        return stats


class FaithfulPlainLoopWorkload(PlainLoopWorkload):
    """The plain loop plus the per-step work the original's trainer does and a bare loop skips, written as a user
    would write it: gradients clipped to norm 1 with `torch.nn.utils.clip_grad_norm_` (the norm summed on the
    device), and the train loss and accuracy summed on the device. What our trainer costs beyond this is its own."""

    def run(self) -> None:
        sums: list[Tensor] = [torch.zeros(3, device=env.device) for env in self.runtimes]
        for host in self.hosts:
            host.train()
        for per_env in self.parts.train_batches(0, 1):
            for host, optimizer, total, (inputs, targets) in zip(self.hosts, self.optimizers, sums, per_env):
                optimizer.zero_grad(set_to_none=True)
                logits = host(inputs)
                loss = F.cross_entropy(logits, targets)
                loss.backward()
                total[2] += torch.nn.utils.clip_grad_norm_(host.parameters(), 1.0)
                optimizer.step()
                with torch.no_grad():
                    total[0] += loss * targets.shape[0]
                    total[1] += (logits.argmax(dim=1) == targets).sum()
        torch.cat([*self.validate(), *sums]).cpu()


def measure_proxies(workload: Workload, counted: Workload, label: str) -> dict[str, int]:
    """Host syncs and aten ops of one `run()`, each on its own freshly built (hence identical) workload."""
    workload.prepare()
    with SyncCounter() as syncs:
        workload.run()
    counted.prepare()
    with OpCounter() as ops:
        counted.run()
    return {f"syncs_per_{label}": syncs.total, f"aten_ops_per_{label}": ops.total}


def _gate_workload(
    kind: type[_TrainerWorkload], n_envs: int, compile: CompileBackend = CompileBackend.OFF
) -> Callable[[], _TrainerWorkload]:
    def make() -> _TrainerWorkload:
        return kind(replace(bench_config(n_envs, GATE), compile=compile), TelemetryHub())

    return make


def _epoch_workload(n_envs: int, size: Size, *, threads: int = 1, workers: int = 1) -> Callable[[], EpochWorkload]:
    def make() -> EpochWorkload:
        config = replace(bench_config(n_envs, size), env_workers=workers)
        return EpochWorkload(config, TelemetryHub(), episodes=size is ORIGINAL)

    return make


def paired_benchmarks() -> dict[str, PairedBench]:
    """The suite the paired A/B (`python -m tripwire bench-ab`) times, unit by unit, in two worker processes.

    Same workloads as the pytest-benchmark suite, one torch thread, gate sizes; `runs_per_unit` keeps every unit
    at roughly 30-100 ms on this kind of machine. `ESPER_BENCH_SLOWDOWN` (benchmarks/slowdowns.py) is applied
    here, so an A/B can inject a slowdown into one side only.
    """
    slowdowns.install()
    gate_units = {"samples": float(GATE.train_samples)}
    suite = {
        f"epoch[{n}env]": PairedBench(
            _epoch_workload(n, GATE),
            {"env_epochs": float(n), **{k: n * v for k, v in gate_units.items()}},
            threads=1,
            workers=1,
        )
        for n in (1, 2, 4)
    }
    # the host-bound epoch (benchmarks/host_cost.py's head): per-op host cost is what this unit times
    suite["host_bound[1env]"] = host_trainer_side()["host_bound[1env]"]
    suite["train_pass"] = PairedBench(
        _gate_workload(TrainPassWorkload, 2), {"samples": 2.0 * GATE.train_samples}, threads=1, workers=1
    )
    suite["fused_validation"] = PairedBench(
        _gate_workload(ValidationWorkload, 2),
        {"samples": 2.0 * GATE.val_samples},
        runs_per_unit=3,
        threads=1,
        workers=1,
    )
    # The LSTM's oneDNN path makes these two the noisiest per instance (docs/benchmarks.md): a wider tolerance. Each
    # runs eager and with the policy network compiled by inductor (`--compile inductor`, "[compiled]"): what the
    # compiled code costs per call. Compiling happens in each side's first unit, reported apart
    # (`BenchOutcome.first_unit_s`).
    for backend, suffix in ((CompileBackend.OFF, ""), (CompileBackend.INDUCTOR, "[compiled]")):
        suite[f"policy_call{suffix}"] = PairedBench(
            _gate_workload(PolicyCallWorkload, 4, backend),
            {"env_epochs": 4.0},
            runs_per_unit=8,
            tolerance=0.05,
            threads=1,
            workers=1,
        )
        suite[f"ppo_update{suffix}"] = PairedBench(
            _gate_workload(PPOUpdateWorkload, 4, backend),
            {"transitions": 4.0 * EPISODE_LENGTH},
            tolerance=0.05,
            threads=1,
            workers=1,
        )
    return suite


def compile_side(backend: CompileBackend) -> dict[str, PairedBench]:
    """The policy call and PPO update with the network compiled on `backend` (off: eager), under one name per unit,
    so two sides of `benchmarks/compile_comparison.py` pair them."""
    units: dict[str, tuple[type[_TrainerWorkload], dict[str, float], int]] = {
        "policy_call": (PolicyCallWorkload, {"env_epochs": 4.0}, 8),
        "ppo_update": (PPOUpdateWorkload, {"transitions": 4.0 * EPISODE_LENGTH}, 1),
    }
    return {
        name: PairedBench(_gate_workload(kind, 4, backend), amount, runs_per_unit=runs, threads=1, workers=1)
        for name, (kind, amount, runs) in units.items()
    }


def eager_side() -> dict[str, PairedBench]:
    return compile_side(CompileBackend.OFF)


def inductor_side() -> dict[str, PairedBench]:
    return compile_side(CompileBackend.INDUCTOR)


def aot_eager_side() -> dict[str, PairedBench]:
    return compile_side(CompileBackend.AOT_EAGER)


def _original_size(n_envs: int, *, threads: int, workers: int) -> PairedBench:
    units = {"env_epochs": float(n_envs), "samples": float(n_envs * ORIGINAL.train_samples)}
    return PairedBench(
        _epoch_workload(n_envs, ORIGINAL, workers=workers),
        units,
        threads=threads,
        proxies=False,
        tolerance=0.05,
        workers=min(workers, n_envs),
    )


def original_side_benchmarks() -> dict[str, PairedBench]:
    """Ours on the original's workload (benchmarks/original_comparison.py), at our best setting on this machine's
    cores: one env uses every core as torch threads; several envs run on min(cores, n) env workers of one thread."""
    cores = usable_cpus()
    return {
        f"original_workload[{n}env]": _original_size(n, threads=cores if n == 1 else 1, workers=min(cores, n))
        for n in (1, 2, 4)
    }


def original_side_one_thread() -> dict[str, PairedBench]:
    """Ours on the original's workload on one torch thread, envs in turn."""
    return {f"original_workload[{n}env]": _original_size(n, threads=1, workers=1) for n in (1, 2, 4)}


def plain_loop_side() -> dict[str, PairedBench]:
    """The plain PyTorch loop at the original's size (the base of the overhead pair), one thread."""
    units = {"env_epochs": 1.0}
    return {
        f"epoch[{n}env]": PairedBench(
            _plain(n), {k: n * v for k, v in units.items()}, threads=1, proxies=False, workers=1
        )
        for n in (1, 2, 4)
    }


def trainer_epoch_side() -> dict[str, PairedBench]:
    """Our trainer's first epoch of fresh envs at the original's size (the head of the overhead pair), one thread."""
    units = {"env_epochs": 1.0}
    return {
        f"epoch[{n}env]": PairedBench(
            _first_epoch(n), {k: n * v for k, v in units.items()}, threads=1, proxies=False, workers=1
        )
        for n in (1, 2, 4)
    }


def ceiling_plain_side() -> dict[str, PairedBench]:
    """One env's plain loop on one thread, under the name of each multi-env figure it is the ceiling of: the
    N-core ceiling of ours at N envs is N times this rate (benchmarks/original_comparison.py)."""
    return {
        f"ceiling[{n}env]": PairedBench(_plain(1), {"env_epochs": 1.0}, threads=1, proxies=False, workers=1)
        for n in (2, 4)
    }


def ceiling_ours_side() -> dict[str, PairedBench]:
    """Ours at its best at 2 and 4 envs (`original_side_benchmarks`), under the ceiling's names."""
    best = original_side_benchmarks()
    return {f"ceiling[{n}env]": best[f"original_workload[{n}env]"] for n in (2, 4)}


def _plain(n_envs: int) -> Callable[[], PlainLoopWorkload]:
    def make() -> PlainLoopWorkload:
        return PlainLoopWorkload(bench_config(n_envs, ORIGINAL), TelemetryHub())

    return make


def _first_epoch(n_envs: int) -> Callable[[], EpochWorkload]:
    def make() -> EpochWorkload:
        return EpochWorkload(bench_config(n_envs, ORIGINAL), TelemetryHub())

    return make


def host_bound_config(n_envs: int) -> TrainingConfig:
    """The host-bound workload's run (HOST_BOUND_TASK, by the `module:ATTRIBUTE` form a user's own task takes)."""
    return bench_config(n_envs, HOST_BOUND, task="workloads:HOST_BOUND_TASK")


def _host_bound(kind: type[_TrainerWorkload], n_envs: int) -> Callable[[], _TrainerWorkload]:
    def make() -> _TrainerWorkload:
        return kind(host_bound_config(n_envs), TelemetryHub())

    return make


def _host_bound_side(kind: type[_TrainerWorkload]) -> dict[str, PairedBench]:
    return {
        f"host_bound[{n}env]": PairedBench(
            _host_bound(kind, n), {"env_epochs": float(n)}, threads=1, workers=1, tolerance=0.05
        )
        for n in (1, 4)
    }


def host_plain_side() -> dict[str, PairedBench]:
    """The plain loop on the host-bound workload, one thread (the base of benchmarks/host_cost.py)."""
    return _host_bound_side(PlainLoopWorkload)


def host_faithful_plain_side() -> dict[str, PairedBench]:
    """The plain loop with the original's per-step clipping and train sums, on the host-bound workload (the other
    base of benchmarks/host_cost.py, `--base faithful`)."""
    return _host_bound_side(FaithfulPlainLoopWorkload)


def host_trainer_side() -> dict[str, PairedBench]:
    """Our trainer's first epoch of fresh envs on the host-bound workload, one thread, envs in turn (the head)."""
    return _host_bound_side(EpochWorkload)
