"""The PPO agent: the clipped factored-head update over one round's rollout (brief 1.14, JAN settings).

One `update()` per round, the whole rollout as one batch of K sequences replayed from the stored LSTM states:

1. GAE per env (`RolloutBuffer.compute_gae`); advantages normalized over the batch, then masked per head by
   `HEAD_RELEVANCE_BY_OP` of the *effective* op (an invalid action was rewarded as WAIT, so only its op head
   learns from it).
2. Loss = sum over heads of the clipped surrogate (masked mean over the steps where the head is relevant)
   + `value_coef` * MSE(V, returns) - `entropy_coef` * sum over heads of `head_entropy_weights[h]` * masked
   mean of the normalized entropy. The joint ratio (product over relevant heads) feeds only KL and clip
   telemetry.
3. Gradients clipped to `max_grad_norm`; Adam step.

Gates, decided on the device without host syncs: a non-finite loss or gradient norm skips the optimizer
step (`skipped`), and an approximate KL above 1.5 * `target_kl` stops the update (`early_stopped`; this and
all later epochs skip their step). The skip rides on fused Adam's `found_inf` input, the mechanism
`GradScaler` uses, so the step counters do not advance either. Fused Adam also keeps its step counters on the
device, avoiding the per-parameter `.item()` of the single-tensor path (114 host syncs per update upstream).
Where fused Adam is not available the agent falls back to foreach Adam and one host read of the gate per
epoch.

Every metric is brought to the host in one batched transfer at the end. The third consecutive skipped update
raises `NonFiniteUpdateError`.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch.nn import functional as F

from esper.leyline import ACTION_HEAD_NAMES, HEAD_RELEVANCE_BY_OP, LifecycleOp
from esper.leyline.options import CompileBackend, CompileMode
from esper.simic.agent.buffer import RolloutBuffer
from esper.simic.agent.compiled import compile_network
from esper.tamiyo.policy import FactoredRecurrentActorCritic, Network

KL_STOP_FACTOR = 1.5
_ADV_EPS = 1e-8
_FOUND_INF = "found_inf"  # the attribute fused optimizers read to skip a step (set by GradScaler upstream)


def default_head_entropy_weights() -> dict[str, float]:
    """Per-head entropy weights (JAN): op, slot 1.0; blueprint 1.3; style 1.2; tempo 1.3; alpha heads 1.2."""
    weights = {"op": 1.0, "slot": 1.0, "blueprint": 1.3, "style": 1.2, "tempo": 1.3}
    weights.update({"alpha_target": 1.2, "alpha_speed": 1.2, "alpha_curve": 1.2})
    return {name: weights[name] for name in ACTION_HEAD_NAMES}


@dataclass(frozen=True)
class PPOConfig:
    """PPO hyperparameters (JAN defaults)."""

    lr: float = 3e-4
    gamma: float = 0.995
    gae_lambda: float = 0.98
    clip: float = 0.2
    value_coef: float = 1.0
    max_grad_norm: float = 5.0
    target_kl: float | None = 0.015  # None disables the early stop
    entropy_coef: float = 0.05
    entropy_coef_end: float | None = None  # None: no annealing
    entropy_floor: float = 0.01  # lower bound of the annealed coefficient
    entropy_anneal_steps: int = 0  # updates over which entropy_coef moves to entropy_coef_end
    ppo_epochs: int = 1
    head_entropy_weights: dict[str, float] = field(default_factory=default_head_entropy_weights)
    max_consecutive_nonfinite: int = 3

    def __post_init__(self) -> None:
        if set(self.head_entropy_weights) != set(ACTION_HEAD_NAMES):
            raise ValueError(
                f"head_entropy_weights must name exactly the heads {list(ACTION_HEAD_NAMES)}, "
                f"got {sorted(self.head_entropy_weights)}"
            )
        if self.ppo_epochs < 1:
            raise ValueError(f"ppo_epochs must be >= 1, got {self.ppo_epochs}")
        if self.max_consecutive_nonfinite < 1:
            raise ValueError(f"max_consecutive_nonfinite must be >= 1, got {self.max_consecutive_nonfinite}")


def calculate_entropy_anneal_steps(anneal_episodes: int, n_envs: int, updates_per_batch: int) -> int:
    """Updates over which to anneal entropy: ceil(episodes / n_envs) rounds, times the updates per round."""
    if n_envs <= 0:
        raise ValueError(f"n_envs must be positive, got {n_envs}")
    if anneal_episodes <= 0:
        return 0
    return math.ceil(anneal_episodes / n_envs) * max(1, updates_per_batch)


@dataclass(frozen=True)
class PPOMetrics:
    """One update's statistics, as plain host numbers (means over the PPO epochs run)."""

    policy_loss: float
    value_loss: float
    entropy: float  # mean over heads of each head's mean normalized entropy
    entropy_per_head: dict[str, float]
    grad_norm: float  # before clipping
    kl_divergence: float  # approximate KL of the joint (relevant-head) policy
    clip_fraction: float
    explained_variance: float  # of the rollout values against the returns; 0.0 when returns are constant
    nan_grad_count: int  # parameters with a non-finite gradient, summed over epochs
    early_stopped: bool
    skipped: bool  # every epoch was non-finite, so no optimizer step was taken
    entropy_coef: float
    update_time_ms: float
    ratio_max: float
    ratio_min: float
    advantage_mean: float  # before normalization
    advantage_std: float
    return_mean: float
    value_mean: float
    lr: float
    epochs: int


class NonFiniteUpdateError(RuntimeError):
    """Too many consecutive PPO updates had a non-finite loss or gradient."""


# Scalars gathered per update, in the order they are stacked for the single host transfer.
_SCALAR_KEYS: tuple[str, ...] = (
    "policy_loss",
    "value_loss",
    "grad_norm",
    "kl_divergence",
    "clip_fraction",
    "nan_grad_count",
    "nonfinite_epochs",
    "early_stopped",
    "ratio_max",
    "ratio_min",
)


@dataclass(frozen=True)
class _RolloutView:
    """One round's rollout, prepared for the PPO epochs (all device tensors)."""

    norm_adv: torch.Tensor  # [K, T]
    adv_mean: torch.Tensor
    adv_std: torch.Tensor
    returns: torch.Tensor  # [K, T]
    relevance: torch.Tensor  # [K, T, heads]: 1 where the head mattered for the effective op
    head_counts: torch.Tensor  # [heads]
    obs: torch.Tensor
    blueprint_idx: torch.Tensor
    masks: dict[str, torch.Tensor]
    actions: dict[str, torch.Tensor]
    old_log_probs: dict[str, torch.Tensor]
    old_values: torch.Tensor
    hidden0: tuple[torch.Tensor, torch.Tensor]


class PPOAgent:
    """Owns the policy's optimizer, the rollout buffer and the PPO update."""

    def __init__(
        self,
        policy: FactoredRecurrentActorCritic,
        config: PPOConfig,
        *,
        n_envs: int,
        n_steps: int,
        device: torch.device | str,
    ) -> None:
        self.device = torch.device(device)
        self.policy = policy.to(self.device)
        # what every forward pass calls: the policy, or its compiled form (`compile`); parameters, the optimizer
        # and state dicts stay on `policy`
        self.network: Network = self.policy
        self.config = config
        self.buffer = RolloutBuffer(
            n_envs, n_steps, policy.state_dim, policy.num_slots, policy.lstm_hidden_dim, self.device
        )
        self.optimizer, self.fused = _build_adam(self.policy, config.lr)
        self.update_count = 0
        self.consecutive_nonfinite = 0
        relevance = [[name in HEAD_RELEVANCE_BY_OP[op] for name in ACTION_HEAD_NAMES] for op in LifecycleOp]
        self._relevance = torch.tensor(relevance, dtype=torch.float32, device=self.device)  # [6 ops, 8 heads]
        weights = [config.head_entropy_weights[name] for name in ACTION_HEAD_NAMES]
        self._entropy_weights = torch.tensor(weights, dtype=torch.float32, device=self.device)

    @property
    def entropy_coef(self) -> float:
        """`entropy_coef`; annealed: `max(start + min(1, t / steps) * (end - start), entropy_floor)`."""
        cfg = self.config
        if cfg.entropy_coef_end is None or cfg.entropy_anneal_steps <= 0:
            return cfg.entropy_coef
        progress = min(1.0, self.update_count / cfg.entropy_anneal_steps)
        coef = cfg.entropy_coef + progress * (cfg.entropy_coef_end - cfg.entropy_coef)
        return max(coef, cfg.entropy_floor)

    def update(self) -> PPOMetrics:
        """One PPO update over the buffered round; always clears the buffer."""
        start = time.perf_counter()
        entropy_coef = self.entropy_coef
        try:
            scalars, head_entropy = self._run_epochs(entropy_coef)
            # The one host transfer of the update: every statistic, stacked.
            values = torch.stack([*scalars.values(), *head_entropy.values()]).tolist()
        finally:
            self.buffer.reset()
        host = dict(zip([*scalars, *head_entropy], values))
        self.update_count += 1
        epochs = self.config.ppo_epochs
        entropy_per_head = {name: host[f"entropy/{name}"] / epochs for name in ACTION_HEAD_NAMES}
        metrics = PPOMetrics(
            policy_loss=host["policy_loss"] / epochs,
            value_loss=host["value_loss"] / epochs,
            entropy=sum(entropy_per_head.values()) / len(entropy_per_head),
            entropy_per_head=entropy_per_head,
            grad_norm=host["grad_norm"] / epochs,
            kl_divergence=host["kl_divergence"] / epochs,
            clip_fraction=host["clip_fraction"] / epochs,
            explained_variance=host["explained_variance"],
            nan_grad_count=int(host["nan_grad_count"]),
            early_stopped=host["early_stopped"] > 0.5,
            skipped=int(host["nonfinite_epochs"]) == epochs,
            entropy_coef=entropy_coef,
            update_time_ms=(time.perf_counter() - start) * 1000.0,
            ratio_max=host["ratio_max"],
            ratio_min=host["ratio_min"],
            advantage_mean=host["advantage_mean"],
            advantage_std=host["advantage_std"],
            return_mean=host["return_mean"],
            value_mean=host["value_mean"],
            lr=float(self.optimizer.param_groups[0]["lr"]),
            epochs=epochs,
        )
        self._check_finiteness(metrics)
        return metrics

    def _check_finiteness(self, metrics: PPOMetrics) -> None:
        if not metrics.skipped:
            self.consecutive_nonfinite = 0
            return
        self.consecutive_nonfinite += 1
        limit = self.config.max_consecutive_nonfinite
        if self.consecutive_nonfinite >= limit:
            raise NonFiniteUpdateError(
                f"{self.consecutive_nonfinite} consecutive non-finite PPO updates (limit {limit}): the "
                f"loss or gradient norm was NaN/Inf every time (last policy loss {metrics.policy_loss}, "
                f"value loss {metrics.value_loss}, {metrics.nan_grad_count} parameters with non-finite "
                "gradients); check the rewards, the observations and the learning rate"
            )

    def _run_epochs(self, entropy_coef: float) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Run the PPO epochs; returns device scalars (sums over epochs) and per-head entropy sums."""
        cfg = self.config
        view = self._rollout_view()
        zero = torch.zeros((), device=self.device)
        sums = {key: zero.clone() for key in _SCALAR_KEYS}
        sums["ratio_min"].fill_(float("inf"))
        head_entropy = {f"entropy/{name}": zero.clone() for name in ACTION_HEAD_NAMES}
        stopped = torch.zeros((), dtype=torch.bool, device=self.device)
        params = [p for p in self.policy.parameters() if p.requires_grad]
        for _epoch in range(cfg.ppo_epochs):
            log_probs, entropies, values = self.policy.evaluate_actions(
                view.obs, view.blueprint_idx, view.masks, view.actions, view.hidden0, net=self.network
            )
            policy_loss, entropy_bonus, joint_log_ratio = self._surrogate(view, log_probs, entropies, head_entropy)
            value_loss = F.mse_loss(values, view.returns)
            loss = policy_loss + cfg.value_coef * value_loss - entropy_coef * entropy_bonus

            # ---- telemetry and gates (device tensors only) ----
            with torch.no_grad():
                joint_log_ratio = joint_log_ratio.detach()
                joint_ratio = joint_log_ratio.exp()
                approx_kl = ((joint_ratio - 1.0) - joint_log_ratio).mean()
                clip_fraction = ((joint_ratio - 1.0).abs() > cfg.clip).float().mean()
                if cfg.target_kl is not None:
                    stopped = stopped | (approx_kl > KL_STOP_FACTOR * cfg.target_kl)

            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm, foreach=True)
            grads = [p.grad for p in params if p.grad is not None]
            nan_grads = torch.stack([~torch.isfinite(g).all() for g in grads]).sum()
            nonfinite = ~torch.isfinite(loss.detach()) | ~torch.isfinite(grad_norm)
            self._gated_step(nonfinite | stopped)

            with torch.no_grad():
                sums["policy_loss"] += policy_loss.detach()
                sums["value_loss"] += value_loss.detach()
                sums["grad_norm"] += grad_norm
                sums["kl_divergence"] += approx_kl
                sums["clip_fraction"] += clip_fraction
                sums["nan_grad_count"] += nan_grads
                sums["nonfinite_epochs"] += nonfinite.float()
                sums["early_stopped"] = stopped.float()
                sums["ratio_max"] = torch.maximum(sums["ratio_max"], joint_ratio.max())
                sums["ratio_min"] = torch.minimum(sums["ratio_min"], joint_ratio.min())

        with torch.no_grad():
            sums["explained_variance"] = _explained_variance(view.old_values, view.returns)
            sums["advantage_mean"] = view.adv_mean
            sums["advantage_std"] = view.adv_std
            sums["return_mean"] = view.returns.mean()
            sums["value_mean"] = view.old_values.mean()
        return sums, head_entropy

    def _rollout_view(self) -> _RolloutView:
        """The round's rollout as the update reads it: GAE advantages (batch-normalized), returns, each head's
        relevance to the effective op, and the buffer's tensors cut to the steps taken."""
        cfg, buf = self.config, self.buffer
        steps = buf.step_count
        advantages, returns = buf.compute_gae(cfg.gamma, cfg.gae_lambda)
        adv_mean, adv_std = advantages.mean(), advantages.std(correction=0)
        relevance = self._relevance[buf.effective_op[:, :steps]]  # [K, T, 8]
        return _RolloutView(
            norm_adv=(advantages - adv_mean) / (adv_std + _ADV_EPS),
            adv_mean=adv_mean,
            adv_std=adv_std,
            returns=returns,
            relevance=relevance,
            head_counts=relevance.sum(dim=(0, 1)).clamp_min(1.0),  # [8]
            obs=buf.obs[:, :steps],
            blueprint_idx=buf.blueprint_idx[:, :steps],
            masks={key: mask[:, :steps] for key, mask in buf.masks.items()},
            actions={name: act[:, :steps] for name, act in buf.actions.items()},
            old_log_probs={name: lp[:, :steps] for name, lp in buf.log_probs.items()},
            old_values=buf.values[:, :steps],
            hidden0=buf.initial_hidden(),
        )

    def _surrogate(
        self,
        view: _RolloutView,
        log_probs: dict[str, torch.Tensor],
        entropies: dict[str, torch.Tensor],
        head_entropy: dict[str, torch.Tensor],
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Clipped surrogate per head over the steps where the head mattered, summed; the entropy bonus per head;
        the joint log-ratio (for KL and clip fraction). Adds each head's mean entropy to `head_entropy`."""
        clip = self.config.clip
        policy_loss = torch.zeros((), device=self.device)
        entropy_bonus = torch.zeros((), device=self.device)
        joint_log_ratio = torch.zeros_like(view.norm_adv)
        for h, name in enumerate(ACTION_HEAD_NAMES):
            relevant = view.relevance[..., h]
            log_ratio = log_probs[name] - view.old_log_probs[name]
            ratio = log_ratio.exp()
            clipped = ratio.clamp(1.0 - clip, 1.0 + clip)
            surrogate = torch.min(ratio * view.norm_adv, clipped * view.norm_adv)
            policy_loss = policy_loss - (surrogate * relevant).sum() / view.head_counts[h]
            entropy_bonus = entropy_bonus + self._entropy_weights[h] * (
                (entropies[name] * relevant).sum() / view.head_counts[h]
            )
            joint_log_ratio = joint_log_ratio + log_ratio * relevant
            head_entropy[f"entropy/{name}"] += entropies[name].detach().mean()
        return policy_loss, entropy_bonus, joint_log_ratio

    def _gated_step(self, skip: torch.Tensor) -> None:
        """Optimizer step unless `skip` (a device bool): on-device for fused Adam, one host read otherwise."""
        if self.fused:
            setattr(self.optimizer, _FOUND_INF, skip.float())
            try:
                self.optimizer.step()
            finally:
                delattr(self.optimizer, _FOUND_INF)
        elif not bool(skip):  # host sync: fallback path only (no fused Adam on this device)
            self.optimizer.step()

    def compile(self, backend: CompileBackend, mode: CompileMode) -> None:
        """Compile the network every forward pass calls (after the weights are loaded, as the original does)."""
        self.network = compile_network(self.policy, backend, mode)

    def state_dict(self) -> dict[str, Any]:
        """Policy, optimizer and counters; only tensors and plain Python values (`weights_only=True`-safe). The
        policy's keys are the plain module's, whether or not it is compiled."""
        return {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "update_count": self.update_count,
            "consecutive_nonfinite": self.consecutive_nonfinite,
            "config": asdict(self.config),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` saved (the config is informational; this agent keeps its own)."""
        self.policy.load_state_dict(state["policy"])
        # Which kernel runs the update is this run's choice (a checkpoint may come from another device).
        groups = [
            {**group, **{flag: own[flag] for flag in IMPLEMENTATION_FLAGS if flag in own}}
            for group, own in zip(state["optimizer"]["param_groups"], self.optimizer.param_groups, strict=False)
        ]
        self.optimizer.load_state_dict({**state["optimizer"], "param_groups": groups})
        self.update_count = int(state["update_count"])
        self.consecutive_nonfinite = int(state["consecutive_nonfinite"])


IMPLEMENTATION_FLAGS = ("fused", "foreach", "capturable")  # Adam settings that choose a kernel, not the result


def _build_adam(policy: torch.nn.Module, lr: float) -> tuple[torch.optim.Adam, bool]:
    """Fused Adam where the device supports it (no host syncs, on-device skip); foreach Adam otherwise."""
    try:
        return torch.optim.Adam(policy.parameters(), lr=lr, fused=True), True
    except RuntimeError:
        return torch.optim.Adam(policy.parameters(), lr=lr, foreach=True), False


def _explained_variance(predicted: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """1 - Var(target - predicted) / Var(target); 0 where the target has no variance."""
    target_var = target.var(correction=0)
    residual_var = (target - predicted).var(correction=0)
    ratio = residual_var / target_var.clamp_min(1e-12)
    return torch.where(target_var > 0, 1.0 - ratio, torch.zeros_like(ratio))
