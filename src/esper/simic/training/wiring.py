"""Wiring: everything a run is built from its TrainingConfig (policy client, batch sources, hub, checkpointer,
resume state) and the TrainerParts handed to the trainer. No training happens here."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from esper.data.datasets import load_task_data
from esper.data.records import ImageDataset, check_same_shape, min_image_size
from esper.kasmina.host import CNNHost
from esper.leyline import SlotConfig, TaskSpec, get_task_spec
from esper.leyline.seeding import derive_seed
from esper.messages import first_line
from esper.nissa.hub import TelemetryHub
from esper.simic.agent.ppo import PPOAgent, PPOConfig, calculate_entropy_anneal_steps
from esper.simic.rewards import RewardConfig, RewardMode, validate_reward_gamma
from esper.simic.training import emitters
from esper.simic.training.checkpoint import (
    NO_DATA_SIGNATURE,
    CheckpointError,
    CheckpointLayout,
    check_data_signature,
    determinism_note,
    load_checkpoint,
    save_checkpoint,
    state_spec,
    unchecked_note,
)
from esper.simic.training.config import TrainingConfig
from esper.simic.training.env_factory import EnvFactory
from esper.simic.training.memory import check_memory
from esper.simic.training.policy_client import HeuristicClient, PolicyClient, PPOClient
from esper.simic.training.progress import EpochProgress
from esper.simic.training.sharding import EnvShard, LocalShard
from esper.simic.training.trainer import (
    LoopSettings,
    TrainerParts,
    TrainingProbe,
)
from esper.tamiyo.features import state_dim
from esper.tamiyo.policy import FactoredRecurrentActorCritic
from esper.tolaria.batches import SharedBatchIterator
from esper.tolaria.determinism import make_reproducible
from esper.tolaria.devices import resolve_devices
from esper.tolaria.engine import EngineConfig, VectorizedEngine


@dataclass(frozen=True)
class RunSetup:
    """The parts of a run that do not depend on the telemetry hub, in the order they were built."""

    config: TrainingConfig
    controller: str
    task: TaskSpec
    slot_config: SlotConfig
    devices: list[torch.device]
    reward_mode: RewardMode
    reward_config: RewardConfig
    client: PolicyClient
    layout: CheckpointLayout
    train_source: BatchSource
    val_source: BatchSource
    start_round: int = 0
    resumed_state: dict[str, Any] | None = None
    data_signature: dict[str, Any] = dataclasses.field(default_factory=dict)
    notes: tuple[str, ...] = ()  # one-line notes for the user (e.g. a checkpoint too old to check its data)
    determinism: dict[str, Any] = dataclasses.field(default_factory=dict)  # what makes a CUDA run repeat bitwise


class UserCodeError(ValueError):
    """Your own code (a `--dataset package.module:function` loader) stopped the run in a way esper cannot use,
    e.g. by calling sys.exit: one line naming the function."""


def prepare_run(config: TrainingConfig, controller: str, shard: EnvShard | None = None) -> RunSetup:
    """Resolve the task, slots and devices, build the controller, load the resume checkpoint, open the data.

    A rank of a sharded run uses its own device and serves its own envs' batches (every rank loads the same
    checkpoint: it was written once, by rank 0)."""
    shard = shard or LocalShard(config.n_envs)
    task = get_task_spec(config.task)
    slot_config = SlotConfig(tuple(config.slots))
    devices = [shard.device] if shard.device is not None else resolve_devices(config.device, config.devices)
    determinism = make_reproducible(devices, config.deterministic)  # before any CUDA kernel runs
    check_memory(config, controller, task, slot_config, devices[0], len(shard.env_ids))
    client = build_policy_client(config, controller, slot_config.num_slots, devices[0])
    layout = CheckpointLayout(config.n_envs, slot_config.slot_ids, task.name, controller)
    start_round, resumed_state = 0, None
    unchecked: list[tuple[str, str]] = []  # what an older checkpoint does not record (a digest, a data signature)
    if config.resume_path is not None:
        start_round, resumed_state = load_checkpoint(
            config.resume_path, layout=layout, state=state_spec(client.state_spec()), missing=unchecked
        )
        try:
            client.load_state_dict(resumed_state["client"])
        except (RuntimeError, KeyError, ValueError) as exc:  # e.g. another --memory-size: tensor shapes differ
            reason = first_line(exc, 120)  # torch's size-mismatch report runs 30 lines
            raise CheckpointError(
                f"checkpoint {config.resume_path} holds a controller of another shape or kind ({reason}): "
                "resume with the --memory-size, hidden size and controller it was saved with"
            ) from None
    client.compile(config.compile, config.compile_mode)  # after the weights are in place, as the original does
    rewards = reward_config(config)
    train_source = batch_source(config, task, "train", devices, env_ids=shard.env_ids)
    val_source = batch_source(config, task, "val", devices, env_ids=shard.env_ids)
    source = f"--dataset {config.dataset or task.dataset}"
    check_same_shape(train_source.iterator.dataset, val_source.iterator.dataset, source=source)
    fitted = fit_task_to_data(task, train_source.iterator.dataset, val_source.iterator.dataset)
    signature = data_signature(config, task, fitted)
    notes: tuple[str, ...] = ()
    if config.resume_path is not None and resumed_state is not None:
        if check_data_signature(config.resume_path, resumed_state.get("data"), signature) is not None:
            unchecked.append(NO_DATA_SIGNATURE)
        notes = (unchecked_note(config.resume_path, unchecked),) if unchecked else ()
        settings = determinism_note(config.resume_path, resumed_state.get("determinism"), determinism)
        notes += (settings,) if settings is not None else ()
    return RunSetup(
        config=config,
        controller=controller,
        task=fitted,
        slot_config=slot_config,
        devices=devices,
        reward_mode=config.reward_mode,
        reward_config=rewards,
        client=client,
        layout=layout,
        train_source=train_source,
        val_source=val_source,
        start_round=start_round,
        resumed_state=resumed_state,
        data_signature=signature,
        notes=notes,
        determinism=determinism,
    )


def data_signature(config: TrainingConfig, task: TaskSpec, fitted: TaskSpec) -> dict[str, Any]:
    """What the checkpoint records of the data a run trains on, so that a resume on other data is refused: the
    dataset (name, or the loader's `package.module:function`), image channels, image size and class count. The
    data folder or file path is not part of it: moving the same data elsewhere still resumes."""
    return {
        "dataset": config.dataset or task.dataset,
        "channels": fitted.in_channels,
        "image_size": fitted.image_size,
        "classes": fitted.num_classes,
    }


def fit_task_to_data(task: TaskSpec, train: ImageDataset, val: ImageDataset) -> TaskSpec:
    """The task's host shaped for the data: input channels, image size and class count (unchanged for the
    built-in CIFAR-shaped data; your own `--dataset npz` images may have 1 channel, 8x8 pixels, 4 classes)."""
    _, channels, height, _ = train.images.shape
    classes = max(train.num_classes, val.num_classes)
    if (channels, height, classes) == (task.in_channels, task.image_size, task.num_classes):
        return task
    return dataclasses.replace(task, in_channels=channels, image_size=height, num_classes=classes)


def reward_config(config: TrainingConfig) -> RewardConfig:
    """The reward constants of a run; PBRS's gamma is PPO's (checked, so the two cannot drift apart)."""
    rewards = RewardConfig(gamma=config.gamma, param_budget=config.param_budget)
    validate_reward_gamma(rewards.gamma, config.gamma)
    return rewards


def build_engine(setup: RunSetup) -> VectorizedEngine:
    task, config = setup.task, setup.config
    return VectorizedEngine(
        EngineConfig(
            seed_lr=task.seed_lr,
            max_grad_norm=task.max_grad_norm,
            env_workers=config.env_workers,
            compile_step=config.compile_step,
            compile_mode=config.compile_mode,
            cuda_graphs=config.cuda_graphs,
        )
    )


def announce(hub: TelemetryHub, setup: RunSetup) -> None:
    """The run's first events: TRAINING_STARTED, then CHECKPOINT_LOADED when resuming."""
    config = setup.config
    settings = _run_settings(config, setup.task, setup.slot_config, setup.controller)
    emitters.emit_training_started(hub, {**settings, "determinism": dict(setup.determinism)})
    if config.resume_path is not None:
        trainer_state = (setup.resumed_state or {}).get("trainer", {})
        previous = trainer_state.get("events") if isinstance(trainer_state, dict) else None
        emitters.emit_checkpoint_loaded(
            hub, str(Path(config.resume_path)), setup.start_round, previous if isinstance(previous, str) else None
        )


def trainer_parts(
    setup: RunSetup,
    hub: TelemetryHub,
    engine: VectorizedEngine,
    *,
    events_path: Path | None = None,
    on_epoch: Callable[[EpochProgress], None] | None = None,
    probe: TrainingProbe | None = None,
    stop: Callable[[], bool] | None = None,
    shard: EnvShard | None = None,
) -> TrainerParts:
    """The trainer's dependency surface for this run."""
    config = setup.config
    shard = shard or LocalShard(config.n_envs)
    return TrainerParts(
        loop=LoopSettings.from_config(config),
        slot_config=setup.slot_config,
        hub=hub,
        engine=engine,
        env_factory=EnvFactory(
            task=setup.task,
            slot_config=setup.slot_config,
            devices=setup.devices,
            run_seed=config.seed,
            max_epochs=config.max_epochs,
            amp=config.amp,
            reward_mode=setup.reward_mode,
            plateau_threshold=config.plateau_threshold,
            permissive_gates=config.permissive_gates,
            hub=hub,
        ),
        policy=setup.client,
        train_batches=setup.train_source,
        val_batches=setup.val_source,
        policy_device=setup.devices[0],
        reward_mode=setup.reward_mode,
        reward_config=setup.reward_config,
        save_checkpoint=RunCheckpointer(
            config,
            setup.layout,
            setup.client,
            hub,
            events_path,
            shard,
            data=setup.data_signature,
            determinism=setup.determinism,
        ),
        start_round=setup.start_round,
        trainer_state={} if setup.resumed_state is None else dict(setup.resumed_state.get("trainer", {})),
        on_epoch=on_epoch,
        probe=probe,
        stop_requested=stop,
        shard=shard,
    )


def _policy_network(config: TrainingConfig, num_slots: int, device: torch.device) -> FactoredRecurrentActorCritic:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(config.seed, "policy"))
        policy = FactoredRecurrentActorCritic(
            state_dim(num_slots),
            num_slots,
            hidden_dim=config.hidden_dim,
            lstm_hidden_dim=config.lstm_hidden_dim,
        )
    return policy.to(device)


def build_policy_client(config: TrainingConfig, controller: str, num_slots: int, device: torch.device) -> PolicyClient:
    if controller == "heuristic":
        return HeuristicClient()
    ppo = PPOConfig(
        lr=config.lr,
        gamma=config.gamma,
        gae_lambda=config.gae_lambda,
        clip=config.clip_ratio,
        value_coef=config.value_coef,
        max_grad_norm=config.max_policy_grad_norm,
        target_kl=config.target_kl,
        entropy_coef=config.entropy_coef,
        entropy_coef_end=config.entropy_coef_end,
        entropy_anneal_steps=calculate_entropy_anneal_steps(
            config.entropy_anneal_episodes, config.n_envs, config.ppo_updates_per_batch
        ),
        ppo_epochs=config.ppo_updates_per_batch,
    )
    agent = PPOAgent(
        _policy_network(config, num_slots, device),
        ppo,
        n_envs=config.n_envs,
        n_steps=config.max_epochs,
        device=device,
    )
    generator = torch.Generator(device=device)
    generator.manual_seed(derive_seed(config.seed, "sampling"))
    return PPOClient(agent, state_dim=state_dim(num_slots), generator=generator, device=device)


class BatchSource:
    """One shared iterator per split, re-seeded per (round, epoch) so any epoch's order is reproducible alone."""

    def __init__(self, iterator: SharedBatchIterator, generator: torch.Generator, run_seed: int, split: str) -> None:
        self.iterator = iterator
        self.generator = generator
        self.run_seed = run_seed
        self.split = split

    def __call__(self, round_idx: int, epoch: int) -> SharedBatchIterator:
        self.generator.manual_seed(derive_seed(self.run_seed, self.split, round_idx, epoch))
        return self.iterator


def batch_source(
    config: TrainingConfig,
    task: TaskSpec,
    split: str,
    devices: list[torch.device],
    env_ids: Sequence[int] | None = None,
) -> BatchSource:
    per_env = config.train_samples if split == "train" else config.val_samples
    dataset_name = config.dataset or task.dataset
    # Checked once, as the split is loaded (`esper.data.records.check_dataset`): the train split must fill one batch
    # of every env (it drops the last partial batch), and the images must survive the host's pooling.
    pixels = min_image_size(task.n_blocks, task.kernel_size, task.num_pool_layers)
    try:
        dataset = load_task_data(
            dataset_name,
            split=split,
            n_samples=per_env * config.n_envs,
            seed=config.seed,
            data_dir=config.data_dir,
            normalize=config.normalize,
            batch_size=config.batch_size * config.n_envs if split == "train" else 1,
            min_size=(pixels, task.n_blocks),
        )
    except SystemExit as exc:  # a loader calling sys.exit must not end the run silently (exit 0, no output)
        loader = f"loader {dataset_name}" if ":" in dataset_name else f"dataset {dataset_name}"
        raise UserCodeError(
            f"--dataset {dataset_name}: the {loader} called sys.exit({exc.code!r}) while loading the {split} split: "
            "a loader must return an ImageDataset or raise an exception; remove the exit call"
        ) from None
    generator = torch.Generator()
    iterator = SharedBatchIterator(
        dataset,
        n_envs=config.n_envs,
        batch_size_per_env=config.batch_size,
        devices=[devices[i % len(devices)] for i in range(config.n_envs)],
        shuffle=split == "train",
        drop_last=split == "train",
        generator=generator,
        augment=split == "train" and (dataset_name == "cifar10" if config.augment is None else config.augment),
        gpu_preload=config.gpu_preload,
        env_ids=env_ids,
    )
    return BatchSource(iterator, generator, config.seed, split)


def _run_settings(config: TrainingConfig, task: TaskSpec, slot_config: SlotConfig, controller: str) -> dict[str, Any]:
    with torch.random.fork_rng(devices=[]):
        host_params = sum(p.numel() for p in CNNHost(task).parameters())
    return {
        "controller": controller,
        "task": task.name,
        "n_envs": config.n_envs,
        "max_epochs": config.max_epochs,
        "n_episodes": config.n_envs * config.n_episodes,
        "rounds": config.n_episodes,
        "host_params": host_params,
        "slot_ids": list(slot_config.slot_ids),
        "seed": config.seed,
        "lr": config.lr,
        "clip_ratio": config.clip_ratio,
        "entropy_coef": config.entropy_coef,
        "param_budget": config.param_budget,
        "reward_mode": config.reward_mode.value,
        "amp": config.amp.value,
        "compile": config.compile.value,
        "compile_mode": config.compile_mode.value,
        "device": config.device,
        "train_samples_per_env": config.train_samples,
        "batch_size_per_env": config.batch_size,
    }


class RunCheckpointer:
    """Saves the controller after each round when --save is given.

    The hub is flushed first, so every event of the rounds a checkpoint covers is in the backends before the
    checkpoint names them: a run killed after the save has lost no event of its completed rounds. In a sharded run
    every rank flushes, then rank 0 alone writes the checkpoint once all have (every rank holds the same state).
    """

    def __init__(
        self,
        config: TrainingConfig,
        layout: CheckpointLayout,
        client: PolicyClient,
        hub: TelemetryHub,
        events_path: Path | None = None,
        shard: EnvShard | None = None,
        *,
        data: dict[str, Any] | None = None,
        determinism: dict[str, Any] | None = None,
    ) -> None:
        self.path = config.save_path
        self.data = data  # the data signature: a resume on other data is refused
        self.determinism = determinism  # the deterministic-kernel settings in force: a resume under others is noted
        self.shard = shard or LocalShard(config.n_envs)
        self.layout = layout
        self.client = client
        self.hub = hub
        self.events_path = events_path  # recorded, so a resumed run's CHECKPOINT_LOADED links back to it

    def __call__(self, rounds_completed: int, trainer_state: dict[str, Any]) -> None:
        if self.path is not None:
            self.hub.flush()
            self.shard.barrier()
            if not self.shard.is_leader:
                return
            trainer = {**trainer_state, "events": None if self.events_path is None else str(self.events_path)}
            state: dict[str, Any] = {"client": self.client.state_dict(), "trainer": trainer}
            if self.data is not None:
                state["data"] = dict(self.data)
            if self.determinism is not None:
                state["determinism"] = dict(self.determinism)
            save_checkpoint(self.path, layout=self.layout, rounds_completed=rounds_completed, state=state)
