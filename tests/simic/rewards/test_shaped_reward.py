"""SHAPED reward: every term against a hand-computed value (JAN variant)."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esper.leyline import LifecycleOp, RewardInputs, SeedStage, SlotRewardState
from esper.simic.rewards import RewardConfig, compute_shaped_reward

CONFIG = RewardConfig()

# A TRAINING seed with nothing measured and no slot layout: every component is 0.
BASE = RewardInputs(
    op=LifecycleOp.WAIT,
    action_valid=True,
    slot_id="r0c1",
    target_stage=SeedStage.TRAINING,
    target_age=3,
    target_epochs_in_stage=1,
    contribution=None,
    acc_at_germination=None,
    interaction_sum=0.0,
    val_acc=60.0,
    total_improvement=None,
    host_params=100_000,
    epoch=3,
    max_epochs=10,
)


def inputs(**changes: object) -> RewardInputs:
    return replace(BASE, **changes)  # type: ignore[arg-type]


def slot(
    stage_before: SeedStage,
    stage_after: SeedStage,
    epochs_before: int = 0,
    epochs_after: int = 0,
    *,
    alpha_before: float = 0.0,
    alpha_after: float = 0.0,
    seed_params: int = 0,
    slot_id: str = "r0c1",
) -> SlotRewardState:
    return SlotRewardState(
        slot_id=slot_id,
        stage_before=stage_before,
        stage_after=stage_after,
        epochs_in_stage_before=epochs_before,
        epochs_in_stage_after=epochs_after,
        alpha_before=alpha_before,
        alpha_after=alpha_after,
        seed_params=seed_params,
        contribution=None,
    )


def component(name: str, config: RewardConfig = CONFIG, **changes: object) -> float:
    return compute_shaped_reward(inputs(**changes), config).components[name]


# --- attribution ------------------------------------------------------------------------------------------


def test_attribution_pays_a_negative_contribution_as_is() -> None:
    assert component("attribution", contribution=-0.7, acc_at_germination=55.0) == pytest.approx(-0.7)


def test_attribution_is_zero_without_progress_since_germination() -> None:
    assert component("attribution", contribution=2.0, acc_at_germination=60.0) == 0.0


def test_attribution_is_geometric_mean_when_contribution_exceeds_progress() -> None:
    # p = 62 - 60 = 2, c = 8 >= p: sqrt(2 * 8) = 4 (JAN; HEAD uses the harmonic mean).
    assert component("attribution", contribution=8.0, acc_at_germination=60.0, val_acc=62.0) == pytest.approx(4.0)


def test_attribution_is_the_contribution_when_below_progress() -> None:
    assert component("attribution", contribution=2.0, acc_at_germination=60.0, val_acc=65.0) == pytest.approx(2.0)


def test_attribution_is_half_the_contribution_without_germination_accuracy() -> None:
    assert component("attribution", contribution=3.0) == pytest.approx(1.5)


def test_attribution_is_discounted_by_sigmoid_of_negative_improvement() -> None:
    expected = 1.5 / (1.0 + math.exp(1.5))  # 0.5 * 3 * sigmoid(3 * -0.5)
    assert component("attribution", contribution=3.0, total_improvement=-0.5) == pytest.approx(expected)


def test_attribution_is_negated_for_prune() -> None:
    assert component("attribution", op=LifecycleOp.PRUNE, contribution=3.0) == pytest.approx(-1.5)


def test_attribution_is_zeroed_for_fossilize_with_negative_improvement() -> None:
    value = component(
        "attribution",
        op=LifecycleOp.FOSSILIZE,
        target_stage=SeedStage.HOLDING,
        contribution=3.0,
        total_improvement=-0.5,
    )
    assert value == 0.0


def test_attribution_is_zero_for_a_fossilized_target() -> None:
    assert component("attribution", target_stage=SeedStage.FOSSILIZED, contribution=3.0) == 0.0


def test_attribution_is_zero_without_a_measured_contribution() -> None:
    assert component("attribution", acc_at_germination=50.0) == 0.0


# --- ratio penalty ----------------------------------------------------------------------------------------


def test_ratio_penalty_grows_with_contribution_over_improvement() -> None:
    # ratio 8: -min(0.3, 0.1 * (8 - 5) / 5) = -0.06
    assert component("ratio_penalty", contribution=8.0, total_improvement=1.0) == pytest.approx(-0.06)


def test_ratio_penalty_is_capped() -> None:
    assert component("ratio_penalty", contribution=40.0, total_improvement=1.0) == pytest.approx(-0.3)


def test_ratio_penalty_scales_with_contribution_when_improvement_is_tiny() -> None:
    # imp <= 0.1: -0.3 * min(1, 4 / 10)
    assert component("ratio_penalty", contribution=4.0, total_improvement=0.05) == pytest.approx(-0.12)


def test_ratio_penalty_needs_contribution_above_one() -> None:
    assert component("ratio_penalty", contribution=1.0, total_improvement=0.05) == 0.0


def test_ratio_penalty_is_not_negated_for_prune() -> None:
    value = component(
        "ratio_penalty",
        op=LifecycleOp.PRUNE,
        target_stage=SeedStage.BLENDING,
        contribution=8.0,
        total_improvement=1.0,
    )
    assert value == pytest.approx(-0.06)


def test_ratio_penalty_is_left_to_the_discount_while_regressing() -> None:
    assert component("ratio_penalty", contribution=4.0, total_improvement=-0.5) == 0.0


# --- warnings ---------------------------------------------------------------------------------------------


def test_blending_warning_escalates_with_epochs_in_stage() -> None:
    value = component(
        "blending_warning", target_stage=SeedStage.BLENDING, target_epochs_in_stage=3, total_improvement=-1.0
    )
    assert value == pytest.approx(-0.25)


def test_blending_warning_is_capped() -> None:
    value = component(
        "blending_warning", target_stage=SeedStage.BLENDING, target_epochs_in_stage=10, total_improvement=-1.0
    )
    assert value == pytest.approx(-0.4)


def test_blending_warning_needs_negative_improvement() -> None:
    value = component(
        "blending_warning", target_stage=SeedStage.BLENDING, target_epochs_in_stage=3, total_improvement=0.0
    )
    assert value == 0.0


HOLDING_FARM = {
    "target_stage": SeedStage.HOLDING,
    "contribution": 2.0,  # attribution 1.0 > 0
    "total_improvement": 1.0,
}


def test_holding_warning_ramps_after_the_grace_epochs() -> None:
    # e = 4: -min(0.1 + 0.05 * (4 - 2), 0.3)
    assert component("holding_warning", target_epochs_in_stage=4, **HOLDING_FARM) == pytest.approx(-0.2)


def test_holding_warning_is_capped() -> None:
    assert component("holding_warning", target_epochs_in_stage=20, **HOLDING_FARM) == pytest.approx(-0.3)


def test_holding_warning_spares_the_first_epoch() -> None:
    assert component("holding_warning", target_epochs_in_stage=1, **HOLDING_FARM) == 0.0


@pytest.mark.parametrize("op", [LifecycleOp.FOSSILIZE, LifecycleOp.PRUNE])
def test_holding_warning_spares_resolving_ops(op: LifecycleOp) -> None:
    assert component("holding_warning", op=op, target_epochs_in_stage=4, **HOLDING_FARM) == 0.0


def test_holding_warning_applies_to_non_resolving_ops() -> None:
    value = component("holding_warning", op=LifecycleOp.SET_ALPHA_TARGET, target_epochs_in_stage=2, **HOLDING_FARM)
    assert value == pytest.approx(-0.1)


def test_holding_warning_needs_positive_attribution() -> None:
    value = component("holding_warning", target_stage=SeedStage.HOLDING, target_epochs_in_stage=4)
    assert value == 0.0


# --- PBRS -------------------------------------------------------------------------------------------------


def test_pbrs_pays_gamma_discounted_potential_difference() -> None:
    # Phi: 3.5 + 0.3 * 2 = 4.1 -> 3.5 + 0.3 * 3 = 4.4; 0.3 * (0.995 * 4.4 - 4.1)
    layout = (slot(SeedStage.BLENDING, SeedStage.BLENDING, 2, 3),)
    assert component("pbrs", slots=layout) == pytest.approx(0.3 * (0.995 * 4.4 - 4.1))


def test_pbrs_uses_the_configured_gamma() -> None:
    layout = (slot(SeedStage.BLENDING, SeedStage.BLENDING, 2, 3),)
    value = component("pbrs", RewardConfig(gamma=0.9), slots=layout)
    assert value == pytest.approx(0.3 * (0.9 * 4.4 - 4.1))


def test_pbrs_pays_the_germination_potential() -> None:
    layout = (slot(SeedStage.DORMANT, SeedStage.GERMINATED, 4, 0),)
    assert component("pbrs", op=LifecycleOp.GERMINATE, slots=layout) == pytest.approx(0.3 * 0.995 * 1.0)


def test_pbrs_takes_back_the_potential_of_a_pruned_seed() -> None:
    layout = (slot(SeedStage.HOLDING, SeedStage.PRUNED, 3, 0),)
    assert component("pbrs", op=LifecycleOp.PRUNE, slots=layout) == pytest.approx(-0.3 * (5.5 + 0.9))


def test_pbrs_caps_the_time_in_stage_bonus() -> None:
    layout = (slot(SeedStage.TRAINING, SeedStage.TRAINING, 10, 11),)
    assert component("pbrs", slots=layout) == pytest.approx(0.3 * (0.995 * 4.0 - 4.0))


def test_pbrs_gives_empty_slots_no_potential() -> None:
    layout = (
        slot(SeedStage.DORMANT, SeedStage.DORMANT, 5, 6),
        slot(SeedStage.EMBARGOED, SeedStage.EMBARGOED, 1, 2),
    )
    assert component("pbrs", slots=layout) == 0.0


def test_pbrs_sums_over_the_whole_slot_layout() -> None:
    layout = (
        slot(SeedStage.DORMANT, SeedStage.GERMINATED, slot_id="r0c0"),
        slot(SeedStage.FOSSILIZED, SeedStage.FOSSILIZED, 1, 2, slot_id="r0c1"),
    )
    expected = 0.3 * (0.995 * (1.0 + 6.6) - 6.3)
    assert component("pbrs", slots=layout) == pytest.approx(expected)


def test_pbrs_discounted_sum_telescopes_over_a_trajectory() -> None:
    stages = [
        (SeedStage.DORMANT, 0),
        (SeedStage.GERMINATED, 0),
        (SeedStage.TRAINING, 0),
        (SeedStage.TRAINING, 1),
        (SeedStage.BLENDING, 0),
        (SeedStage.HOLDING, 0),
        (SeedStage.FOSSILIZED, 0),
    ]
    discounted = 0.0
    for t, ((before, e_before), (after, e_after)) in enumerate(itertools.pairwise(stages)):
        layout = (slot(before, after, e_before, e_after),)
        discounted += 0.995**t * component("pbrs", slots=layout)
    assert discounted == pytest.approx(0.3 * (0.995 ** (len(stages) - 1) * 6.0 - 0.0))


def test_pbrs_is_zero_when_disabled() -> None:
    layout = (slot(SeedStage.BLENDING, SeedStage.BLENDING, 2, 3),)
    assert component("pbrs", RewardConfig(disable_pbrs=True), slots=layout) == 0.0


# --- synergy ----------------------------------------------------------------------------------------------


def test_synergy_pays_bounded_positive_interaction_while_attributed() -> None:
    value = component("synergy", contribution=2.0, interaction_sum=2.0)
    assert value == pytest.approx(0.1 * math.tanh(1.0))


def test_synergy_needs_positive_attribution() -> None:
    assert component("synergy", contribution=-1.0, interaction_sum=2.0) == 0.0


# --- rent and alpha shock ---------------------------------------------------------------------------------


def test_rent_is_log_of_alpha_weighted_params_plus_base_slot_rent() -> None:
    layout = (slot(SeedStage.BLENDING, SeedStage.BLENDING, alpha_after=0.5, seed_params=20_000),)
    effective = 0.0039 * 100_000 + 0.5 * 20_000
    assert component("rent", slots=layout) == pytest.approx(-0.5 * math.log(1.0 + effective / 100_000))


def test_rent_floors_the_host_size() -> None:
    layout = (slot(SeedStage.HOLDING, SeedStage.HOLDING, alpha_after=1.0, seed_params=100),)
    effective = 0.0039 * 50 + 100
    assert component("rent", host_params=50, slots=layout) == pytest.approx(-0.5 * math.log(1.0 + effective / 200))


def test_rent_is_capped() -> None:
    layout = (slot(SeedStage.FOSSILIZED, SeedStage.FOSSILIZED, alpha_after=1.0, seed_params=10**9),)
    assert component("rent", slots=layout) == pytest.approx(-1.5)


def test_rent_spares_seeds_not_yet_blended() -> None:
    layout = (slot(SeedStage.TRAINING, SeedStage.TRAINING, seed_params=50_000),)
    assert component("rent", slots=layout) == 0.0


def test_alpha_shock_is_convex_in_the_alpha_change() -> None:
    layout = (slot(SeedStage.BLENDING, SeedStage.BLENDING, alpha_before=0.2, alpha_after=0.7, seed_params=40_000),)
    assert component("alpha_shock", slots=layout) == pytest.approx(-0.1958 * 0.25 * 40_000 / 100_000)


def test_alpha_shock_is_capped() -> None:
    layout = (slot(SeedStage.BLENDING, SeedStage.BLENDING, alpha_before=0.0, alpha_after=1.0, seed_params=10**7),)
    assert component("alpha_shock", slots=layout) == pytest.approx(-1.0)


def test_disable_anti_gaming_turns_off_alpha_shock_and_ratio_penalty() -> None:
    layout = (slot(SeedStage.BLENDING, SeedStage.BLENDING, alpha_before=0.2, alpha_after=0.7, seed_params=40_000),)
    breakdown = compute_shaped_reward(
        inputs(contribution=8.0, total_improvement=1.0, slots=layout), RewardConfig(disable_anti_gaming=True)
    )
    assert (breakdown.components["alpha_shock"], breakdown.components["ratio_penalty"]) == (0.0, 0.0)


# --- action shaping ---------------------------------------------------------------------------------------


def test_germinate_into_an_empty_slot_costs_the_germinate_cost() -> None:
    value = component("action_shaping", op=LifecycleOp.GERMINATE, target_stage=SeedStage.DORMANT)
    assert value == pytest.approx(-0.02)


def test_germinate_into_an_occupied_slot_is_penalized() -> None:
    value = component("action_shaping", op=LifecycleOp.GERMINATE, target_stage=SeedStage.TRAINING)
    assert value == pytest.approx(-0.3 - 0.02)


def test_fossilize_outside_holding_is_invalid() -> None:
    assert component("action_shaping", op=LifecycleOp.FOSSILIZE) == pytest.approx(-1.0 - 0.01)


FOSSILIZE = {"op": LifecycleOp.FOSSILIZE, "target_stage": SeedStage.HOLDING}


def test_fossilize_of_a_regressing_seed_is_penalized_by_damage() -> None:
    value = component("action_shaping", total_improvement=-1.0, **FOSSILIZE)
    assert value == pytest.approx(-0.5 - 0.2 - 0.01)


def test_fossilize_of_a_ransomware_seed_pays_an_extra_penalty() -> None:
    value = component("action_shaping", total_improvement=-1.0, contribution=2.0, **FOSSILIZE)
    assert value == pytest.approx(-0.5 - 0.2 - 0.3 - 0.01)


def test_fossilize_of_a_contributing_seed_earns_a_bonus() -> None:
    value = component("action_shaping", contribution=2.0, total_improvement=1.0, target_epochs_in_stage=5, **FOSSILIZE)
    assert value == pytest.approx(0.5 + 0.1 * 2.0 - 0.01)


def test_fossilize_bonus_is_scaled_by_legitimacy() -> None:
    value = component("action_shaping", contribution=2.0, total_improvement=1.0, target_epochs_in_stage=2, **FOSSILIZE)
    assert value == pytest.approx((0.5 + 0.1 * 2.0) * 2 / 5 - 0.01)


def test_fossilize_of_a_non_contributing_seed_is_penalized() -> None:
    value = component("action_shaping", contribution=0.5, total_improvement=1.0, **FOSSILIZE)
    assert value == pytest.approx(-0.2 - 0.01)


PRUNE = {"op": LifecycleOp.PRUNE, "target_stage": SeedStage.BLENDING}


def test_prune_of_a_too_young_seed_is_penalized_per_missing_epoch() -> None:
    value = component("action_shaping", RewardConfig(min_prune_age=3), target_age=1, contribution=-1.0, **PRUNE)
    assert value == pytest.approx(-0.3 * 2 - 0.005)


def test_prune_of_a_too_young_seed_uses_the_jan_minimum_age() -> None:
    assert component("action_shaping", target_age=0, **PRUNE) == pytest.approx(-0.3 - 0.005)


def test_prune_of_a_hurting_seed_earns_a_bonus() -> None:
    assert component("action_shaping", contribution=-1.0, **PRUNE) == pytest.approx(0.15 - 0.005)


def test_prune_of_a_marginally_harmful_seed_earns_a_small_bonus() -> None:
    assert component("action_shaping", contribution=-0.2, **PRUNE) == pytest.approx(0.1 - 0.005)


def test_prune_of_a_good_seed_is_penalized_by_its_contribution() -> None:
    assert component("action_shaping", contribution=2.0, **PRUNE) == pytest.approx(-0.3 - 0.1 - 0.005)


def test_prune_of_a_good_seed_penalty_is_floored() -> None:
    assert component("action_shaping", contribution=20.0, **PRUNE) == pytest.approx(-0.9 - 0.005)


def test_prune_without_a_counterfactual_costs_only_the_prune_cost() -> None:
    assert component("action_shaping", **PRUNE) == pytest.approx(-0.005)


def test_set_alpha_target_costs_an_intervention_cost() -> None:
    assert component("action_shaping", op=LifecycleOp.SET_ALPHA_TARGET) == pytest.approx(-0.005)


def test_advance_out_of_training_is_penalized() -> None:
    assert component("action_shaping", op=LifecycleOp.ADVANCE) == pytest.approx(-0.1)


def test_advance_out_of_germinated_is_free() -> None:
    assert component("action_shaping", op=LifecycleOp.ADVANCE, target_stage=SeedStage.GERMINATED) == 0.0


def test_wait_has_no_action_shaping() -> None:
    assert component("action_shaping", contribution=3.0) == 0.0


# --- terminal ---------------------------------------------------------------------------------------------


def test_terminal_pays_accuracy_at_the_last_epoch() -> None:
    assert component("terminal", epoch=10, val_acc=70.0) == pytest.approx(3.5)


def test_terminal_pays_jan_bonus_per_contributing_fossil() -> None:
    assert component("fossil_terminal", epoch=10, n_contributing_fossils=2) == pytest.approx(6.0)


def test_terminal_is_zero_before_the_last_epoch() -> None:
    breakdown = compute_shaped_reward(inputs(epoch=9, n_contributing_fossils=2), CONFIG)
    assert (breakdown.components["terminal"], breakdown.components["fossil_terminal"]) == (0.0, 0.0)


def test_terminal_is_zero_when_disabled() -> None:
    config = RewardConfig(disable_terminal_reward=True)
    breakdown = compute_shaped_reward(inputs(epoch=10, n_contributing_fossils=2), config)
    assert (breakdown.components["terminal"], breakdown.components["fossil_terminal"]) == (0.0, 0.0)


# --- the whole ----------------------------------------------------------------------------------------------


def test_a_one_percent_constant_change_changes_the_reward() -> None:
    changed = RewardConfig(terminal_acc_weight=0.05 * 1.01)
    before = compute_shaped_reward(inputs(epoch=10), CONFIG).total
    after = compute_shaped_reward(inputs(epoch=10), changed).total
    assert after == pytest.approx(before * 1.01)


def test_components_sum_to_total_on_a_rich_epoch() -> None:
    layout = (
        slot(SeedStage.HOLDING, SeedStage.HOLDING, 3, 4, alpha_before=1.0, alpha_after=1.0, seed_params=30_000),
        slot(SeedStage.BLENDING, SeedStage.BLENDING, 1, 2, alpha_before=0.3, alpha_after=0.6, seed_params=9_000),
    )
    breakdown = compute_shaped_reward(
        inputs(
            op=LifecycleOp.SET_ALPHA_TARGET,
            target_stage=SeedStage.HOLDING,
            target_epochs_in_stage=3,
            contribution=3.0,
            acc_at_germination=58.0,
            total_improvement=0.5,
            interaction_sum=0.8,
            epoch=10,
            n_contributing_fossils=1,
            slots=layout,
        ),
        CONFIG,
    )
    assert sum(breakdown.components.values()) == breakdown.total
    assert all(value != 0.0 for name, value in breakdown.components.items() if name != "blending_warning")


OPTIONAL_PP = st.none() | st.floats(-20.0, 20.0, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(
    op=st.sampled_from(list(LifecycleOp)),
    stage=st.sampled_from(list(SeedStage)),
    contribution=OPTIONAL_PP,
    improvement=OPTIONAL_PP,
    acc_at_germination=st.none() | st.floats(0.0, 100.0),
    epoch=st.integers(1, 10),
)
def test_components_always_sum_to_total(
    op: LifecycleOp,
    stage: SeedStage,
    contribution: float | None,
    improvement: float | None,
    acc_at_germination: float | None,
    epoch: int,
) -> None:
    changed = inputs(
        op=op,
        target_stage=stage,
        contribution=contribution,
        total_improvement=improvement,
        acc_at_germination=acc_at_germination,
        epoch=epoch,
        slots=(slot(stage, stage, 1, 2, alpha_before=0.1, alpha_after=0.4, seed_params=5_000),),
    )
    breakdown = compute_shaped_reward(changed, CONFIG)
    assert breakdown.total == sum(breakdown.components.values())
    assert math.isfinite(breakdown.total)
