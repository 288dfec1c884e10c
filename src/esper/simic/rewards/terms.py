"""Reward terms shared by several modes: slot potentials and PBRS, attribution pieces, rent, alpha shock.

Each term is a pure function of the typed `RewardInputs` (or of a few of its numbers) and the
`RewardConfig`; the mode modules only decide which terms to add up.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from esper.leyline import RewardBreakdown, RewardInputs, SeedStage, SlotRewardState
from esper.simic.rewards.config import RewardConfig

# Stage potentials of PBRS (esper-lite `STAGE_POTENTIALS`). BLENDING has the largest step
# (value is created while alpha ramps), FOSSILIZED the smallest (no "fossilization farming").
STAGE_POTENTIALS: Mapping[SeedStage, float] = MappingProxyType(
    {
        SeedStage.GERMINATED: 1.0,
        SeedStage.TRAINING: 2.0,
        SeedStage.BLENDING: 3.5,
        SeedStage.HOLDING: 5.5,
        SeedStage.FOSSILIZED: 6.0,
    }
)
# Every other stage (UNKNOWN, DORMANT, PRUNED, EMBARGOED, RESETTING) holds no seed: potential 0 and no
# time-in-stage bonus, so an empty slot never accrues potential by waiting.

# Stages whose seed pays rent (it is blended into the host stream).
RENTED_STAGES = frozenset({SeedStage.BLENDING, SeedStage.HOLDING, SeedStage.FOSSILIZED})


def clip(value: float, low: float, high: float) -> float:
    return max(low, min(high, value))


def make_breakdown(components: dict[str, float]) -> RewardBreakdown:
    """A breakdown whose total is the sum of its components, in insertion order."""
    return RewardBreakdown(total=sum(components.values(), 0.0), components=components)


# --- PBRS --------------------------------------------------------------------------------------------


def slot_potential(stage: SeedStage, epochs_in_stage: int, config: RewardConfig) -> float:
    """Phi of one slot: stage potential + min(0.3 * epochs_in_stage, 2) for a seeded stage, else 0."""
    base = STAGE_POTENTIALS.get(stage)
    if base is None:
        return 0.0
    return base + min(config.epoch_progress_bonus * epochs_in_stage, config.max_progress_bonus)


def layout_potentials(slots: Iterable[SlotRewardState], config: RewardConfig) -> tuple[float, float]:
    """(Phi(s), Phi(s')) of the whole slot layout, from each slot's state before and after the action."""
    before = 0.0
    after = 0.0
    for slot in slots:
        before += slot_potential(slot.stage_before, slot.epochs_in_stage_before, config)
        after += slot_potential(slot.stage_after, slot.epochs_in_stage_after, config)
    return before, after


def pbrs_term(inputs: RewardInputs, config: RewardConfig) -> float:
    """pbrs_weight * (gamma * Phi(s') - Phi(s)) over the slot layout (0 when disabled).

    The potential jumps of GERMINATE (0 -> Phi(GERMINATED)) and PRUNE (Phi -> 0) are paid here, as
    esper-lite pays them in action shaping under the same `disable_pbrs` switch; they are not paid twice.
    """
    if config.disable_pbrs:
        return 0.0
    phi_before, phi_after = layout_potentials(inputs.slots, config)
    return config.pbrs_weight * (config.gamma * phi_after - phi_before)


# --- Attribution pieces --------------------------------------------------------------------------------


def attribution_discount(improvement: float | None, config: RewardConfig) -> float:
    """sigmoid(3 * imp) when imp < 0, else 1: credit is discounted while the whole model regresses."""
    if improvement is None or improvement >= 0:
        return 1.0
    # exp argument clamped: exp(709) is the float64 limit.
    exponent = min(-config.attribution_sigmoid_steepness * improvement, 700.0)
    return 1.0 / (1.0 + math.exp(exponent))


def bounded_attribution(contribution: float, progress: float | None, config: RewardConfig) -> float:
    """Credit of a non-negative contribution c against progress p (anti-"ransomware").

    p unknown -> 0.5c; p <= 0 -> 0 (no credit without progress); c >= p -> sqrt(p * c) (JAN geometric mean);
    c < p -> c (the host did the rest).
    """
    if progress is None:
        return config.no_germination_acc_factor * contribution
    if progress <= 0:
        return 0.0
    if contribution >= progress:
        return math.sqrt(progress * contribution)
    return contribution


def ratio_penalty(
    contribution: float | None,
    improvement: float | None,
    config: RewardConfig,
    *,
    skip_when_regressing: bool,
) -> float:
    """Penalty (<= 0) for a contribution far above the total improvement: dependency gaming.

    Applies when c > 1: -min(0.3, 0.1 * (c/imp - 5) / 5) if c/imp > 5 with imp > 0.1, or
    -0.3 * min(1, c / 10) if imp <= 0.1. SHAPED skips it while imp < 0 (the sigmoid discount already
    handles regressions, `skip_when_regressing`); ESCROW has no discount and applies it there too.
    """
    if config.disable_anti_gaming or contribution is None or improvement is None:
        return 0.0
    if contribution <= config.ratio_min_contribution:
        return 0.0
    if skip_when_regressing and improvement < 0:
        return 0.0
    if improvement > config.improvement_safe_threshold:
        ratio = contribution / improvement
        if ratio <= config.hacking_ratio_threshold:
            return 0.0
        excess = (ratio - config.hacking_ratio_threshold) / config.hacking_ratio_threshold
        return 0.0 - min(config.ratio_penalty_cap, config.ratio_penalty_slope * excess)
    scale = min(1.0, contribution / config.unsafe_contribution_scale)
    return 0.0 - config.unsafe_contribution_weight * scale


def stable_accuracy(inputs: RewardInputs, window: int) -> float:
    """Min of the last `window` accuracies, the current epoch included ("prove it held"); val_acc if none."""
    recent = inputs.recent_accs[-window:]
    if not recent:
        return inputs.val_acc
    return min(recent)


# --- Parameter costs -------------------------------------------------------------------------------------


def rent_term(inputs: RewardInputs, config: RewardConfig) -> float:
    """-min(0.5 * log(1 + eff / max(host, 200)), 1.5): a log rent on the blended seed parameters.

    eff = sum over slots in BLENDING/HOLDING/FOSSILIZED after the action of
    (0.0039 * host_params + alpha * seed_params): a base slot rent plus the alpha-weighted parameters.
    """
    effective = 0.0
    for slot in inputs.slots:
        if slot.stage_after in RENTED_STAGES:
            base_rent = config.base_slot_rent_ratio * inputs.host_params
            effective += base_rent + slot.alpha_after * slot.seed_params
    if effective <= 0.0:
        return 0.0
    growth = effective / max(inputs.host_params, config.rent_floor)
    return 0.0 - min(config.rent_weight * math.log1p(growth), config.max_rent)


def alpha_shock_term(inputs: RewardInputs, config: RewardConfig) -> float:
    """max(-0.1958 * sum(dalpha^2 * seed_params) / max(host, 200), -1): a convex cost on fast alpha moves."""
    if config.disable_anti_gaming:
        return 0.0
    shock = 0.0
    for slot in inputs.slots:
        delta = slot.alpha_after - slot.alpha_before
        shock += delta * delta * slot.seed_params
    if shock <= 0.0:
        return 0.0
    scaled = config.alpha_shock_coef * shock / max(inputs.host_params, config.rent_floor)
    return max(0.0 - scaled, -config.alpha_shock_cap)
