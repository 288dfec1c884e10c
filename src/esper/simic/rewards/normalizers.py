"""The two running normalizers of the trainer: rewards (std-only, Welford) and observations (EMA, frozen).

After esper-lite's `simic/control/normalization.py`. Checkpoint keys: `state_dict(prefix=...)` writes
`{prefix}{name}`; pass `REWARD_NORMALIZER_PREFIX` / `OBS_NORMALIZER_PREFIX` to get the checkpoint-metadata names
(`reward_normalizer_{mean,m2,count,clip}`, `obs_normalizer_{mean,var,count,momentum,epsilon,clip}`) and the
same prefix to `load_state_dict`. Both states hold only tensors and Python numbers, so they load with
`torch.load(weights_only=True)`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import Tensor

REWARD_NORMALIZER_PREFIX = "reward_normalizer_"
OBS_NORMALIZER_PREFIX = "obs_normalizer_"


def _require(state: Mapping[str, object], key: str) -> object:
    if key not in state:
        raise KeyError(f"normalizer state is missing {key!r} (has {sorted(state)})")
    return state[key]


def _as_float(value: object, key: str) -> float:
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise ValueError(f"{key!r} must be a scalar, got a tensor of shape {tuple(value.shape)}")
        # Checkpoint load only, never on the hot path.
        return float(value.item())
    if isinstance(value, int | float):
        return float(value)
    raise TypeError(f"{key!r} must be a number, got {type(value).__name__}")


class RewardNormalizer:
    """Divides a reward by the running std of all rewards seen (no mean subtraction), clipped to +-clip.

    Std-only keeps the reward's sign and zero point, so the critic's targets do not drift with a running
    mean. The statistics are Welford's mean/m2/count in Python floats; the std is the sample std
    sqrt(m2 / (count - 1)), floored at `epsilon`. With fewer than 2 samples the raw reward is returned,
    clipped. The trainer updates it once per executed step; the buffer gets the normalized reward and
    telemetry the raw one.
    """

    def __init__(self, clip: float = 10.0, epsilon: float = 1e-8) -> None:
        if clip <= 0:
            raise ValueError(f"clip must be positive, got {clip}")
        self.clip = float(clip)
        self.epsilon = float(epsilon)
        self.mean = 0.0
        self.m2 = 0.0
        self.count = 0

    @property
    def std(self) -> float:
        """The sample std of the rewards seen (1.0 before two samples)."""
        if self.count < 2:
            return 1.0
        return max(self.epsilon, math.sqrt(self.m2 / (self.count - 1)))

    def update(self, reward: float) -> None:
        """Add one reward to the statistics (Welford)."""
        self.count += 1
        delta = reward - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (reward - self.mean)

    def normalize(self, reward: float) -> float:
        """reward / std clipped to +-clip; the raw reward, clipped, while count < 2. Never updates."""
        scaled = reward if self.count < 2 else reward / self.std
        return max(-self.clip, min(self.clip, scaled))

    def update_and_normalize(self, reward: float) -> float:
        """`update` then `normalize`: the normalized reward uses the statistics including this reward."""
        self.update(reward)
        return self.normalize(reward)

    def state_dict(self, prefix: str = "") -> dict[str, float]:
        """{prefix}mean, m2, count, clip (count is an int)."""
        return {
            f"{prefix}mean": self.mean,
            f"{prefix}m2": self.m2,
            f"{prefix}count": self.count,
            f"{prefix}clip": self.clip,
        }

    def load_state_dict(self, state: Mapping[str, object], prefix: str = "") -> None:
        """Restore from `state_dict(prefix)`; `clip` is optional (older checkpoints lack it)."""
        mean = _as_float(_require(state, f"{prefix}mean"), f"{prefix}mean")
        m2 = _as_float(_require(state, f"{prefix}m2"), f"{prefix}m2")
        count = _as_float(_require(state, f"{prefix}count"), f"{prefix}count")
        if count < 0 or count != int(count):
            raise ValueError(f"{prefix}count must be a non-negative integer, got {count}")
        self.mean, self.m2, self.count = mean, m2, int(count)
        if f"{prefix}clip" in state:
            self.clip = _as_float(state[f"{prefix}clip"], f"{prefix}clip")


class RunningMeanStd:
    """Observation normalizer: (x - mean) * rsqrt(var + eps), clipped to +-clip, with statistics frozen
    during the rollout.

    `normalize` never changes the statistics. `update(batch)` is called once per round, before PPO, with
    every raw state of the round ([N, *shape]). The first update takes the batch moments; later ones are
    an EMA: mean' = m * mean + (1 - m) * batch_mean and var' = m * var + (1 - m) * batch_var
    + m * (1 - m) * (mean - batch_mean)^2 (law of total variance). `count` counts the rows seen.
    """

    def __init__(
        self,
        shape: tuple[int, ...],
        *,
        momentum: float = 0.99,
        epsilon: float = 1e-4,
        clip: float = 10.0,
        device: torch.device | str | None = None,
    ) -> None:
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        self.shape = tuple(shape)
        self.momentum = float(momentum)
        self.epsilon = float(epsilon)
        self.clip = float(clip)
        self.mean = torch.zeros(self.shape, dtype=torch.float32, device=device)
        self.var = torch.ones(self.shape, dtype=torch.float32, device=device)
        self.count = 0.0

    @property
    def device(self) -> torch.device:
        return self.mean.device

    def normalize(self, x: Tensor) -> Tensor:
        """Normalize `x` ([..., *shape]) with the frozen statistics (no host sync, no state change)."""
        mean = self.mean.to(device=x.device)
        var = self.var.to(device=x.device)
        # rsqrt, not `/ sqrt`: on CPU `torch.sqrt` runs MKL's vector math (VML), which refines the CPU's approximate
        # `rsqrtps` and so rounds differently on Intel and AMD CPUs; `rsqrt` is ATen's IEEE sqrt and divide on every
        # x86 CPU (docs/portability.md).
        return torch.clamp((x - mean) * torch.rsqrt(var + self.epsilon), -self.clip, self.clip)

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        """Fold one round of raw states `x` ([N, *shape]) into the statistics (moves them to x's device)."""
        if x.dim() != len(self.shape) + 1 or tuple(x.shape[1:]) != self.shape:
            raise ValueError(
                f"update expects a batch of shape [N, {', '.join(map(str, self.shape))}], got {list(x.shape)}"
            )
        rows = x.shape[0]
        if rows == 0:
            return
        batch = x.detach().to(dtype=torch.float32)
        batch_mean = batch.mean(dim=0)
        batch_var = batch.var(dim=0, unbiased=False)
        if self.count == 0:
            self.mean, self.var = batch_mean, batch_var
        else:
            m = self.momentum
            mean = self.mean.to(device=batch.device)
            delta = batch_mean - mean
            self.mean = m * mean + (1.0 - m) * batch_mean
            self.var = m * self.var.to(device=batch.device) + (1.0 - m) * batch_var + m * (1.0 - m) * delta**2
        self.count += float(rows)

    def state_dict(self, prefix: str = "") -> dict[str, Tensor | float]:
        """{prefix}mean, var (tensor clones), count, momentum, epsilon, clip (floats)."""
        return {
            f"{prefix}mean": self.mean.detach().clone(),
            f"{prefix}var": self.var.detach().clone(),
            f"{prefix}count": self.count,
            f"{prefix}momentum": self.momentum,
            f"{prefix}epsilon": self.epsilon,
            f"{prefix}clip": self.clip,
        }

    def load_state_dict(self, state: Mapping[str, object], prefix: str = "") -> None:
        """Restore from `state_dict(prefix)`; mean/var/count are required, the hyper-parameters optional."""
        mean = _require(state, f"{prefix}mean")
        var = _require(state, f"{prefix}var")
        if not isinstance(mean, Tensor) or not isinstance(var, Tensor):
            raise TypeError(f"{prefix}mean and {prefix}var must be tensors")
        if tuple(mean.shape) != self.shape or tuple(var.shape) != self.shape:
            raise ValueError(
                f"obs normalizer shape mismatch: checkpoint {tuple(mean.shape)}, this normalizer {self.shape}"
            )
        self.count = _as_float(_require(state, f"{prefix}count"), f"{prefix}count")
        self.mean = mean.detach().to(device=self.device, dtype=torch.float32).clone()
        self.var = var.detach().to(device=self.device, dtype=torch.float32).clone()
        for name in ("momentum", "epsilon", "clip"):
            key = f"{prefix}{name}"
            if key in state:
                setattr(self, name, _as_float(state[key], key))
