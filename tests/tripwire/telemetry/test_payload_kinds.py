"""One kind per difference: a payload field is measured as the trajectory measures a tensor, its values over the run
being its elements, so a logged number near zero that a regrouped sum moved by many of its own ULPs is drift (it was
a value change of 1212 ULPs), and a real change is a value change, on the payload as on the trajectory."""

from __future__ import annotations

import torch

from tripwire.bitwise.magnitude import DRIFT, VALUE_CHANGE, Magnitude, tensor_delta
from tripwire.outside.compare import Verdict, one_kind
from tripwire.telemetry.payloads import field_scales, payload_magnitude


def _values(last: float, scale: float = 1.0) -> dict[str, dict[str, torch.Tensor]]:
    """Three events of one type, a field `data.advantage` over them: the last one near zero."""
    rows = (scale, scale / 2, last)
    return {f"000{i} EPOCH@env0": {"data.advantage": torch.tensor(v, dtype=torch.float64)} for i, v in enumerate(rows)}


def _first(a: dict[str, dict[str, torch.Tensor]], b: dict[str, dict[str, torch.Tensor]]) -> Magnitude:
    delta = tensor_delta(
        "data.advantage", a["0002 EPOCH@env0"]["data.advantage"], b["0002 EPOCH@env0"]["data.advantage"]
    )
    assert delta is not None
    return Magnitude((delta,), VALUE_CHANGE)


def test_a_regrouping_near_zero_is_drift_against_the_fields_scale() -> None:
    a, b = _values(1e-7), _values(1e-7 + 3e-12)  # a few of 1e-7's own ULPs apart, nothing against the field's 1.0
    first = _first(a, b)
    assert first.deltas[0].scale_ulps > 256  # alone, the one number reads as a value change
    assert payload_magnitude(first, "0002 EPOCH@env0", a, b).kind == DRIFT


def test_a_real_change_is_a_value_change() -> None:
    a, b = _values(0.25), _values(0.25 * 1.01)
    assert payload_magnitude(_first(a, b), "0002 EPOCH@env0", a, b).kind == VALUE_CHANGE


def test_a_fields_scale_is_its_largest_magnitude_over_the_run_on_either_side() -> None:
    assert field_scales(_values(1e-7), _values(1e-7, scale=-3.0)) == {("EPOCH", "data.advantage"): 3.0}


def test_when_the_payload_and_the_trajectory_disagree_the_trajectorys_kind_stands() -> None:
    trajectory = Verdict("trajectory", "differs", "value change ...", kind=VALUE_CHANGE)
    payload = Verdict("payloads", "differs", "low-bit drift at event 3", kind=DRIFT)
    [told] = one_kind(trajectory, [payload])
    assert told.summary.endswith(
        "the trajectory's verdict stands: value change (it measures the state; a payload logs it)"
    )
    [same] = one_kind(Verdict("trajectory", "differs", "", kind=DRIFT), [payload])
    assert same == payload
