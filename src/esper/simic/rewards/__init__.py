"""Rewards of the seed-lifecycle controller (SHAPED, ESCROW, SIMPLIFIED, SPARSE) and the normalizers.

Every mode is a small pure function of the typed `leyline.RewardInputs` (ESCROW adds a per-env
`EscrowLedger`) returning a `RewardBreakdown` whose named components sum to its total.
"""

from esper.simic.rewards.config import (
    DEFAULT_REWARD_CONFIG,
    RewardConfig,
    RewardMode,
    validate_reward_gamma,
)
from esper.simic.rewards.dispatch import compute_reward
from esper.simic.rewards.escrow import EscrowLedger, EscrowMove, escrow_credit_target, escrow_move
from esper.simic.rewards.normalizers import (
    OBS_NORMALIZER_PREFIX,
    REWARD_NORMALIZER_PREFIX,
    RewardNormalizer,
    RunningMeanStd,
)
from esper.simic.rewards.shaped import compute_shaped_reward
from esper.simic.rewards.simple import compute_simplified_reward, compute_sparse_reward
from esper.simic.rewards.terms import STAGE_POTENTIALS, layout_potentials, slot_potential

__all__ = [
    "DEFAULT_REWARD_CONFIG",
    "OBS_NORMALIZER_PREFIX",
    "REWARD_NORMALIZER_PREFIX",
    "STAGE_POTENTIALS",
    "EscrowLedger",
    "EscrowMove",
    "RewardConfig",
    "RewardMode",
    "RewardNormalizer",
    "RunningMeanStd",
    "compute_reward",
    "compute_shaped_reward",
    "compute_simplified_reward",
    "compute_sparse_reward",
    "escrow_credit_target",
    "escrow_move",
    "layout_potentials",
    "slot_potential",
    "validate_reward_gamma",
]
