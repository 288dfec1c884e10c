"""The small protocol the loop talks to the controller through, and its PPO and heuristic implementations.

The loop hands a batched observation to `act`, gets host-side head indices back (one device-to-host
transfer for every env's heads, values and confidences together), reports rewards with `record`, and at the
end of a round calls `bootstrap` and `end_round` (normalizer update, then the PPO update).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from esper.leyline import ACTION_HEAD_NAMES
from esper.leyline.options import CompileBackend, CompileMode
from esper.simic.agent.ppo import IMPLEMENTATION_FLAGS, PPOAgent, PPOMetrics
from esper.simic.rewards import RewardNormalizer, RunningMeanStd
from esper.simic.training.checkpoint_schema import (
    BOOL,
    COUNT,
    FLOAT,
    NON_NEGATIVE,
    NONE,
    Exactly,
    Fields,
    OneOf,
    Plain,
    TensorSpec,
    Value,
    of_state,
)
from esper.simic.training.observations import ObservationBatch
from esper.tamiyo.heuristic import HeuristicConfig, decide_batch
from tripwire.sync import hot_path


@dataclass
class ActionBatch:
    """Host-side result of one batched policy call."""

    heads: list[list[int]]  # [K][len(ACTION_HEAD_NAMES)]
    values: list[float]
    op_confidence: list[float]  # probability of the chosen op
    op_entropy: list[float]


class PolicyClient(Protocol):
    """What the vectorized loop needs from a controller."""

    name: str

    def begin_round(self, n_envs: int) -> None: ...

    def act(self, obs: ObservationBatch) -> ActionBatch: ...

    def record(
        self, step: int, effective_ops: Sequence[int], rewards: Sequence[float], dones: Sequence[bool]
    ) -> None: ...

    def bootstrap(self, obs: ObservationBatch) -> None: ...

    def end_round(self) -> PPOMetrics | None: ...

    def normalizer_states(self) -> dict[str, dict[str, Any]]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def state_spec(self) -> Fields:
        """What a checkpoint's saved `state_dict()` must hold for `load_state_dict` to use it (checkpoint_schema)."""
        ...

    def compile(self, backend: CompileBackend, mode: CompileMode) -> None: ...


@dataclass
class _PendingStep:
    obs: Tensor
    blueprint_idx: Tensor
    masks: dict[str, Tensor]
    actions: dict[str, Tensor]
    log_probs: dict[str, Tensor]
    values: Tensor
    hidden: tuple[Tensor, Tensor]


class PPOClient:
    """Drives a PPOAgent: frozen observation normalization during the rollout, one update per round."""

    name = "ppo"

    def __init__(self, agent: PPOAgent, *, state_dim: int, generator: torch.Generator, device: torch.device) -> None:
        self.agent = agent
        self.device = device
        self.generator = generator
        self.obs_normalizer = RunningMeanStd((state_dim,), device=device)
        self.reward_normalizer = RewardNormalizer(clip=10.0)
        self.hidden: tuple[Tensor, Tensor] | None = None
        self.pending: _PendingStep | None = None
        self.raw_obs: list[Tensor] = []

    def begin_round(self, n_envs: int) -> None:
        self.hidden = self.agent.policy.initial_hidden(n_envs, self.device)
        self.raw_obs = []
        self.pending = None

    def act(self, obs: ObservationBatch) -> ActionBatch:
        assert self.hidden is not None, "begin_round() must run before act()"
        self.raw_obs.append(obs.features)
        normalized = self.obs_normalizer.normalize(obs.features)
        with torch.no_grad():
            step = self.agent.policy.get_action(
                normalized, obs.blueprint_idx, obs.masks, self.hidden, generator=self.generator, net=self.agent.network
            )
        self.pending = _PendingStep(
            normalized, obs.blueprint_idx, obs.masks, step.actions, step.log_probs, step.values, self.hidden
        )
        self.hidden = step.hidden
        heads = torch.stack([step.actions[name] for name in ACTION_HEAD_NAMES], dim=1).float()
        op_conf = torch.exp(step.log_probs["op"])
        op_entropy = step.entropies["op"]
        packed = torch.cat([heads, step.values.unsqueeze(1), op_conf.unsqueeze(1), op_entropy.unsqueeze(1)], dim=1)
        with hot_path("action_transfer"):
            rows = packed.cpu().tolist()
        n_heads = len(ACTION_HEAD_NAMES)
        return ActionBatch(
            heads=[[int(v) for v in row[:n_heads]] for row in rows],
            values=[row[n_heads] for row in rows],
            op_confidence=[row[n_heads + 1] for row in rows],
            op_entropy=[row[n_heads + 2] for row in rows],
        )

    def record(self, step: int, effective_ops: Sequence[int], rewards: Sequence[float], dones: Sequence[bool]) -> None:
        pending = self.pending
        assert pending is not None, "record() needs a preceding act()"
        normalized = [self.reward_normalizer.update_and_normalize(r) for r in rewards]
        self.agent.buffer.add(
            step=step,
            obs=pending.obs,
            blueprint_idx=pending.blueprint_idx,
            masks=pending.masks,
            actions=pending.actions,
            log_probs=pending.log_probs,
            values=pending.values,
            effective_op=torch.tensor(effective_ops, dtype=torch.long).to(self.device),
            rewards=torch.tensor(normalized, dtype=torch.float32).to(self.device),
            dones=torch.tensor(dones, dtype=torch.bool).to(self.device),
            truncated=torch.zeros(len(rewards), dtype=torch.bool).to(self.device),
            hidden=pending.hidden,
        )
        self.pending = None

    def bootstrap(self, obs: ObservationBatch) -> None:
        assert self.hidden is not None
        normalized = self.obs_normalizer.normalize(obs.features)
        with torch.no_grad():
            step = self.agent.policy.get_action(
                normalized,
                obs.blueprint_idx,
                obs.masks,
                self.hidden,
                generator=None,
                deterministic=True,
                net=self.agent.network,
            )
        self.agent.buffer.set_bootstrap(step.values)

    def end_round(self) -> PPOMetrics:
        self.obs_normalizer.update(torch.cat(self.raw_obs, dim=0))
        self.raw_obs = []
        return self.agent.update()

    def normalizer_states(self) -> dict[str, dict[str, Any]]:
        """The running statistics the client normalizes with: observation (frozen per round) and reward."""
        return {
            "obs_normalizer": self.obs_normalizer.state_dict(),
            "reward_normalizer": self.reward_normalizer.state_dict(),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "agent": self.agent.state_dict(),
            "obs_normalizer": self.obs_normalizer.state_dict(),
            "reward_normalizer": self.reward_normalizer.state_dict(),
            "generator": self.generator.get_state(),
        }

    def state_spec(self) -> Fields:
        """The policy's and normalizers' tensors as this client's (shape, dtype), Adam's per-parameter moments shaped
        like their parameter (absent before the first update), counters non-negative, the generator's state as
        long as this device's; hyper-parameters numbers, flags booleans. The agent's config is only recorded."""
        agent = self.agent
        params = [param for group in agent.optimizer.param_groups for param in group["params"]]
        saved = agent.optimizer.state_dict()
        step = OneOf((TensorSpec((), torch.float32, 0.0), TensorSpec((), torch.float64, 0.0), NON_NEGATIVE))
        per_param = {  # this trainer's Adam never uses amsgrad (a group flipping it is refused): no max_exp_avg_sq
            index: Fields(
                {
                    "step": step,
                    "exp_avg": TensorSpec(tuple(param.shape), param.dtype),
                    "exp_avg_sq": TensorSpec(tuple(param.shape), param.dtype, minimum=0.0),
                }
            )
            for index, param in enumerate(params)
        }
        groups = Exactly(tuple(_group_spec(group) for group in saved["param_groups"]))
        obs_var = self.obs_normalizer.var
        hyper = frozenset({"momentum", "epsilon", "clip"})
        return Fields(
            {
                "agent": Fields(
                    {
                        "policy": of_state(agent.policy.state_dict()),
                        "optimizer": Fields({"state": Fields(per_param, partial=True), "param_groups": groups}),
                        "update_count": COUNT,
                        "consecutive_nonfinite": COUNT,
                        "config": Plain(),
                    }
                ),
                "obs_normalizer": Fields(
                    {
                        "mean": of_state(self.obs_normalizer.mean),
                        "var": TensorSpec(tuple(obs_var.shape), obs_var.dtype, minimum=0.0),
                        "count": NON_NEGATIVE,
                        **dict.fromkeys(hyper, NON_NEGATIVE),
                    },
                    optional=hyper,
                ),
                "reward_normalizer": Fields(
                    {"mean": FLOAT, "m2": NON_NEGATIVE, "count": COUNT, "clip": NON_NEGATIVE},
                    optional=frozenset({"clip"}),
                ),
                "generator": of_state(self.generator.get_state()),
            }
        )

    def compile(self, backend: CompileBackend, mode: CompileMode) -> None:
        """Compile the policy network (after its weights are loaded); its state dicts keep the plain keys."""
        self.agent.compile(backend, mode)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.agent.load_state_dict(state["agent"])
        self.obs_normalizer.load_state_dict(state["obs_normalizer"])
        self.reward_normalizer.load_state_dict(state["reward_normalizer"])
        self.generator.set_state(state["generator"])


def _group_spec(group: dict[str, Any]) -> Fields:
    """An optimizer parameter group: the same parameter indices as this run's, the flags that decide what the update
    computes (amsgrad, maximize, differentiable) as this run's, kernel flags booleans, Adam's numbers (lr, eps,
    weight_decay, betas) non-negative; a hyper-parameter another torch version adds or drops may be present or
    absent."""
    fields = {key: _group_field(key, value) for key, value in group.items()}
    optional = frozenset(key for key in fields if key not in ("params", "lr"))
    return Fields(fields, optional=optional, extra=OneOf((BOOL, NONE, NON_NEGATIVE)))


def _group_field(key: str, value: Any) -> Any:
    if key == "params":
        return Value(value)
    if key in IMPLEMENTATION_FLAGS:
        return OneOf((BOOL, NONE))  # replaced by this run's own on loading (PPOAgent.load_state_dict)
    if isinstance(value, bool) or value is None:
        return Value(value)
    if isinstance(value, tuple):
        return Exactly(tuple(NON_NEGATIVE for _ in value))
    return NON_NEGATIVE


class HeuristicClient:
    """The rule policy behind the same protocol: no network, no update."""

    name = "heuristic"

    def __init__(self, config: HeuristicConfig | None = None) -> None:
        self.config = config or HeuristicConfig()

    def begin_round(self, n_envs: int) -> None:
        return None

    def act(self, obs: ObservationBatch) -> ActionBatch:
        heads = decide_batch(obs.views, self.config)
        n = len(heads)
        return ActionBatch(heads=heads, values=[0.0] * n, op_confidence=[1.0] * n, op_entropy=[0.0] * n)

    def record(self, step: int, effective_ops: Sequence[int], rewards: Sequence[float], dones: Sequence[bool]) -> None:
        return None

    def bootstrap(self, obs: ObservationBatch) -> None:
        return None

    def end_round(self) -> None:
        return None

    def normalizer_states(self) -> dict[str, dict[str, Any]]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None

    def state_spec(self) -> Fields:
        return Fields({})

    def compile(self, backend: CompileBackend, mode: CompileMode) -> None:
        return None  # no network
