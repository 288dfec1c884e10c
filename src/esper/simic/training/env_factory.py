"""Env creation: fresh, per-env-seeded hosts, optimizers, streams, scalers and governors for one round."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from esper.kasmina.building import built_on
from esper.kasmina.host import CNNHost
from esper.kasmina.model import MorphogeneticModel
from esper.leyline import SlotConfig, TaskSpec
from esper.leyline.seeding import derive_seed
from esper.nissa.hub import TelemetryHub
from esper.simic.rewards import EscrowLedger, RewardMode
from esper.simic.training.parallel_env_state import EpochClock, LifecycleForwarder, ParallelEnvState
from esper.tamiyo.signals import SignalTracker
from esper.tolaria.engine import AmpMode, EnvRuntime
from esper.tolaria.governor import TolariaGovernor
from esper.tolaria.streams import resolve_amp_dtype


@dataclass(frozen=True)
class EnvFactory:
    """Builds the envs of a round. Env i runs on devices[i % len(devices)]."""

    task: TaskSpec
    slot_config: SlotConfig
    devices: Sequence[torch.device]
    run_seed: int
    max_epochs: int
    amp: AmpMode
    reward_mode: RewardMode
    plateau_threshold: float
    permissive_gates: bool
    hub: TelemetryHub
    clock: EpochClock = field(default_factory=EpochClock)  # the loop's epoch, read by every env's lifecycle events

    def device_for(self, env_id: int) -> torch.device:
        return self.devices[env_id % len(self.devices)]

    def create(self, round_idx: int, n_envs: int) -> list[ParallelEnvState]:
        return self.create_envs(round_idx, range(n_envs))

    def create_envs(self, round_idx: int, env_ids: Sequence[int]) -> list[ParallelEnvState]:
        """The envs of `env_ids` (a sharded run's rank creates its own): each seeded by its id, not by its rank."""
        return [self.create_env(round_idx, env_id) for env_id in env_ids]

    def create_env(self, round_idx: int, env_id: int) -> ParallelEnvState:
        device = self.device_for(env_id)
        lifecycle = LifecycleForwarder(self.hub, env_id, self.clock)
        # built on its device from a seeded RNG: the host's tensors are not uploaded one by one (kasmina.building)
        with built_on(device, derive_seed(self.run_seed, "host", round_idx, env_id)):
            host = CNNHost(self.task)
            model = MorphogeneticModel(
                host, self.slot_config.slot_ids, permissive_gates=self.permissive_gates, on_event=lifecycle
            )
        # channels_last on every device: a faster conv/pool/BN step on CPU
        # (docs/measurements.md#why-the-code-is-as-it-is)
        model = model.to(memory_format=torch.channels_last)
        host_optimizer = torch.optim.SGD(
            model.host_parameters(),
            lr=self.task.host_lr,
            momentum=self.task.momentum,
            weight_decay=self.task.weight_decay,
            foreach=True,
        )
        amp_dtype = resolve_amp_dtype(self.amp, device)
        runtime = EnvRuntime(
            env_id=env_id,
            device=device,
            model=model,
            host_optimizer=host_optimizer,
            governor=TolariaGovernor(model, num_classes=self.task.num_classes),
            stream=torch.cuda.Stream(device) if device.type == "cuda" else None,
            scaler=torch.amp.GradScaler("cuda") if amp_dtype is torch.float16 else None,
            amp_dtype=amp_dtype,
            slot_ids=self.slot_config.slot_ids,
        )
        return ParallelEnvState(
            env_id=env_id,
            runtime=runtime,
            signal_tracker=SignalTracker(self.max_epochs, plateau_threshold=self.plateau_threshold),
            lifecycle=lifecycle,
            escrow=EscrowLedger(self.slot_config.slot_ids) if self.reward_mode is RewardMode.ESCROW else None,
        )
