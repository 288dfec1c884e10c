"""tripwire.bitwise.trajectory: checkpoints compare bitwise and a divergence names the first checkpoint and tensor."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tripwire.bitwise.trajectory import Trajectory, TrajectoryRecorder, compare_trajectories
from tripwire.common.errors import GoldenFileError, TrajectoryDivergence, TripwireError


def record(weights: list[torch.Tensor], rewards: list[float]) -> Trajectory:
    recorder = TrajectoryRecorder(context={"device": "cpu"})
    for epoch, (weight, reward) in enumerate(zip(weights, rewards), start=1):
        recorder.record(f"e{epoch}/train", {"model": {"w": weight, "b": torch.zeros(2)}})
        recorder.record(f"e{epoch}/reward", reward)
    return recorder.trajectory


def test_identical_runs_compare_equal() -> None:
    weights = [torch.arange(4.0), torch.ones(4)]
    report = compare_trajectories(record(weights, [0.5, 1.0]), record([w.clone() for w in weights], [0.5, 1.0]))
    assert report.ok and report.format() == "trajectory identical over 4 checkpoints"


def test_first_diverging_checkpoint_and_tensor_are_named() -> None:
    golden = record([torch.arange(4.0), torch.ones(4)], [0.5, 1.0])
    changed = record([torch.arange(4.0), torch.ones(4) * 2], [0.5, 1.5])
    report = compare_trajectories(golden, changed)
    assert (report.first_index, report.first_name, report.first_tensor) == (3, "e2/train", "model.w")
    assert report.later_divergences == 1
    assert report.format().startswith("trajectory diverged at checkpoint 3 of 4, 'e2/train' (1 later")
    with pytest.raises(TrajectoryDivergence, match=r"first tensor: 'model\.w'"):
        report.raise_if_diverged()


def test_negative_zero_is_a_bitwise_change() -> None:
    report = compare_trajectories(record([torch.zeros(2)], [0.0]), record([torch.tensor([0.0, -0.0])], [0.0]))
    assert report.first_name == "e1/train" and report.first_tensor == "model.w"


def test_missing_and_reordered_checkpoints_are_reported_as_structure() -> None:
    golden = record([torch.ones(1), torch.ones(1)], [0.0, 0.0])
    shorter = Trajectory(golden.checkpoints[:3])
    assert compare_trajectories(golden, shorter).structure == "checkpoint 'e2/reward' is missing now"
    swapped = Trajectory([golden.checkpoints[1], golden.checkpoints[0], *golden.checkpoints[2:]])
    assert (
        "golden has checkpoint 'e1/train' here, the run recorded 'e1/reward'"
        in compare_trajectories(golden, swapped).format()
    )


def test_a_checkpoint_name_can_be_recorded_once() -> None:
    recorder = TrajectoryRecorder()
    recorder.record("e1/train", torch.ones(1))
    with pytest.raises(TripwireError, match="'e1/train' recorded twice"):
        recorder.record("e1/train", torch.ones(1))


def test_saved_golden_reloads_and_matches_the_full_digests(tmp_path: Path) -> None:
    trajectory = record([torch.randn(8, generator=torch.Generator().manual_seed(0))], [0.25])
    loaded = Trajectory.load(trajectory.save(tmp_path / "golden.json"))
    assert loaded.context == {"device": "cpu"} and loaded.names() == ["e1/train", "e1/reward"]
    assert compare_trajectories(loaded, trajectory).ok


def test_malformed_golden_names_its_path(tmp_path: Path) -> None:
    path = tmp_path / "golden.json"
    path.write_text('{"format": "something-else"}', encoding="utf-8")
    with pytest.raises(GoldenFileError, match=r"golden\.json: not a trajectory golden"):
        Trajectory.load(path)


def test_trajectory_fixture_is_stamped_with_this_process_context(trajectory: TrajectoryRecorder) -> None:
    trajectory.record("e1/train", torch.ones(2))
    assert trajectory.trajectory.context["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert trajectory.trajectory.names() == ["e1/train"]


def test_float64_values_are_measured_at_float32_resolution() -> None:
    from tripwire.bitwise.magnitude import DRIFT, VALUE_CHANGE, classify, tensor_delta

    value = torch.tensor(0.7071067690849304, dtype=torch.float32)  # a float32 read with .item()
    neighbour = torch.nextafter(value, torch.tensor(1.0))
    a, b = (torch.tensor(x.item(), dtype=torch.float64) for x in (value, neighbour))
    delta = tensor_delta("return.gradient_cv", a, b)
    assert delta is not None and delta.ulps == 1.0 and classify([delta]) == DRIFT
    derived = tensor_delta("x", torch.tensor(0.9, dtype=torch.float64), torch.tensor(0.9 + 1e-7, dtype=torch.float64))
    assert derived is not None and derived.ulps <= 2 and classify([derived]) == DRIFT  # float32-level noise
    lr = tensor_delta("lr", torch.tensor(0.1, dtype=torch.float64), torch.tensor(0.11, dtype=torch.float64))
    assert lr is not None and classify([lr]) == VALUE_CHANGE


def _optimizer_run(beta2: float, keep_values: bool) -> Trajectory:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, beta2))
    recorder = TrajectoryRecorder(keep_values=keep_values)
    for step in range(2):
        model(torch.ones(4, 3)).square().sum().backward()
        optimizer.step()
        recorder.record(f"step{step}", {"optimizer": optimizer, "model": model})
    return recorder.trajectory


@pytest.mark.parametrize("keep_values", [True, False])
def test_a_changed_setting_is_named_with_its_values_among_the_tensors_it_moved(keep_values: bool) -> None:
    """A changed `betas` moves every moment and parameter of the checkpoint, and the first tensor named is a
    parameter: the plain values that differ (the setting) get their own line, with both values when kept."""
    report = compare_trajectories(_optimizer_run(0.99, keep_values), _optimizer_run(0.98, keep_values))
    assert report.first_name == "step0" and not report.first_tensor.endswith("betas")
    betas = "optimizer.state_dict.param_groups.0.betas"
    assert report.plain == ((betas, "[0.9, 0.99]", "[0.9, 0.98]") if keep_values else (betas, "", ""),)
    shown = f"{betas} [0.9, 0.99] -> [0.9, 0.98]" if keep_values else betas
    assert f"  plain values that differ: {shown}" in report.format().splitlines()


def test_tensors_alone_differing_name_no_plain_value() -> None:
    report = compare_trajectories(record([torch.ones(4)], [0.5]), record([torch.ones(4) * 2], [0.5]))
    assert report.plain == () and "plain values" not in report.format()
