"""`python -m esper.scripts.train heuristic` end to end, as a subprocess: events.jsonl contents and usage errors."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from esper.leyline import SeedStage, is_valid_transition

ENVS = 2
EPOCHS = 5
SLOTS = ("r0c0", "r0c1")
SMALL = ["--train-samples", "200", "--val-samples", "100", "--batch-size", "50"]


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, "-m", "esper.scripts.train", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def heuristic_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path_factory.mktemp("cli") / "out"
    result = run_cli(
        "heuristic", "--task", "cifar_baseline", "--rounds", "1", "--envs", str(ENVS), "--episode-length",
        str(EPOCHS), "--telemetry-dir", str(out), "--slots", *SLOTS, *SMALL,
    )  # fmt: skip
    return result, out


@pytest.fixture(scope="module")
def events(heuristic_run: tuple[subprocess.CompletedProcess[str], Path]) -> list[dict[str, Any]]:
    result, out = heuristic_run
    assert result.returncode == 0, result.stderr
    (events_file,) = out.glob("*/events.jsonl")
    return [json.loads(line) for line in events_file.read_text().splitlines()]


def test_heuristic_run_exits_zero_and_writes_one_run_directory(
    heuristic_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, out = heuristic_run
    assert result.returncode == 0, result.stderr
    assert len([p for p in out.iterdir() if p.is_dir()]) == 1
    assert "Traceback" not in result.stderr


def test_epoch_completed_once_per_env_per_epoch(events: list[dict[str, Any]]) -> None:
    keys = Counter((e["env_id"], e["epoch"]) for e in events if e["event_type"] == "EPOCH_COMPLETED")
    assert keys == Counter({(env, epoch): 1 for env in range(ENVS) for epoch in range(1, EPOCHS + 1)})


def test_training_started_once(events: list[dict[str, Any]]) -> None:
    assert [e["event_type"] for e in events].count("TRAINING_STARTED") == 1


def test_the_heuristic_exercised_the_lifecycle(events: list[dict[str, Any]]) -> None:
    """Guards the consistency checks below against a run in which nothing happened."""
    types = Counter(e["event_type"] for e in events)
    assert types["SEED_GERMINATED"] >= ENVS
    assert types["SEED_STAGE_CHANGED"] >= ENVS


def _lifecycle_by_slot(events: list[dict[str, Any]]) -> dict[tuple[int, str], list[dict[str, Any]]]:
    by_slot: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        if event["event_type"] in ("SEED_GERMINATED", "SEED_STAGE_CHANGED"):
            by_slot[(event["env_id"], event["slot_id"])].append(event)
    return by_slot


def test_every_lifecycle_event_names_its_env_and_slot(events: list[dict[str, Any]]) -> None:
    lifecycle = [e for e in events if e["event_type"].startswith("SEED_")]
    assert lifecycle
    assert all(0 <= e["env_id"] < ENVS and e["slot_id"] in SLOTS and e["seed_id"] for e in lifecycle)


def test_stage_changes_chain_into_each_other_per_slot(events: list[dict[str, Any]]) -> None:
    for (env_id, slot_id), history in _lifecycle_by_slot(events).items():
        stage = SeedStage.DORMANT
        for event in history:
            if event["event_type"] == "SEED_GERMINATED":
                assert stage is SeedStage.DORMANT, f"env {env_id} {slot_id}: germinated while {stage.name}"
                stage = SeedStage.GERMINATED
                continue
            src, dst = SeedStage[event["data"]["from"]], SeedStage[event["data"]["to"]]
            assert src is stage, f"env {env_id} {slot_id}: {src.name}->{dst.name} while in {stage.name}"
            assert is_valid_transition(src, dst)
            stage = dst


def test_epoch_completed_stages_match_the_lifecycle_events(events: list[dict[str, Any]]) -> None:
    """Every stage a slot reports at the end of an epoch is explained by the lifecycle events before it."""
    stage: dict[tuple[int, str], str] = defaultdict(lambda: "DORMANT")
    checked = 0
    for event in events:
        key = (event["env_id"], event["slot_id"])
        if event["event_type"] == "SEED_GERMINATED":
            stage[key] = "GERMINATED"
        elif event["event_type"] == "SEED_STAGE_CHANGED":
            stage[key] = event["data"]["to"]
        elif event["event_type"] == "EPOCH_COMPLETED":
            for slot_id, seed in event["data"]["seeds"].items():
                assert seed["stage"] == stage[(event["env_id"], slot_id)], (event["env_id"], event["epoch"], slot_id)
                checked += 1
    assert checked == ENVS * EPOCHS * len(SLOTS)


def test_off_a_terminal_progress_is_one_plain_line_per_round_on_stderr(
    heuristic_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, _ = heuristic_run
    [line] = result.stderr.splitlines()
    total = ENVS * EPOCHS
    assert re.fullmatch(
        rf"round 1/1 done: {total}/{total} env-epochs, mean episode reward -?[0-9.]+, accuracy [0-9.]+%, "
        r"about 0s left",
        line,
    ), line
    assert "\x1b" not in result.stderr + result.stdout  # no control characters off a terminal
    assert result.stdout.startswith("done: 1 round(s)")


# One subprocess per kind of bad input (each pays ~2-4 s of torch import); the variants below run in-process.
BAD_INPUT: dict[str, tuple[list[str], str]] = {
    "unknown-task": (["--task", "cifar_nope"], "unknown task 'cifar_nope'"),
    "slot-early": (["--slots", "early"], "early"),
    "device-tpu": (["--device", "tpu"], "tpu"),
    "unwritable-telemetry-dir": (["--telemetry-dir", "{blocker}/out"], "--telemetry-dir"),
}
MORE_BAD_INPUT: dict[str, tuple[list[str], str]] = {
    "slot-r9c9": (["--slots", "r9c9"], "r9c9"),
    "device-cuda7": (["--device", "cuda:7"], "cuda:7"),
    "slot-r0c9": (["--slots", "r0c9"], "r0c9"),
}


@pytest.fixture(scope="module")
def usage_errors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str]]:
    """Every bad-input command, started at once (each pays ~2 s of torch import) and collected."""
    work = tmp_path_factory.mktemp("usage")
    blocker = work / "a-file"
    blocker.write_text("")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    base = [sys.executable, "-m", "esper.scripts.train", "heuristic", "--rounds", "1", "--envs", "1"]
    running = {
        name: subprocess.Popen(
            [*base, "--episode-length", "1", *SMALL, *(a.format(blocker=blocker) for a in args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=work,
        )
        for name, (args, _) in BAD_INPUT.items()
    }
    results = {}
    for name, process in running.items():
        _, stderr = process.communicate(timeout=300)
        results[name] = (process.returncode, stderr)
    return results


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_a_one_line_error_with_exit_code_2(case: str, usage_errors: dict[str, tuple[int, str]]) -> None:
    returncode, stderr = usage_errors[case]
    assert returncode == 2, stderr
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("train: error:")
    assert BAD_INPUT[case][1] in lines[0]


@pytest.mark.parametrize("case", list(MORE_BAD_INPUT))
def test_more_bad_input_is_a_one_line_error_with_exit_code_2(case: str, capsys: pytest.CaptureFixture[str]) -> None:
    from esper.scripts.train import main

    args, needle = MORE_BAD_INPUT[case]
    returncode = main(["heuristic", "--rounds", "1", "--envs", "1", "--episode-length", "1", *SMALL, *args])
    captured = capsys.readouterr()
    assert returncode == 2
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("train: error:")
    assert needle in lines[0]


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_display_draws_on_a_terminal_stderr_and_leaves_stdout_clean(monkeypatch: pytest.MonkeyPatch) -> None:
    from esper.simic.training.progress import EpochProgress, ProgressDisplay

    terminal, stdout = FakeTerminal(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(sys, "stdout", stdout)
    display = ProgressDisplay(rounds=2, start_round=0, env_epochs=12, enabled=True)
    for epoch in range(1, 4):
        display.advance(EpochProgress(0, epoch, 3, n_envs=2, mean_accuracy=41.5, mean_reward=1.25))
    display.close()  # the last refresh draws the final state, then the transient bar is cleared
    drawn = terminal.getvalue()
    assert "round 1/2" in drawn and "6/12" in drawn and "reward 1.25" in drawn and "accuracy 41.5%" in drawn
    assert stdout.getvalue() == ""


def test_progress_display_stays_silent_when_disabled_even_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from esper.simic.training.progress import EpochProgress, ProgressDisplay

    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    display = ProgressDisplay(rounds=1, start_round=0, env_epochs=3, enabled=False)
    display.advance(EpochProgress(0, 3, 3, n_envs=1, mean_accuracy=10.0, mean_reward=0.0))
    display.close()
    assert terminal.getvalue() == ""
