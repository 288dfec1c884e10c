"""The SHAPED reward (the default mode): attribution, anti-gaming, warnings, PBRS, rent, shaping, terminal.

The JAN variant of the shaped reward (esper-lite `11ebe0f6` `simic/rewards.py::compute_contribution_reward`).
`compute_shaped_reward` is the sum of the named components below; ESCROW reuses every component except
the attribution pair through `shaping_terms`.
"""

from __future__ import annotations

import math

from esper.leyline import LifecycleOp, RewardBreakdown, RewardInputs, SeedStage
from esper.simic.rewards.action_shaping import action_shaping
from esper.simic.rewards.config import RewardConfig
from esper.simic.rewards.terms import (
    alpha_shock_term,
    attribution_discount,
    bounded_attribution,
    make_breakdown,
    pbrs_term,
    ratio_penalty,
    rent_term,
)

# Ops that resolve a HOLDING seed and so never pay the holding (indecision) warning.
RESOLVING_OPS = frozenset({LifecycleOp.FOSSILIZE, LifecycleOp.PRUNE})


def shaped_attribution(inputs: RewardInputs, config: RewardConfig) -> float:
    """Credit for the target seed's counterfactual contribution c.

    c < 0 pays c; c >= 0 pays `bounded_attribution(c, p)` times sigmoid(3 imp) when imp < 0. Nothing is paid
    without a measured c or for a FOSSILIZED target (it is permanent; no farming). The term is zeroed for
    FOSSILIZE when imp < 0 (the fossilize shaping punishes that) and negated for PRUNE (pruning a good seed
    costs what keeping it earned).
    """
    c = inputs.contribution
    if c is None or inputs.target_stage == SeedStage.FOSSILIZED:
        return 0.0
    if c < 0:
        value = config.contribution_weight * c
    else:
        discount = attribution_discount(inputs.total_improvement, config)
        value = config.contribution_weight * bounded_attribution(c, inputs.progress, config) * discount
    imp = inputs.total_improvement
    if inputs.op == LifecycleOp.FOSSILIZE and imp is not None and imp < 0:
        return 0.0
    if inputs.op == LifecycleOp.PRUNE:
        return 0.0 - value
    return value


def shaped_ratio_penalty(inputs: RewardInputs, config: RewardConfig) -> float:
    """The ratio penalty of the target seed (<= 0, never negated by PRUNE; none for a FOSSILIZED target)."""
    if inputs.target_stage == SeedStage.FOSSILIZED:
        return 0.0
    return ratio_penalty(inputs.contribution, inputs.total_improvement, config, skip_when_regressing=True)


def blending_warning(inputs: RewardInputs, config: RewardConfig) -> float:
    """BLENDING target with imp < 0: -(0.1 + min(0.05 * epochs_in_stage, 0.3)), an early nudge to prune."""
    imp = inputs.total_improvement
    if inputs.target_stage != SeedStage.BLENDING or imp is None or imp >= 0:
        return 0.0
    escalation = config.blending_warning_per_epoch * inputs.target_epochs_in_stage
    escalation = min(escalation, config.blending_warning_cap)
    return 0.0 - (config.blending_warning_base + escalation)


def holding_warning(inputs: RewardInputs, config: RewardConfig, paid_attribution: float) -> float:
    """HOLDING target, op not FOSSILIZE/PRUNE, e >= 2, attribution > 0: -min(0.1 + 0.05 max(0, e-2), 0.3).

    A good seed left in HOLDING would otherwise farm attribution every epoch instead of being fossilized.
    """
    epochs = inputs.target_epochs_in_stage
    if (
        inputs.target_stage != SeedStage.HOLDING
        or inputs.op in RESOLVING_OPS
        or epochs < config.holding_warning_grace_epochs
        or paid_attribution <= 0
    ):
        return 0.0
    ramp = config.holding_warning_per_epoch * max(0, epochs - config.holding_warning_grace_epochs)
    return 0.0 - min(config.holding_warning_base + ramp, config.holding_warning_cap)


def synergy_bonus(inputs: RewardInputs, config: RewardConfig, paid_attribution: float) -> float:
    """0.1 * tanh(0.5 * interaction_sum) for a positive interaction, paid only while attribution > 0.

    Not paid while the model regresses (imp < 0), where the attribution itself is discounted.
    """
    imp = inputs.total_improvement
    if paid_attribution <= 0 or inputs.interaction_sum <= 0 or (imp is not None and imp < 0):
        return 0.0
    return config.synergy_weight * math.tanh(config.synergy_scale * inputs.interaction_sum)


def terminal_terms(inputs: RewardInputs, config: RewardConfig) -> tuple[float, float]:
    """(0.05 * val_acc, 3 * n_contributing_fossils) at the last epoch (the JAN fossil bonus), else 0."""
    if not inputs.is_terminal or config.disable_terminal_reward:
        return 0.0, 0.0
    return (
        config.terminal_acc_weight * inputs.val_acc,
        config.fossilize_terminal_scale * inputs.n_contributing_fossils,
    )


def shaping_terms(inputs: RewardInputs, config: RewardConfig, paid_attribution: float) -> dict[str, float]:
    """Every SHAPED component after the attribution pair, in a fixed order (shared with ESCROW)."""
    terminal, fossil_terminal = terminal_terms(inputs, config)
    return {
        "blending_warning": blending_warning(inputs, config),
        "holding_warning": holding_warning(inputs, config, paid_attribution),
        "pbrs": pbrs_term(inputs, config),
        "synergy": synergy_bonus(inputs, config, paid_attribution),
        "rent": rent_term(inputs, config),
        "alpha_shock": alpha_shock_term(inputs, config),
        "action_shaping": action_shaping(inputs, config),
        "terminal": terminal,
        "fossil_terminal": fossil_terminal,
    }


def compute_shaped_reward(inputs: RewardInputs, config: RewardConfig) -> RewardBreakdown:
    """The SHAPED reward of one env and epoch; `total` is the sum of the named components."""
    attribution = shaped_attribution(inputs, config)
    penalty = shaped_ratio_penalty(inputs, config)
    components = {"attribution": attribution, "ratio_penalty": penalty}
    components.update(shaping_terms(inputs, config, attribution + penalty))
    return make_breakdown(components)
