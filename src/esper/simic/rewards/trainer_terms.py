"""Reward pieces the trainer applies around a mode's reward: hacking detection, clawback, hindsight credit.

Trainer-side additions and the REWARD_HACKING_SUSPECTED telemetry of esper-lite
(`_check_reward_hacking`, `_check_ransomware_signature`). All pure functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from esper.leyline import RewardBreakdown, RewardInputs, SeedStage
from esper.simic.rewards.config import DEFAULT_REWARD_CONFIG, RewardConfig
from esper.simic.rewards.terms import STAGE_POTENTIALS

# Seeds still here at the last epoch never earned the germination potential they were paid.
UNPROVEN_STAGES = frozenset({SeedStage.GERMINATED, SeedStage.TRAINING})


def reward_hacking_suspected(
    inputs: RewardInputs,
    breakdown: RewardBreakdown | None = None,
    config: RewardConfig = DEFAULT_REWARD_CONFIG,
) -> bool:
    """True when the target seed claims far more than the whole model gained (emit REWARD_HACKING_SUSPECTED).

    Suspected when the reward's ratio penalty fired (`breakdown.components["ratio_penalty"] < 0`), or when
    c > 1 and c > 5 * imp: for imp > 0 that is c / imp > 5; for imp <= 0 it is a positive claim while the
    model does not improve (the "ransomware" signature). Detection does not depend on
    `disable_anti_gaming`.
    """
    if breakdown is not None and breakdown.components.get("ratio_penalty", 0.0) < 0:
        return True
    c = inputs.contribution
    imp = inputs.total_improvement
    if c is None or imp is None or c <= config.ratio_min_contribution:
        return False
    return c > config.hacking_ratio_threshold * imp


def germination_clawback(inputs: RewardInputs, config: RewardConfig) -> float:
    """At the last epoch (SHAPED, ESCROW): -0.3 * gamma * Phi(GERMINATED) per seed still GERMINATED/TRAINING.

    Takes back the germination potential of seeds that never reached BLENDING, so germinating late for the
    PBRS bonus does not pay. 0 before the last epoch or with PBRS disabled.
    """
    if not inputs.is_terminal or config.disable_pbrs:
        return 0.0
    unproven = sum(1 for slot in inputs.slots if slot.stage_after in UNPROVEN_STAGES)
    return 0.0 - unproven * config.pbrs_weight * config.gamma * STAGE_POTENTIALS[SeedStage.GERMINATED]


@dataclass(frozen=True)
class ScaffoldBoost:
    """A positive interaction a scaffold seed gave a beneficiary, `delay` epochs before it fossilized."""

    boost: float
    delay: int


def scaffold_hindsight_credit(
    boosts: Sequence[ScaffoldBoost], beneficiary_improvement: float, config: RewardConfig
) -> float:
    """min(sum of 0.1 * tanh(0.1 * boost * improvement) * gamma^delay, 0.2) over positive boosts.

    Paid to a scaffold seed when a seed it boosted fossilizes with a positive improvement.
    """
    if beneficiary_improvement <= 0:
        return 0.0
    credit = 0.0
    for item in boosts:
        if item.boost <= 0:
            continue
        raw = math.tanh(config.hindsight_scale * item.boost * beneficiary_improvement)
        credit += config.hindsight_weight * raw * config.gamma**item.delay
    return min(credit, config.hindsight_cap)
