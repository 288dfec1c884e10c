"""MaskedCategorical: a categorical distribution over one action head with invalid values masked out.

- Masked logits are replaced by `MASKED_LOGIT` (-1e4, representable in float16 and bfloat16); all arithmetic
  is done in float32 whatever the logits' dtype, so the masked probabilities underflow to exactly 0.
- `sample` uses the Gumbel-max trick with an explicit `torch.Generator` (on the logits' device): it draws
  one uniform block, needs no host sync, and a masked value can never win because its score is set to -inf.
- `entropy` is normalized by `log(#valid)`, so it lies in [0, 1] whatever the head size; it is 0 where only
  one value is valid.
- Every row must have at least one valid value (the mask builder guarantees it; checking would need a sync).
"""

from __future__ import annotations

import torch

MASKED_LOGIT = -1e4
_TINY = 1e-20


class MaskedCategorical:
    """Categorical over the last dimension of `logits`, restricted to the entries where `mask` is True."""

    def __init__(self, logits: torch.Tensor, mask: torch.Tensor) -> None:
        if logits.shape != mask.shape:
            raise ValueError(f"logits {tuple(logits.shape)} and mask {tuple(mask.shape)} differ in shape")
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be torch.bool, got {mask.dtype}")
        self.mask = mask
        self.logits = logits.float().masked_fill(~mask, MASKED_LOGIT)
        self.log_probs_all = torch.log_softmax(self.logits, dim=-1)

    @property
    def probs(self) -> torch.Tensor:
        return self.log_probs_all.exp()

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        """One draw per row (int64, shape = logits.shape[:-1]), via Gumbel-max on the masked logits."""
        uniform = torch.rand(self.logits.shape, generator=generator, device=self.logits.device, dtype=torch.float32)
        gumbel = -torch.log(-torch.log(uniform.clamp_min(_TINY)))
        scores = (self.log_probs_all + gumbel).masked_fill(~self.mask, float("-inf"))
        return scores.argmax(dim=-1)

    def mode(self) -> torch.Tensor:
        """The most likely valid value per row (ties go to the lowest index)."""
        return self.logits.argmax(dim=-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return self.log_probs_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        """Entropy over the valid values divided by log(#valid); 0 where a single value is valid."""
        p_log_p = torch.where(self.mask, self.probs * self.log_probs_all, torch.zeros_like(self.log_probs_all))
        raw = -p_log_p.sum(dim=-1)
        num_valid = self.mask.sum(dim=-1)
        max_entropy = torch.log(num_valid.clamp_min(2).to(raw.dtype))
        return torch.where(num_valid > 1, raw / max_entropy, torch.zeros_like(raw))
