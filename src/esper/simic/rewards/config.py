"""Reward modes, the reward constants (one frozen config) and the PBRS gamma check.

Every reward constant is a named field, so an ablation or a test can change one of them without
touching the formulas. Defaults are the JAN values of esper-lite (`simic/rewards.py`,
`ContributionRewardConfig`) where JAN and HEAD differ: sqrt(p*c) attribution, germinate_cost -0.02,
the fossil terminal bonus 3 * n_contributing_fossils, no capacity term, MIN_PRUNE_AGE 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from esper.leyline.options import RewardMode as RewardMode
from esper.leyline.stages import AUTO_PRUNE_PENALTY, MIN_HOLDING_EPOCHS, MIN_PRUNE_AGE


def validate_reward_gamma(reward_gamma: float, ppo_gamma: float) -> None:
    """PBRS keeps the optimal policy only when its gamma is PPO's gamma (Ng et al., 1999); raise otherwise."""
    if reward_gamma != ppo_gamma:
        raise ValueError(
            f"reward gamma {reward_gamma} != PPO gamma {ppo_gamma}: PBRS needs the same gamma as PPO "
            f"(set RewardConfig(gamma={ppo_gamma}))"
        )


@dataclass(frozen=True)
class RewardConfig:
    """Every reward constant, by name. Accuracies, contributions and improvements are percentage points."""

    # --- PBRS: gamma must equal PPO's gamma (validate_reward_gamma).
    gamma: float = 0.995
    pbrs_weight: float = 0.3  # term = pbrs_weight * (gamma * Phi(s') - Phi(s))
    epoch_progress_bonus: float = 0.3  # Phi per slot += min(epoch_progress_bonus * epochs_in_stage, cap)
    max_progress_bonus: float = 2.0

    # --- Attribution (c = contribution, p = progress since germination, imp = total improvement).
    contribution_weight: float = 1.0
    no_germination_acc_factor: float = 0.5  # attribution = 0.5 * c without a germination accuracy
    attribution_sigmoid_steepness: float = 3.0  # attribution *= sigmoid(3 * imp) when imp < 0

    # --- Ratio penalty (anti-gaming), applied when c > ratio_min_contribution.
    ratio_min_contribution: float = 1.0
    hacking_ratio_threshold: float = 5.0  # c / imp above this is suspicious
    ratio_penalty_slope: float = 0.1  # -min(cap, slope * (ratio - threshold) / threshold)
    ratio_penalty_cap: float = 0.3
    improvement_safe_threshold: float = 0.1  # imp <= this: -unsafe_weight * min(1, c / unsafe_scale)
    unsafe_contribution_weight: float = 0.3
    unsafe_contribution_scale: float = 10.0

    # --- Warnings.
    blending_warning_base: float = 0.1  # BLENDING with imp < 0: -(base + min(per_epoch * e, cap))
    blending_warning_per_epoch: float = 0.05
    blending_warning_cap: float = 0.3
    holding_warning_grace_epochs: int = 2  # HOLDING, non-terminal op, e >= grace, attribution > 0
    holding_warning_base: float = 0.1  # -min(base + per_epoch * max(0, e - grace), cap)
    holding_warning_per_epoch: float = 0.05
    holding_warning_cap: float = 0.3

    # --- Synergy: synergy_weight * tanh(synergy_scale * interaction_sum), only while attribution > 0.
    synergy_weight: float = 0.1
    synergy_scale: float = 0.5

    # --- Rent: min(rent_weight * log(1 + eff / max(host, rent_floor)), max_rent),
    #     eff = sum over BLENDING/HOLDING/FOSSILIZED slots of (base_slot_rent_ratio * host + alpha * params).
    rent_weight: float = 0.5
    max_rent: float = 1.5
    rent_floor: int = 200
    base_slot_rent_ratio: float = 0.0039

    # --- Alpha shock: max(-coef * sum(dalpha^2 * params) / max(host, rent_floor), -cap).
    alpha_shock_coef: float = 0.1958
    alpha_shock_cap: float = 1.0

    # --- Action shaping: GERMINATE.
    germinate_with_seed_penalty: float = -0.3
    germinate_cost: float = -0.02

    # --- Action shaping: FOSSILIZE.
    invalid_fossilize_penalty: float = -1.0
    fossilize_regression_penalty: float = -0.5  # imp < 0: -0.5 - min(damage_scale * |imp|, damage_cap)
    fossilize_damage_scale: float = 0.2
    fossilize_damage_cap: float = 1.0
    ransomware_penalty: float = -0.3  # extra when c > 0.1 and imp < -0.2 (the two fields below)
    ransomware_min_contribution: float = 0.1
    ransomware_max_improvement: float = -0.2
    fossilize_min_contribution: float = 1.0  # c >= this earns (base + scale * c) * legitimacy
    fossilize_base_bonus: float = 0.5
    fossilize_contribution_scale: float = 0.1
    fossilize_noncontributing_penalty: float = -0.2
    min_holding_epochs: int = MIN_HOLDING_EPOCHS  # legitimacy = min(1, epochs_in_holding / this)
    fossilize_cost: float = -0.01

    # --- Action shaping: PRUNE.
    min_prune_age: int = MIN_PRUNE_AGE
    young_prune_penalty: float = -0.3  # per epoch short of min_prune_age
    prune_hurting_threshold: float = -0.5
    prune_hurting_bonus: float = 0.15  # c < prune_hurting_threshold
    prune_acceptable_bonus: float = 0.1  # prune_hurting_threshold <= c < 0
    prune_good_seed_penalty: float = -0.3  # c >= 0: max(penalty - slope * c, floor)
    prune_good_seed_slope: float = 0.05
    prune_good_seed_floor: float = -0.9
    prune_cost: float = -0.005

    # --- Action shaping: the other ops.
    set_alpha_target_cost: float = -0.005
    advance_from_training_penalty: float = -0.1

    # --- Terminal (last epoch): terminal_acc_weight * val_acc + fossilize_terminal_scale * n_contributing.
    terminal_acc_weight: float = 0.05
    fossilize_terminal_scale: float = 3.0

    # --- ESCROW: stable accuracy = min of the last escrow_stable_window accuracies; delta clipped.
    escrow_stable_window: int = 3
    escrow_delta_clip: float = 2.0

    # --- SIMPLIFIED: PBRS, a cost per non-WAIT op, at the end 3 * acc / 100 + 2 * contributing fossils.
    simplified_intervention_cost: float = -0.01
    simplified_acc_scale: float = 3.0
    simplified_fossil_bonus: float = 2.0

    # --- SPARSE (last epoch only): sparse_scale * clamp(committed/100 - weight * fossil_params / budget).
    param_budget: int = 500_000
    param_penalty_weight: float = 0.1
    sparse_scale: float = 1.0

    # --- Trainer-side terms.
    auto_prune_penalty: float = AUTO_PRUNE_PENALTY
    hindsight_weight: float = 0.1  # sum of weight * tanh(scale * boost * improvement) * gamma^delay
    hindsight_scale: float = 0.1
    hindsight_cap: float = 0.2

    # --- Ablations (configs/ablations/*.json upstream).
    disable_pbrs: bool = False
    disable_terminal_reward: bool = False
    disable_anti_gaming: bool = False  # turns off the ratio penalty and the alpha shock

    def __post_init__(self) -> None:
        if not 0.0 < self.gamma <= 1.0:
            raise ValueError(f"gamma must be in (0, 1], got {self.gamma}")
        if self.rent_floor < 1:
            raise ValueError(f"rent_floor must be >= 1, got {self.rent_floor}")
        if self.param_budget <= 0:
            raise ValueError(f"param_budget must be positive, got {self.param_budget}")
        if self.escrow_stable_window < 1:
            raise ValueError(f"escrow_stable_window must be >= 1, got {self.escrow_stable_window}")
        if self.min_holding_epochs < 1:
            raise ValueError(f"min_holding_epochs must be >= 1, got {self.min_holding_epochs}")


DEFAULT_REWARD_CONFIG = RewardConfig()
