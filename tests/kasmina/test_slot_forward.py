"""SeedSlot forward: gradient isolation, the straight-through estimator at alpha 0, and the blend formulas."""

from __future__ import annotations

import pytest
import torch
from kasmina_helpers import CHANNELS, drive_to, make_slot

from esper.kasmina import SeedSlot
from esper.leyline import AlphaAlgorithm, GerminationStyle, SeedStage


def _features(requires_grad: bool = True) -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    return torch.randn(2, CHANNELS, 6, 6, generator=g).requires_grad_(requires_grad)


def _perturb_seed(slot: SeedSlot) -> None:
    """Fresh blueprints start near identity; move their weights so `s` differs clearly from `h`."""
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for p in slot.seed_parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.5)


def _seed_out(slot: SeedSlot, h: torch.Tensor) -> torch.Tensor:
    assert slot.seed is not None
    with torch.no_grad():
        out: torch.Tensor = slot.seed(h)
    return out


def test_dormant_slot_returns_its_input_object() -> None:
    slot = make_slot()
    h = _features()
    assert slot(h) is h


def test_germinated_seed_does_not_touch_the_forward() -> None:
    slot = make_slot()
    drive_to(slot, SeedStage.GERMINATED)
    h = _features()
    assert slot(h) is h


def test_training_at_alpha_zero_outputs_exactly_the_host_features() -> None:
    slot = make_slot()
    drive_to(slot, SeedStage.TRAINING)
    _perturb_seed(slot)
    h = _features()
    assert torch.equal(slot(h), h)


def test_training_at_alpha_zero_still_gives_the_seed_gradients() -> None:
    slot = make_slot()
    drive_to(slot, SeedStage.TRAINING)
    _perturb_seed(slot)
    slot(_features()).square().sum().backward()
    grads = [p.grad for p in slot.seed_parameters()]
    assert all(g is not None for g in grads)
    assert sum(float(g.abs().sum()) for g in grads if g is not None) > 0.0


def test_training_seed_reads_detached_host_features() -> None:
    slot = make_slot()
    drive_to(slot, SeedStage.TRAINING)
    _perturb_seed(slot)
    h = _features()
    slot(h).sum().backward()
    # Only the identity path of the STE reaches h: d(sum)/dh is exactly one everywhere.
    assert h.grad is not None
    assert torch.equal(h.grad, torch.ones_like(h))


def test_blending_seed_reads_detached_host_features() -> None:
    slot = make_slot()
    drive_to(slot, SeedStage.BLENDING)
    slot.step_epoch()  # alpha 1/3
    _perturb_seed(slot)
    h = _features()
    slot(h).sum().backward()
    # lerp(h, s(h.detach()), a): the gradient to h is (1 - a), nothing flows through the seed.
    assert h.grad is not None
    torch.testing.assert_close(h.grad, torch.full_like(h, 1.0 - slot.alpha), rtol=0, atol=1e-6)


def test_holding_seed_is_not_isolated() -> None:
    slot = make_slot()
    drive_to(slot, SeedStage.HOLDING)
    _perturb_seed(slot)
    h = _features()
    slot(h).sum().backward()
    assert not slot.isolate_gradients
    assert h.grad is not None
    assert not torch.allclose(h.grad, torch.zeros_like(h))


def _blending_slot(style: GerminationStyle) -> SeedSlot:
    slot = make_slot()
    drive_to(slot, SeedStage.BLENDING, style=style)
    slot.step_epoch()
    _perturb_seed(slot)
    return slot


def test_add_blend_is_lerp_of_host_and_seed() -> None:
    slot = _blending_slot(GerminationStyle.LINEAR_ADD)
    assert slot.state is not None and slot.state.algorithm is AlphaAlgorithm.ADD
    h = _features(requires_grad=False)
    a = slot.alpha
    s = _seed_out(slot, h)
    torch.testing.assert_close(slot(h), (1 - a) * h + a * s, rtol=1e-6, atol=1e-6)


def test_multiply_blend_modulates_the_host_by_tanh_of_the_seed_delta() -> None:
    slot = _blending_slot(GerminationStyle.LINEAR_MULTIPLY)
    assert slot.state is not None and slot.state.algorithm is AlphaAlgorithm.MULTIPLY
    h = _features(requires_grad=False)
    a = slot.alpha
    s = _seed_out(slot, h)
    torch.testing.assert_close(slot(h), h * (1 + a * torch.tanh(s - h)), rtol=1e-6, atol=1e-6)


def test_gate_blend_scales_alpha_by_the_learned_gate() -> None:
    slot = _blending_slot(GerminationStyle.GATED_GATE)
    assert slot.state is not None and slot.state.algorithm is AlphaAlgorithm.GATE
    assert slot.gate is not None
    h = _features(requires_grad=False)
    a = slot.alpha
    s = _seed_out(slot, h)
    with torch.no_grad():
        gate = torch.sigmoid(slot.gate.fc(h.mean(dim=(2, 3)))).view(-1, 1, 1, 1)
    expected = h + a * gate * (s - h)
    torch.testing.assert_close(slot(h), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("style", list(GerminationStyle), ids=[s.name for s in GerminationStyle])
def test_every_blend_returns_the_host_at_alpha_override_zero(style: GerminationStyle) -> None:
    slot = _blending_slot(style)
    h = _features(requires_grad=False)
    with torch.no_grad():
        out = slot(h, torch.zeros(h.shape[0], 1, 1, 1))
    assert torch.equal(out, h)


def test_alpha_override_replaces_the_scalar_alpha_per_sample() -> None:
    slot = _blending_slot(GerminationStyle.LINEAR_ADD)
    h = _features(requires_grad=False)
    s = _seed_out(slot, h)
    override = torch.tensor([0.0, 1.0]).view(2, 1, 1, 1)
    with torch.no_grad():
        out = slot(h, override)
    torch.testing.assert_close(out[0], h[0], rtol=0, atol=0)
    torch.testing.assert_close(out[1], s[1], rtol=1e-6, atol=1e-6)
