"""The two lean reward modes: SIMPLIFIED (PBRS + intervention cost + terminal) and SPARSE (terminal only).

A reward mode of the original (esper-lite `compute_simplified_reward`, `compute_sparse_reward`).
"""

from __future__ import annotations

from esper.leyline import LifecycleOp, RewardBreakdown, RewardInputs
from esper.simic.rewards.config import RewardConfig
from esper.simic.rewards.terms import clip, make_breakdown, pbrs_term


def compute_simplified_reward(inputs: RewardInputs, config: RewardConfig) -> RewardBreakdown:
    """PBRS; -0.01 per non-WAIT op; at the last epoch 3 * val_acc / 100 + 2 * contributing fossils.

    `disable_pbrs` and `disable_terminal_reward` switch off the PBRS and the terminal terms, as in SHAPED.
    """
    intervention = config.simplified_intervention_cost if inputs.op != LifecycleOp.WAIT else 0.0
    terminal = 0.0
    fossil_terminal = 0.0
    if inputs.is_terminal and not config.disable_terminal_reward:
        terminal = config.simplified_acc_scale * inputs.val_acc / 100.0
        fossil_terminal = config.simplified_fossil_bonus * inputs.n_contributing_fossils
    return make_breakdown(
        {
            "pbrs": pbrs_term(inputs, config),
            "intervention": intervention,
            "terminal": terminal,
            "fossil_terminal": fossil_terminal,
        }
    )


def compute_sparse_reward(inputs: RewardInputs, config: RewardConfig) -> RewardBreakdown:
    """0 before the last epoch; then scale * clamp(committed_acc/100 - 0.1 * fossil_params/500k, -1, 1).

    The clamp comes before the scale, so `sparse_scale` really changes the magnitude. Committed accuracy
    counts only fossilized seeds: what the episode leaves behind.
    """
    sparse = 0.0
    if inputs.is_terminal:
        base = inputs.committed_acc / 100.0 - config.param_penalty_weight * (inputs.fossil_params / config.param_budget)
        sparse = config.sparse_scale * clip(base, -1.0, 1.0)
    return make_breakdown({"sparse": sparse})
