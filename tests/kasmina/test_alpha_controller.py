"""AlphaController: curve values, monotone ramps, snapping on the last tick, HOLD-only retargeting, tempos."""

from __future__ import annotations

import itertools
import math

import pytest

from esper.kasmina import AlphaController, curve_value
from esper.kasmina.slot import SeedSlot
from esper.leyline import TEMPO_EPOCHS, AlphaCurve, AlphaMode, BlueprintAction, GerminationStyle, TempoAction

CURVES = list(AlphaCurve)


@pytest.mark.parametrize(("t", "expected"), [(0.0, 0.0), (0.25, 0.25), (0.5, 0.5), (1.0, 1.0)])
def test_linear_curve_is_the_identity(t: float, expected: float) -> None:
    assert curve_value(AlphaCurve.LINEAR, t) == expected


@pytest.mark.parametrize(
    ("t", "expected"), [(0.0, 0.0), (0.25, 0.5 * (1 - math.cos(math.pi / 4))), (0.5, 0.5), (1.0, 1.0)]
)
def test_cosine_curve_is_half_one_minus_cos_pi_t(t: float, expected: float) -> None:
    assert curve_value(AlphaCurve.COSINE, t) == pytest.approx(expected, abs=1e-12)


def test_sigmoid_curve_is_a_rescaled_logistic_of_steepness_12() -> None:
    def logistic(x: float) -> float:
        return 1 / (1 + math.exp(-x))

    low, high = logistic(-6.0), logistic(6.0)
    expected = (logistic(12 * (0.25 - 0.5)) - low) / (high - low)
    assert curve_value(AlphaCurve.SIGMOID, 0.25) == pytest.approx(expected, abs=1e-12)
    assert curve_value(AlphaCurve.SIGMOID, 0.5) == pytest.approx(0.5, abs=1e-12)


@pytest.mark.parametrize("curve", CURVES, ids=[c.name for c in CURVES])
def test_every_curve_starts_at_zero_and_ends_at_one(curve: AlphaCurve) -> None:
    assert curve_value(curve, 0.0) == pytest.approx(0.0, abs=1e-12)
    assert curve_value(curve, 1.0) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("curve", CURVES, ids=[c.name for c in CURVES])
def test_every_curve_is_monotone(curve: AlphaCurve) -> None:
    values = [curve_value(curve, i / 100) for i in range(101)]
    assert all(b >= a for a, b in itertools.pairwise(values))


@pytest.mark.parametrize("curve", CURVES, ids=[c.name for c in CURVES])
@pytest.mark.parametrize("steps", [1, 3, 5, 8])
def test_ramp_up_is_monotone_and_snaps_to_target_on_the_last_tick(curve: AlphaCurve, steps: int) -> None:
    controller = AlphaController(0.0)
    controller.retarget(0.7, steps, curve)
    alphas = [controller.step() for _ in range(steps)]
    assert all(b >= a for a, b in zip([0.0, *alphas], alphas))
    assert alphas[-1] == 0.7  # exact, not approximately
    assert controller.mode is AlphaMode.HOLD


@pytest.mark.parametrize("curve", CURVES, ids=[c.name for c in CURVES])
def test_ramp_down_is_monotone_and_snaps_to_target(curve: AlphaCurve) -> None:
    controller = AlphaController(1.0)
    controller.retarget(0.0, 5, curve)
    assert controller.mode is AlphaMode.DOWN
    alphas = [controller.step() for _ in range(5)]
    assert all(b <= a for a, b in zip([1.0, *alphas], alphas))
    assert alphas[-1] == 0.0


def test_linear_ramp_values_at_each_tick() -> None:
    controller = AlphaController(0.0)
    controller.retarget(1.0, 4, AlphaCurve.LINEAR)
    assert [controller.step() for _ in range(4)] == [0.25, 0.5, 0.75, 1.0]


def test_cosine_ramp_is_half_way_at_half_time() -> None:
    controller = AlphaController(0.2)
    controller.retarget(1.0, 4, AlphaCurve.COSINE)
    controller.step()
    assert controller.step() == pytest.approx(0.6, abs=1e-12)


def test_retarget_is_refused_while_ramping() -> None:
    controller = AlphaController(0.0)
    controller.retarget(1.0, 3)
    controller.step()
    assert controller.retarget(0.5, 3) is False
    assert controller.target == 1.0


def test_retarget_is_accepted_again_from_hold() -> None:
    controller = AlphaController(0.0)
    controller.retarget(1.0, 1)
    controller.step()
    assert controller.retarget(0.5, 2) is True
    assert controller.mode is AlphaMode.DOWN


def test_retarget_with_zero_steps_jumps_and_holds() -> None:
    controller = AlphaController(0.0)
    assert controller.retarget(0.7, 0)
    assert (controller.alpha, controller.mode) == (0.7, AlphaMode.HOLD)


def test_hold_does_not_move() -> None:
    controller = AlphaController(0.4)
    assert [controller.step() for _ in range(3)] == [0.4, 0.4, 0.4]
    assert controller.velocity == 0.0


def test_negative_steps_are_rejected() -> None:
    with pytest.raises(ValueError, match="steps must be >= 0"):
        AlphaController(0.0).retarget(1.0, -1)


@pytest.mark.parametrize(("tempo", "ticks"), [(TempoAction.FAST, 3), (TempoAction.STANDARD, 5), (TempoAction.SLOW, 8)])
def test_tempo_sets_the_number_of_blending_ticks(tempo: TempoAction, ticks: int) -> None:
    assert TEMPO_EPOCHS[tempo] == ticks
    slot = SeedSlot("r0c1", 4)
    slot.germinate(
        BlueprintAction.NORM, "s", style=GerminationStyle.LINEAR_ADD, tempo=tempo, alpha_target=1.0, init_seed=0
    )
    slot.advance_stage()
    slot.step_epoch()
    slot.advance_stage()
    used = 0
    while slot.alpha_controller.mode is not AlphaMode.HOLD:
        slot.step_epoch()
        used += 1
    assert used == ticks
    assert slot.alpha == 1.0


def test_state_dict_round_trips_mid_ramp() -> None:
    controller = AlphaController(0.0)
    controller.retarget(1.0, 5, AlphaCurve.SIGMOID)
    controller.step()
    copy = AlphaController()
    copy.load_state_dict(controller.state_dict())
    assert [copy.step() for _ in range(4)] == [controller.step() for _ in range(4)]
