"""The rollout buffer: one round of K envs x T steps, preallocated on the device, with per-env GAE.

Layout is `[n_envs, n_steps, ...]` (env-major, like upstream's TamiyoRolloutBuffer), so each env's row is
one LSTM sequence for the update. Per step it stores the observation and blueprint indices, all 9 masks, every
head's action and log-prob, the value, the chosen op (`actions["op"]`) and the effective op that was rewarded,
the reward, the done/truncated flags and the LSTM state *before* the step. `add` takes all envs of one step at
once and only copies device tensors (no host sync).

GAE (`compute_gae`) runs backwards over the steps, vectorized over envs:

    delta_t = r_t + gamma * V_next * (1 - done_t) - V_t
    A_t     = delta_t + gamma * lambda * (1 - end_t) * A_{t+1}

where `V_next` is `V_{t+1}`, or the env's bootstrap value on its last stored step or on a truncated step, and
`end_t = done_t or truncated_t` cuts the recursion at episode boundaries. A done step never bootstraps; a
truncated step bootstraps from `set_bootstrap`'s value (one episode per env per round, so truncation is the
last step).
"""

from __future__ import annotations

import torch

from esper.leyline import ACTION_HEAD_NAMES, MASK_KEYS
from esper.tamiyo.masks import mask_shapes


class RolloutBuffer:
    """Preallocated `[n_envs, n_steps]` storage for one PPO round."""

    def __init__(
        self,
        n_envs: int,
        n_steps: int,
        state_dim: int,
        num_slots: int,
        lstm_hidden_dim: int,
        device: torch.device | str,
    ) -> None:
        if n_envs < 1 or n_steps < 1:
            raise ValueError(f"n_envs and n_steps must be >= 1, got n_envs={n_envs}, n_steps={n_steps}")
        self.n_envs = n_envs
        self.n_steps = n_steps
        self.state_dim = state_dim
        self.num_slots = num_slots
        self.lstm_hidden_dim = lstm_hidden_dim
        self.device = torch.device(device)
        kt = (n_envs, n_steps)
        dev = self.device
        self.obs = torch.zeros(*kt, state_dim, device=dev)
        self.blueprint_idx = torch.zeros(*kt, num_slots, dtype=torch.int64, device=dev)
        self.masks = {
            key: torch.zeros(*kt, *shape, dtype=torch.bool, device=dev) for key, shape in mask_shapes(num_slots).items()
        }
        self.actions = {name: torch.zeros(kt, dtype=torch.int64, device=dev) for name in ACTION_HEAD_NAMES}
        self.log_probs = {name: torch.zeros(kt, device=dev) for name in ACTION_HEAD_NAMES}
        self.values = torch.zeros(kt, device=dev)
        self.effective_op = torch.zeros(kt, dtype=torch.int64, device=dev)
        self.rewards = torch.zeros(kt, device=dev)
        self.dones = torch.zeros(kt, dtype=torch.bool, device=dev)
        self.truncated = torch.zeros(kt, dtype=torch.bool, device=dev)
        self.hidden_h = torch.zeros(*kt, lstm_hidden_dim, device=dev)
        self.hidden_c = torch.zeros(*kt, lstm_hidden_dim, device=dev)
        self.bootstrap_values = torch.zeros(n_envs, device=dev)
        self.step_count = 0

    @property
    def full(self) -> bool:
        return self.step_count == self.n_steps

    @property
    def op(self) -> torch.Tensor:
        """The op each env chose (before validity checks), [K, T]."""
        return self.actions["op"]

    def reset(self) -> None:
        """Forget the stored steps (the storage is reused, not reallocated)."""
        self.step_count = 0
        self.bootstrap_values.zero_()

    def add(
        self,
        *,
        step: int,
        obs: torch.Tensor,
        blueprint_idx: torch.Tensor,
        masks: dict[str, torch.Tensor],
        actions: dict[str, torch.Tensor],
        log_probs: dict[str, torch.Tensor],
        values: torch.Tensor,
        effective_op: torch.Tensor,
        rewards: torch.Tensor,
        dones: torch.Tensor,
        truncated: torch.Tensor,
        hidden: tuple[torch.Tensor, torch.Tensor],
    ) -> None:
        """Store one step of every env; `hidden` is the LSTM state ([1, K, H] each) *before* this step."""
        if step != self.step_count:
            raise ValueError(f"steps must be added in order: expected step {self.step_count}, got {step}")
        if step >= self.n_steps:
            raise ValueError(f"buffer is full ({self.n_steps} steps); call reset() before adding step {step}")
        missing = [key for key in MASK_KEYS if key not in masks] + [
            name for name in ACTION_HEAD_NAMES if name not in actions or name not in log_probs
        ]
        if missing:
            raise KeyError(f"add() is missing {missing}: every mask and every head's action and log-prob is stored")
        self.obs[:, step].copy_(obs)
        self.blueprint_idx[:, step].copy_(blueprint_idx)
        for key in MASK_KEYS:
            self.masks[key][:, step].copy_(masks[key])
        for name in ACTION_HEAD_NAMES:
            self.actions[name][:, step].copy_(actions[name])
            self.log_probs[name][:, step].copy_(log_probs[name])
        self.values[:, step].copy_(values)
        self.effective_op[:, step].copy_(effective_op)
        self.rewards[:, step].copy_(rewards)
        self.dones[:, step].copy_(dones)
        self.truncated[:, step].copy_(truncated)
        self.hidden_h[:, step].copy_(hidden[0][0])
        self.hidden_c[:, step].copy_(hidden[1][0])
        self.step_count += 1

    def set_bootstrap(self, values: torch.Tensor) -> None:
        """V(s') of each env's state after its last stored step ([K]), used where that step is truncated."""
        self.bootstrap_values.copy_(values)

    def replace_last_reward(self, env: int, reward: float, *, terminal: bool = True) -> None:
        """Overwrite env `env`'s last stored reward (JAN's rollback penalty); `terminal` makes it done."""
        if self.step_count == 0:
            raise ValueError("no step stored yet")
        last = self.step_count - 1
        self.rewards[env, last] = reward
        if terminal:
            self.dones[env, last] = True
            self.truncated[env, last] = False

    def initial_hidden(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The LSTM state before step 0, ([1, K, H], [1, K, H]): the update replays each sequence from it."""
        return self.hidden_h[:, 0].unsqueeze(0).contiguous(), self.hidden_c[:, 0].unsqueeze(0).contiguous()

    def compute_gae(self, gamma: float, gae_lambda: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Advantages and returns, each [K, T] over the stored steps; see the module docstring."""
        steps = self.step_count
        if steps == 0:
            raise ValueError("compute_gae on an empty buffer")
        rewards = self.rewards[:, :steps]
        values = self.values[:, :steps]
        not_done = (~self.dones[:, :steps]).to(values.dtype)
        not_end = (~(self.dones[:, :steps] | self.truncated[:, :steps])).to(values.dtype)
        truncated = self.truncated[:, :steps]
        advantages = torch.zeros_like(values)
        next_advantage = torch.zeros_like(self.bootstrap_values)
        for t in reversed(range(steps)):
            next_value = self.bootstrap_values if t == steps - 1 else values[:, t + 1]
            next_value = torch.where(truncated[:, t], self.bootstrap_values, next_value)
            delta = rewards[:, t] + gamma * next_value * not_done[:, t] - values[:, t]
            next_advantage = delta + gamma * gae_lambda * not_end[:, t] * next_advantage
            advantages[:, t] = next_advantage
        return advantages, advantages + values
