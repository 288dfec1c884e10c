"""TolariaGovernor: the three panic rules, the snapshot cadence and a bitwise rollback."""

from __future__ import annotations

import math

import pytest
import torch

from esper.kasmina import CNNHost, MorphogeneticModel
from esper.leyline import BlueprintAction, GerminationStyle, SeedStage, TempoAction, get_task_spec
from esper.tolaria.governor import SNAPSHOT_EVERY, TolariaGovernor
from lifecycle_helpers import fossilize_germinated

CHANCE = math.log(10)


def _model() -> MorphogeneticModel:
    return MorphogeneticModel(CNNHost(get_task_spec("cifar_baseline"), init_seed=0), ("r0c0", "r0c1"))


def _governor(history: list[float] | None = None) -> TolariaGovernor:
    governor = TolariaGovernor(_model(), num_classes=10)
    for loss in history or []:
        assert not governor.check_vital_signs(loss).panic
    return governor


def _germinate(model: MorphogeneticModel, slot_id: str, seed: int) -> None:
    model.slot(slot_id).germinate(
        BlueprintAction.CONV_SMALL, f"seed-{slot_id}", style=GerminationStyle.LINEAR_ADD, tempo=TempoAction.FAST,
        alpha_target=1.0, init_seed=seed,
    )  # fmt: skip


def _fossilize(model: MorphogeneticModel, slot_id: str, seed: int) -> None:
    _germinate(model, slot_id, seed)
    fossilize_germinated(model.slot(slot_id))


def _scramble(model: MorphogeneticModel) -> None:
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if tensor.is_floating_point():
                tensor.add_(1.0)
            else:
                tensor.add_(3)


@pytest.mark.parametrize("loss", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_loss_panics_immediately(loss: float) -> None:
    verdict = _governor().check_vital_signs(loss)
    assert verdict.panic
    assert "non-finite" in verdict.reason


def test_lobotomy_panics_when_loss_returns_to_chance_after_learning() -> None:
    governor = _governor([1.0, 1.1, 0.9])  # mean 1.0 < 0.6 ln 10 = 1.38
    verdict = governor.check_vital_signs(CHANCE + 0.05)
    assert verdict.panic
    assert "lobotomy" in verdict.reason


def test_chance_level_loss_is_no_lobotomy_while_still_at_chance() -> None:
    governor = _governor([CHANCE, CHANCE, CHANCE])
    assert not governor.check_vital_signs(CHANCE).panic


def test_lobotomy_needs_the_loss_within_tolerance_of_chance() -> None:
    governor = _governor([1.0, 1.0, 1.0])
    assert not governor.check_vital_signs(CHANCE * (1 + 0.07)).panic


def test_lobotomy_needs_some_history() -> None:
    governor = _governor([1.0, 1.0])
    assert not governor.check_vital_signs(CHANCE).panic


def test_statistical_rule_panics_on_the_third_consecutive_anomaly() -> None:
    governor = _governor([1.0] * 10)
    verdicts = [governor.check_vital_signs(50.0).panic for _ in range(3)]
    assert verdicts == [False, False, True]


def test_statistical_rule_resets_after_a_normal_epoch() -> None:
    governor = _governor([1.0] * 10)
    governor.check_vital_signs(50.0)
    governor.check_vital_signs(50.0)
    governor.check_vital_signs(1.0)
    assert [governor.check_vital_signs(50.0).panic for _ in range(2)] == [False, False]


def test_anomalous_losses_do_not_enter_the_window() -> None:
    governor = _governor([1.0] * 10)
    governor.check_vital_signs(50.0)
    governor.check_vital_signs(50.0)
    assert list(governor.history) == [1.0] * 10


def test_statistical_rule_needs_ten_samples() -> None:
    governor = _governor([1.0] * 9)
    assert [governor.check_vital_signs(50.0).panic for _ in range(3)] == [False, False, False]


def test_statistical_rule_needs_the_absolute_threshold() -> None:
    governor = _governor([0.5] * 10)
    assert [governor.check_vital_signs(11.0).panic for _ in range(3)] == [False, False, False]


def test_statistical_rule_needs_three_times_the_mean() -> None:
    governor = _governor([5.0, 5.1] * 5)  # mean 5.05, sigma 0.05: 13 is above 12 and mean + 6 sigma, not 3 x mean
    assert [governor.check_vital_signs(13.0).panic for _ in range(3)] == [False, False, False]


def test_statistical_rule_needs_six_sigma() -> None:
    governor = _governor([1.0, 9.0] * 5)  # mean 5, sigma 4: 20 is above 12 and 3 x mean, not mean + 6 sigma = 29
    assert [governor.check_vital_signs(20.0).panic for _ in range(3)] == [False, False, False]


def test_the_window_keeps_the_last_twenty_losses() -> None:
    governor = _governor([float(i) / 100 for i in range(25)])
    assert list(governor.history) == [float(i) / 100 for i in range(5, 25)]


@pytest.mark.parametrize(("epoch", "taken"), [(1, False), (4, False), (5, True), (7, False), (10, True)])
def test_maybe_snapshot_takes_one_every_five_epochs(epoch: int, taken: bool) -> None:
    assert SNAPSHOT_EVERY == 5
    governor = _governor()
    governor.maybe_snapshot(epoch)
    assert governor.snapshot_epoch == (epoch if taken else 0)


def test_snapshot_stays_on_the_model_device_and_is_detached_from_the_model() -> None:
    governor = _governor()
    _scramble(governor.model)
    device = next(governor.model.parameters()).device
    assert all(t.device == device for t in governor._snapshot.values())
    state = governor.model.state_dict()
    assert any(not torch.equal(governor._snapshot[k], state[k]) for k in governor._snapshot)


def test_rollback_restores_host_and_fossilized_seed_bitwise() -> None:
    governor = _governor()
    model = governor.model
    _fossilize(model, "r0c0", seed=1)
    governor.snapshot(3)
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    _scramble(model)
    report = governor.execute_rollback(epoch=4, reason="test")
    restored = model.state_dict()
    assert set(restored) == set(expected)
    for key, tensor in expected.items():
        assert torch.equal(restored[key], tensor), key
    assert report.snapshot_epoch == 3
    assert any(key.startswith("seed_slots.r0c0.") for key in expected)


def test_rollback_prunes_live_seeds_and_keeps_fossilized_ones() -> None:
    governor = _governor()
    model = governor.model
    _fossilize(model, "r0c0", seed=1)
    _germinate(model, "r0c1", seed=2)
    model.slot("r0c1").advance_stage()
    governor.snapshot(5)
    report = governor.execute_rollback(epoch=6, reason="test")
    assert report.pruned_seed_ids == ("seed-r0c1",)
    assert model.slot("r0c1").stage is SeedStage.PRUNED
    assert model.slot("r0c1").state is not None and model.slot("r0c1").state.auto_pruned
    assert model.slot("r0c0").stage is SeedStage.FOSSILIZED
    assert governor.rollbacks == 1


def test_snapshot_excludes_live_seed_weights() -> None:
    governor = _governor()
    _germinate(governor.model, "r0c1", seed=2)
    governor.snapshot(5)
    assert not any(key.startswith("seed_slots.r0c1.") for key in governor._snapshot)
