"""Resume is exact: 2 rounds in one go == 1 round, --save, then --resume for 1 more round (weights and events).

Also: a checkpoint with another env count or slot layout is refused with a one-line error (exit 2 via the CLI);
checkpoints are written atomically and load with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from esper.leyline import AnalyticsKind, TelemetryEventType
from esper.scripts import train
from esper.simic.training import checkpoint as checkpoint_module
from esper.simic.training.checkpoint import CheckpointError, CheckpointLayout, load_checkpoint, save_checkpoint
from esper.simic.training.checkpoint_schema import Plain
from esper.simic.training.config import TrainingConfig
from esper.simic.training.trainer import TrainingResult
from esper.simic.training.vectorized import run_training
from run_helpers import TINY_PPO, comparable, recorded_run


def run(config: dict[str, Any]) -> tuple[TrainingResult, list[dict[str, Any]]]:
    result, events = recorded_run(config)
    return result, [comparable(event) for event in events]


def after_round_zero(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events after round 0's last one (its throughput snapshot)."""
    ends = [
        i for i, e in enumerate(events) if e["data"].get("kind") == AnalyticsKind.THROUGHPUT.value and e["epoch"] == 0
    ]
    assert len(ends) == 1, "round 0 must end with exactly one throughput snapshot"
    return events[ends[0] + 1 :]


@pytest.fixture(scope="module")
def straight_and_resumed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    ckpt = tmp_path_factory.mktemp("resume") / "run.pt"
    straight, straight_events = run(TINY_PPO)
    run({**TINY_PPO, "n_episodes": 1, "save_path": str(ckpt)})
    resumed, resumed_events = run({**TINY_PPO, "resume_path": str(ckpt)})
    return {
        "ckpt": ckpt,
        "straight": straight,
        "straight_events": straight_events,
        "resumed": resumed,
        "resumed_events": resumed_events,
    }


def test_resumed_run_ends_with_bitwise_identical_policy_and_host_weights(straight_and_resumed: dict[str, Any]) -> None:
    straight: TrainingResult = straight_and_resumed["straight"]
    resumed: TrainingResult = straight_and_resumed["resumed"]

    assert straight.final_weights.keys() == resumed.final_weights.keys()
    differing = [
        n for n in straight.final_weights if not torch.equal(straight.final_weights[n], resumed.final_weights[n])
    ]
    assert differing == []


def test_resumed_run_emits_the_same_events_after_the_resume_point(straight_and_resumed: dict[str, Any]) -> None:
    resumed_events = straight_and_resumed["resumed_events"]
    loaded = [i for i, e in enumerate(resumed_events) if e["event_type"] == TelemetryEventType.CHECKPOINT_LOADED.name]

    assert loaded == [1], "CHECKPOINT_LOADED must come right after TRAINING_STARTED"
    assert resumed_events[loaded[0] + 1 :] == after_round_zero(straight_and_resumed["straight_events"])


def test_checkpoint_loaded_names_the_rounds_already_done(straight_and_resumed: dict[str, Any]) -> None:
    loaded = straight_and_resumed["resumed_events"][1]

    ckpt = str(straight_and_resumed["ckpt"])
    # previous_events is None: the first run recorded its events in memory, not in an events.jsonl
    assert loaded["data"] == {"path": ckpt, "rounds_completed": 1, "previous_events": None}


def test_resumed_run_reports_only_the_rounds_it_ran(straight_and_resumed: dict[str, Any]) -> None:
    straight: TrainingResult = straight_and_resumed["straight"]
    resumed: TrainingResult = straight_and_resumed["resumed"]

    assert [r.round_idx for r in resumed.rounds] == [1]
    assert resumed.rounds[0].env_total_rewards == straight.rounds[1].env_total_rewards


def test_checkpoint_loads_with_weights_only(straight_and_resumed: dict[str, Any]) -> None:
    payload = torch.load(straight_and_resumed["ckpt"], weights_only=True)

    assert payload["rounds_completed"] == 1
    assert payload["n_envs"] == TINY_PPO["n_envs"]


@pytest.mark.parametrize("change", [{"n_envs": 3}, {"slots": ["r0c0", "r0c1"]}])
def test_resume_with_a_different_layout_is_refused_in_one_line(
    straight_and_resumed: dict[str, Any], change: dict[str, Any]
) -> None:
    with pytest.raises(CheckpointError) as caught:
        run_training(TrainingConfig.from_dict({**TINY_PPO, **change, "resume_path": str(straight_and_resumed["ckpt"])}))

    assert "\n" not in str(caught.value)
    assert "resume with the same --envs, --slots and --task" in str(caught.value)


@pytest.mark.parametrize("change", [["--envs", "3"], ["--slots", "r0c0", "r0c1"]])
def test_cli_resume_with_another_layout_exits_2_without_traceback(
    straight_and_resumed: dict[str, Any], capsys: pytest.CaptureFixture[str], change: list[str]
) -> None:
    argv = ["ppo", "--task", "cifar_baseline", "--envs", "2", "--rounds", "2", "--episode-length", "3", *change]
    argv += ["--resume", str(straight_and_resumed["ckpt"]), "--quiet", "--telemetry-level", "off"]

    code = train.main(argv)

    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("train: error: checkpoint ") and err.count("\n") == 1
    assert "Traceback" not in err


LAYOUT = CheckpointLayout(n_envs=1, slot_ids=("r0c1",), task="cifar_baseline", controller="ppo")


def test_a_crash_while_saving_keeps_the_previous_checkpoint_and_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "ckpt.pt"
    save_checkpoint(target, layout=LAYOUT, rounds_completed=1, state={"w": torch.ones(2)})

    def crash(obj: object, handle: Any) -> None:
        handle.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint_module.torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(target, layout=LAYOUT, rounds_completed=2, state={"w": torch.zeros(2)})
    monkeypatch.undo()

    rounds, state = load_checkpoint(target, layout=LAYOUT, state=Plain())
    assert rounds == 1 and torch.equal(state["w"], torch.ones(2))
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]


def test_a_checkpoint_holding_arbitrary_objects_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "evil.pt"
    torch.save({"format": "esper-checkpoint", "payload": Path("x")}, target)

    with pytest.raises(CheckpointError, match="weights_only loading refuses"):
        load_checkpoint(target, layout=LAYOUT, state=Plain())


def test_a_truncated_checkpoint_is_refused_in_one_line(tmp_path: Path) -> None:
    target = tmp_path / "cut.pt"
    save_checkpoint(target, layout=LAYOUT, rounds_completed=1, state={})
    target.write_bytes(target.read_bytes()[:40])

    with pytest.raises(CheckpointError, match="truncated or corrupted") as caught:
        load_checkpoint(target, layout=LAYOUT, state=Plain())
    assert "\n" not in str(caught.value)
