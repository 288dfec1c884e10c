"""One entry point that scores an epoch under the configured reward mode."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from esper.leyline import RewardBreakdown, RewardInputs
from esper.simic.rewards.config import RewardConfig, RewardMode
from esper.simic.rewards.escrow import EscrowLedger
from esper.simic.rewards.shaped import compute_shaped_reward
from esper.simic.rewards.simple import compute_simplified_reward, compute_sparse_reward

# The stateless modes; ESCROW needs the env's ledger.
PURE_REWARDS: Mapping[RewardMode, Callable[[RewardInputs, RewardConfig], RewardBreakdown]] = MappingProxyType(
    {
        RewardMode.SHAPED: compute_shaped_reward,
        RewardMode.SIMPLIFIED: compute_simplified_reward,
        RewardMode.SPARSE: compute_sparse_reward,
    }
)


def compute_reward(
    mode: RewardMode,
    inputs: RewardInputs,
    config: RewardConfig,
    ledger: EscrowLedger | None = None,
) -> RewardBreakdown:
    """Score one env's epoch; ESCROW needs that env's `EscrowLedger` (the other modes ignore it)."""
    if mode is RewardMode.ESCROW:
        if ledger is None:
            raise ValueError("ESCROW needs the env's EscrowLedger: compute_reward(..., ledger=ledger)")
        return ledger.step(inputs, config)
    return PURE_REWARDS[mode](inputs, config)
