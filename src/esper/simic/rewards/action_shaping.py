"""Per-op action shaping of the SHAPED/ESCROW rewards: lifecycle compliance and intervention costs.

One small function per `LifecycleOp`. The potential jumps of GERMINATE and
PRUNE live in the PBRS term (`terms.pbrs_term`), which sees them as slot-layout transitions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from esper.leyline import EMPTY_STAGES, LifecycleOp, RewardInputs, SeedStage
from esper.simic.rewards.config import RewardConfig


def germinate_shaping(inputs: RewardInputs, config: RewardConfig) -> float:
    """-0.3 when the slot already holds a seed, plus the germinate cost (-0.02 at JAN)."""
    occupied = config.germinate_with_seed_penalty if inputs.target_stage not in EMPTY_STAGES else 0.0
    return occupied + config.germinate_cost


def fossilize_judgement(inputs: RewardInputs, config: RewardConfig) -> float:
    """Fossilize shaping before the fossilize cost: invalid, regression ("ransomware"), earned, or not earned.

    - not from HOLDING: -1.0;
    - imp < 0: -0.5 - min(0.2 |imp|, 1), another -0.3 when c > 0.1 and imp < -0.2 (a ransomware signature);
    - c >= 1: (0.5 + 0.1 c) * legitimacy, legitimacy = min(1, epochs_in_holding / 5);
    - otherwise (c < 1 or unmeasured): -0.2.
    """
    if inputs.target_stage != SeedStage.HOLDING:
        return config.invalid_fossilize_penalty
    c = inputs.contribution
    imp = inputs.total_improvement
    if imp is not None and imp < 0:
        damage = min(config.fossilize_damage_scale * abs(imp), config.fossilize_damage_cap)
        ransomware = c is not None and c > config.ransomware_min_contribution
        ransomware = ransomware and imp < config.ransomware_max_improvement
        extra = config.ransomware_penalty if ransomware else 0.0
        return config.fossilize_regression_penalty - damage + extra
    if c is not None and c >= config.fossilize_min_contribution:
        legitimacy = min(1.0, inputs.target_epochs_in_stage / config.min_holding_epochs)
        return (config.fossilize_base_bonus + config.fossilize_contribution_scale * c) * legitimacy
    return config.fossilize_noncontributing_penalty


def fossilize_shaping(inputs: RewardInputs, config: RewardConfig) -> float:
    """The fossilize judgement plus the fossilize cost (-0.01, always)."""
    return fossilize_judgement(inputs, config) + config.fossilize_cost


def prune_judgement(inputs: RewardInputs, config: RewardConfig) -> float:
    """Prune shaping before the prune cost.

    - seed younger than MIN_PRUNE_AGE: -0.3 per missing epoch (and nothing else);
    - c < -0.5: +0.15 (the seed was hurting); -0.5 <= c < 0: +0.1;
    - c >= 0: max(-0.3 - 0.05 c, -0.9) (pruning a good seed);
    - no counterfactual yet: 0.
    """
    if inputs.target_age < config.min_prune_age:
        return config.young_prune_penalty * (config.min_prune_age - inputs.target_age)
    c = inputs.contribution
    if c is None:
        return 0.0
    if c < config.prune_hurting_threshold:
        return config.prune_hurting_bonus
    if c < 0:
        return config.prune_acceptable_bonus
    return max(
        config.prune_good_seed_penalty - config.prune_good_seed_slope * c,
        config.prune_good_seed_floor,
    )


def prune_shaping(inputs: RewardInputs, config: RewardConfig) -> float:
    """The prune judgement plus the prune cost (-0.005, always)."""
    return prune_judgement(inputs, config) + config.prune_cost


def set_alpha_target_shaping(inputs: RewardInputs, config: RewardConfig) -> float:
    """A small intervention cost (-0.005)."""
    return config.set_alpha_target_cost


def advance_shaping(inputs: RewardInputs, config: RewardConfig) -> float:
    """-0.1 for advancing out of TRAINING (rushing into BLENDING), else 0."""
    return config.advance_from_training_penalty if inputs.target_stage == SeedStage.TRAINING else 0.0


def wait_shaping(inputs: RewardInputs, config: RewardConfig) -> float:
    """WAIT is the default action: no shaping."""
    return 0.0


ACTION_SHAPING: Mapping[LifecycleOp, Callable[[RewardInputs, RewardConfig], float]] = MappingProxyType(
    {
        LifecycleOp.WAIT: wait_shaping,
        LifecycleOp.GERMINATE: germinate_shaping,
        LifecycleOp.SET_ALPHA_TARGET: set_alpha_target_shaping,
        LifecycleOp.PRUNE: prune_shaping,
        LifecycleOp.FOSSILIZE: fossilize_shaping,
        LifecycleOp.ADVANCE: advance_shaping,
    }
)


def action_shaping(inputs: RewardInputs, config: RewardConfig) -> float:
    """The shaping of the effective op (an invalid action arrives here as WAIT)."""
    return ACTION_SHAPING[inputs.op](inputs, config)
