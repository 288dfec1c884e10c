"""Kept values are stored once per distinct tensor, shared across results, and read back lazily and exactly."""

from __future__ import annotations

from pathlib import Path

import torch

from tripwire.bitwise.trajectory import TrajectoryRecorder, compare_trajectories
from tripwire.bitwise.values import load_values, save_values


def recorder(scale: float) -> TrajectoryRecorder:
    rec = TrajectoryRecorder(keep_values=True)
    weights = torch.arange(6.0).reshape(2, 3)
    rec.record("init", {"net.w": weights, "opt.param": weights.clone()})  # one tensor, seen twice
    rec.record("step", {"net.w": weights * scale, "loss": 0.5 * scale})
    return rec


def test_each_distinct_tensor_is_stored_once_across_results(tmp_path: Path) -> None:
    store = tmp_path / "tensors"
    for name, scale in (("a", 1.0), ("b", 1.0), ("c", 2.0)):
        rec = recorder(scale)
        save_values(tmp_path / name / "values.pt", rec.values, dict(rec.trajectory.checkpoints), store)
    stored = sorted(path.name for path in store.rglob("*.pt"))
    # a and b are identical; init's two names and a's unscaled step weights are one tensor; a's loss is one more;
    # c adds only its own step weights and loss
    assert len(stored) == 1 + 1 + 2
    values = load_values(tmp_path / "c" / "values.pt")
    assert torch.equal(values["step"]["net.w"], torch.arange(6.0).reshape(2, 3) * 2.0)
    assert values["step"]["loss"].item() == 1.0


def test_a_self_contained_file_dedupes_and_compares_with_magnitude(tmp_path: Path) -> None:
    a, b = recorder(1.0), recorder(1.0 + 2**-20)
    save_values(tmp_path / "a.pt", a.values, dict(a.trajectory.checkpoints))
    save_values(tmp_path / "b.pt", b.values, dict(b.trajectory.checkpoints))
    report = compare_trajectories(
        a.trajectory,
        b.trajectory,
        expected_values=load_values(tmp_path / "a.pt"),
        actual_values=load_values(tmp_path / "b.pt"),
    )
    assert report.first_name == "step" and report.magnitude is not None
    assert report.magnitude.max_abs == 5.0 * 2**-20  # the largest weight, 5.0, moved by 5 * 2^-20
