"""The train CLI: flags reach TrainingConfig, --config-json is strict, and bad input exits 2 in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from esper.data.datasets import VALID_DATASETS
from esper.leyline import TelemetryLevel
from esper.leyline.options import DatasetName
from esper.scripts import train
from esper.simic.rewards import RewardMode
from esper.simic.training import vectorized
from esper.simic.training.config import PRESETS, TrainingConfig, enum_choices
from esper.simic.training.trainer import TrainingResult
from esper.tolaria.engine import AmpMode


def config_for(*argv: str) -> TrainingConfig:
    args = train.build_parser().parse_args(list(argv))
    config = train.config_from_args(args)
    assert isinstance(config, TrainingConfig)
    return config


class RecordingRun:
    """Stands in for run_training: records what main() passes and returns an empty result."""

    def __init__(self) -> None:
        self.calls: list[tuple[TrainingConfig, str]] = []

    def __call__(self, config: TrainingConfig, *, controller: str, **_: Any) -> TrainingResult:
        self.calls.append((config, controller))
        return TrainingResult()


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> RecordingRun:
    recorder = RecordingRun()
    monkeypatch.setattr(vectorized, "run_training", recorder)
    return recorder


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """Exit code and stderr of main(): argparse errors exit, errors found after parsing return 2."""
    try:
        code = train.main(list(argv))
    except SystemExit as exited:
        code = int(str(exited.code))
    return code, capsys.readouterr().err


def assert_one_line_usage_error(code: int, err: str, *needles: str) -> None:
    assert code == 2
    assert err.startswith("train: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err


def test_episode_length_sets_max_epochs_and_the_chunk_length() -> None:
    config = config_for("ppo", "--episode-length", "7")

    assert (config.max_epochs, config.chunk_length) == (7, 7)


def test_loop_and_ppo_flags_reach_the_config() -> None:
    config = config_for(
        "ppo", "--rounds", "2", "--envs", "3", "--episode-length", "4", "--ppo-epochs", "5",
        "--memory-size", "6", "--entropy-anneal-episodes", "7", "--max-seeds", "9",
    )  # fmt: skip

    got = (config.n_episodes, config.n_envs, config.max_epochs, config.ppo_updates_per_batch)
    got += (config.lstm_hidden_dim, config.entropy_anneal_episodes, config.max_seeds)
    assert got == (2, 3, 4, 5, 6, 7, 9)


def test_preset_values_apply_and_explicit_flags_override_them() -> None:
    config = config_for("ppo", "--preset", "cifar_baseline_stable", "--rounds", "3")

    assert config.n_episodes == 3
    assert config.clip_ratio == PRESETS["cifar_baseline_stable"]["clip_ratio"]


def test_config_json_sits_between_the_preset_and_the_flags(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"n_envs": 6, "entropy_coef": 0.2, "slots": ["r0c0", "r0c2"]}))

    config = config_for("ppo", "--preset", "cifar_baseline", "--config-json", str(path), "--envs", "2")

    assert (config.n_envs, config.entropy_coef, config.slots) == (2, 0.2, ("r0c0", "r0c2"))


def test_main_hands_the_config_and_controller_to_the_run(
    recorded: RecordingRun, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = run_main(capsys, "heuristic", "--rounds", "2", "--envs", "3", "--episode-length", "4", "--quiet")

    assert code == 0
    [(config, controller)] = recorded.calls
    assert (controller, config.n_episodes, config.n_envs, config.max_epochs) == ("heuristic", 2, 3, 4)


def test_env_workers_reach_the_config_and_pin_one_torch_thread(
    recorded: RecordingRun, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    threads: list[int] = []
    monkeypatch.setattr(torch, "set_num_threads", threads.append)
    code, _ = run_main(capsys, "ppo", "--envs", "4", "--env-workers", "1", "--quiet")
    assert (code, threads) == (0, [])  # one worker: the thread count is the user's
    code, _ = run_main(capsys, "heuristic", "--envs", "4", "--env-workers", "2", "--quiet")
    assert (code, threads) == (0, [1])
    assert [config.env_workers for config, _ in recorded.calls] == [1, 2]
    code, err = run_main(capsys, "ppo", "--env-workers", "0")
    assert_one_line_usage_error(code, err, "--env-workers", "expected a positive integer, got 0")


@pytest.mark.parametrize(
    ("document", "needle"),
    [
        ({"n_envs": 2, "bogus_key": 1}, "unknown config key(s) 'bogus_key'"),
        ({"n_envs": "four"}, "'n_envs' must be an integer"),
        ({"lr": True}, "'lr' must be a number"),
        ({"slots": "r0c1"}, "'slots' must be a list of str"),
        ([1, 2], "config must be a JSON object"),
    ],
)
def test_config_json_errors_exit_2_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], document: Any, needle: str
) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(document))

    assert_one_line_usage_error(*run_main(capsys, "ppo", "--config-json", str(path)), needle)


def test_config_json_that_is_not_json_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.json"
    path.write_text("{not json")

    assert_one_line_usage_error(*run_main(capsys, "ppo", "--config-json", str(path)), "is not valid JSON")


def test_missing_config_json_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert_one_line_usage_error(
        *run_main(capsys, "ppo", "--config-json", str(tmp_path / "absent.json")), "cannot read --config-json"
    )


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["ppo", "--preset", "nope"], "invalid choice: 'nope' (choose from 'cifar_baseline'"),
        (["ppo", "--task", "nope", "--quiet"], "nope"),
        (["ppo", "--slots", "r9x9", "--quiet"], "r9x9"),
        (["ppo", "--device", "tpu", "--quiet"], "tpu"),
        (["ppo", "--reward-mode", "nope"], "invalid choice: 'nope'"),
        (["ppo", "--envs", "0"], "expected a positive integer, got 0"),
        (["heuristic", "--ppo-epochs", "2"], "unrecognized arguments"),
    ],
)
def test_bad_flags_exit_2_without_a_traceback(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    assert_one_line_usage_error(*run_main(capsys, *argv), needle)


ENUM_KEYS = ("amp", "dataset", "reward_mode", "telemetry_level")


@pytest.mark.parametrize("key", ENUM_KEYS)
def test_bad_choice_in_config_json_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({key: "nope"}))

    assert_one_line_usage_error(*run_main(capsys, "ppo", "--config-json", str(path)), "got 'nope'")


def test_the_cli_offers_exactly_the_enum_members_the_config_accepts() -> None:
    ppo = train.build_parser()._subparsers._group_actions[0].choices["ppo"]  # type: ignore[union-attr]
    offered = {action.dest: tuple(action.choices) for action in ppo._actions if action.choices}
    assert offered["reward_mode"] == enum_choices(RewardMode) == tuple(mode.value for mode in RewardMode)
    assert offered["amp"] == enum_choices(AmpMode)
    assert offered["telemetry_level"] == tuple(level.name.lower() for level in TelemetryLevel)
    assert "dataset" not in offered  # free text: a built-in name or package.module:function
    assert set(VALID_DATASETS) == set(enum_choices(DatasetName))


def _help_of(command: str) -> str:
    parser = train.build_parser()
    sub = parser._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]
    return str(sub.format_help())


@pytest.mark.parametrize("command", ["heuristic", "ppo"])
def test_every_declared_flag_is_offered_with_its_help_and_default(command: str) -> None:
    import dataclasses

    from esper.simic.training.config import option_of

    help_text = " ".join(_help_of(command).split())
    for spec in dataclasses.fields(TrainingConfig):
        meta = option_of(spec)
        if meta.flag is None:
            continue
        offered = meta.flag + " " in help_text or meta.flag + "," in help_text
        assert offered == (command == "ppo" or not meta.ppo_only), (command, meta.flag)
        if offered:  # argparse wraps lines (also at hyphens), so compare without whitespace
            assert "".join(meta.help.split()) in "".join(help_text.split()), meta.flag
    assert help_text.count("(default:") >= 20


def test_a_field_declared_once_becomes_a_flag_that_reaches_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """Adding a flag is one edit: the declaration. Shown by parsing a flag of every field type."""
    config = config_for(
        "ppo", "--envs", "3", "--lr", "0.001", "--amp", "bfloat16", "--no-gpu-preload", "--slots", "r0c0", "r0c2"
    )
    assert (config.n_envs, config.lr, config.amp, config.gpu_preload, config.slots) == (
        3,
        0.001,
        AmpMode.BF16,
        False,
        ("r0c0", "r0c2"),
    )


def test_the_summary_names_every_file_the_run_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tiny = ["--rounds", "1", "--envs", "1", "--train-samples", "50", "--val-samples", "25", "--batch-size", "25"]
    argv = ["heuristic", *tiny, "--episode-length", "2", "--telemetry-dir", str(tmp_path / "tel"), "--run-name", "r"]
    code = train.main([*argv, "--save", str(tmp_path / "ck.pt")])

    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert out[-1].startswith("done: 1 round(s), ")
    assert out[-1].endswith(
        f"; wrote events {tmp_path / 'tel' / 'r' / 'events.jsonl'}, checkpoint {tmp_path / 'ck.pt'}"
    )
    assert (tmp_path / "tel" / "r" / "events.jsonl").is_file() and (tmp_path / "ck.pt").is_file()


def test_the_summary_says_how_to_get_files_when_none_were_written() -> None:
    assert train.written_summary({}) == (
        "wrote no files (pass --telemetry-dir DIR for events, --save PATH for a checkpoint)"
    )


@pytest.mark.parametrize(("accuracy", "dataset_args", "noted"), [(100.0, (), True), (73.5, (), False)])
def test_a_perfect_accuracy_on_synthetic_data_is_explained(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    accuracy: float,
    dataset_args: tuple[str, ...],
    noted: bool,
) -> None:
    from esper.leyline import BatchSummary

    summary = BatchSummary(
        round_idx=0,
        episodes_completed=1,
        mean_reward=1.0,
        mean_final_accuracy=accuracy,
        rolling_accuracy=accuracy,
        env_final_accuracies=(accuracy,),
        env_total_rewards=(1.0,),
        rollbacks=0,
        train_time_s=1.0,
        env_epochs_per_s=5.0,
    )
    monkeypatch.setattr(vectorized, "run_training", lambda *a, **k: TrainingResult(rounds=[summary]))
    assert train.main(["heuristic", "--rounds", "1", *dataset_args]) == 0
    out = capsys.readouterr().out
    assert ("note: the synthetic task's classes separate fully" in out) == noted
