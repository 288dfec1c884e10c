"""`torchrun ... -m esper.scripts.train` when a rank fails or the launcher is signalled: every rank stops, no event is
lost, and the merged events end with one TRAINING_ENDED that names the failed rank (or the agreed stop)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from distributed_scenario import ROOT, torchrun_command

from esper.nissa.merge import read_rank_file

SMALL = (
    *("ppo", "--preset", "cifar_baseline", "--task", "cifar_baseline", "--envs", "2", "--slots", "r0c0"),
    *("--train-samples", "25", "--val-samples", "25", "--batch-size", "25", "--quiet"),
)
TIMEOUT_S = 240


def start_cli(tmp_path: Path, name: str, *argv: str) -> tuple[subprocess.Popen[str], Path]:
    """The real CLI on two torchrun ranks; returns the launcher and the run folder."""
    telemetry = ["--telemetry-dir", str(tmp_path / "telemetry"), "--run-name", name]
    command = torchrun_command(2, ["-m", "esper.scripts.train", *SMALL, *argv, *telemetry])
    env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
    launcher = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return launcher, tmp_path / "telemetry" / name


def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("failures")


@pytest.fixture(scope="module")
def stopped_launch(workdir: Path) -> tuple[subprocess.Popen[str], Path]:
    """A long run to be stopped by a signal, started beside the failing ones."""
    return start_cli(workdir, "stopped", "--rounds", "50", "--episode-length", "4", "--save", str(workdir / "run.pt"))


@pytest.fixture(scope="module")
def failed_runs(workdir: Path, stopped_launch: object) -> dict[int, tuple[int, str, Path]]:
    """Rank 1, then rank 0 (the one that writes the checkpoint and merges), raising at epoch 2 of round 1."""
    launches = {}
    for rank in (0, 1):
        fault = workdir / f"fail{rank}.json"
        fault.write_text(json.dumps({"inject_rank_failure": [rank, 2]}), encoding="utf-8")
        argv = ("--rounds", "1", "--episode-length", "3", "--config-json", str(fault))
        launches[rank] = start_cli(workdir, f"fail{rank}", *argv)
    results = {}
    for rank, (launcher, folder) in launches.items():
        output, _ = launcher.communicate(timeout=TIMEOUT_S)
        results[rank] = (launcher.returncode, output, folder)
    return results


@pytest.mark.parametrize("failed", [1, 0], ids=["rank 1 fails", "rank 0 fails"])
def test_the_merged_events_end_with_training_ended_naming_the_failed_rank(
    failed: int, failed_runs: dict[int, tuple[int, str, Path]]
) -> None:
    code, output, folder = failed_runs[failed]
    assert code != 0, output[-2000:]
    merged = events(folder / "events.jsonl")
    end = merged[-1]
    assert end["event_type"] == "TRAINING_ENDED", output[-2000:]
    assert end["data"]["outcome"] == "failed" and end["data"]["failed_rank"] == failed
    assert f"InjectedRankFailure: injected failure of rank {failed} at epoch 2" in end["data"]["cause"]
    assert sum(event["event_type"] == "TRAINING_ENDED" for event in merged) == 1
    survivor = 1 - failed
    assert f"train: error: rank {failed} failed: InjectedRankFailure" in output  # the survivor's one line
    survivor_end = read_rank_file(folder / f"events.rank{survivor}.jsonl")[-1]
    assert survivor_end["data"]["failed_rank"] == failed  # found out through the store, not told by the merge


@pytest.mark.parametrize("failed", [1, 0], ids=["rank 1 fails", "rank 0 fails"])
def test_no_event_any_rank_wrote_is_lost_from_the_merged_stream(
    failed: int, failed_runs: dict[int, tuple[int, str, Path]]
) -> None:
    _, _, folder = failed_runs[failed]
    merged = events(folder / "events.jsonl")
    merged_ids = {event["event_id"] for event in merged}
    per_rank = [read_rank_file(folder / f"events.rank{rank}.jsonl") for rank in (0, 1)]
    for rank_events in per_rank:
        for event in rank_events:
            if event["env_id"] >= 0:
                assert event["event_id"] in merged_ids, event
    # run-level events (every rank emits its copy) are kept once per merge key
    keys = {tuple(e["order"]) for rank_events in per_rank for e in rank_events if e["env_id"] < 0}
    assert len([e for e in merged if e["env_id"] < 0]) == len(keys)
    assert not any("order" in event for event in merged)  # the merged view drops the merge key
    epoch_one = {(e["env_id"], e["rank"]) for e in merged if e["event_type"] == "EPOCH_COMPLETED" and e["epoch"] == 1}
    assert epoch_one == {(0, 0), (1, 1)}  # both envs' first epoch, each from its own rank


def test_a_stop_signal_to_torchrun_stops_every_rank_at_the_same_epoch_boundary(
    workdir: Path, stopped_launch: tuple[subprocess.Popen[str], Path]
) -> None:
    launcher, folder = stopped_launch
    checkpoint = workdir / "run.pt"
    deadline = time.monotonic() + TIMEOUT_S
    while not checkpoint.exists() and launcher.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)  # a round completed: the checkpoint exists
    launcher.send_signal(signal.SIGTERM)  # torchrun forwards it to every rank
    output, _ = launcher.communicate(timeout=TIMEOUT_S)
    ends = [read_rank_file(folder / f"events.rank{rank}.jsonl")[-1] for rank in (0, 1)]
    assert all(end["event_type"] == "TRAINING_ENDED" for end in ends), output[-2000:]
    assert ends[0]["data"] == ends[1]["data"], "the ranks stopped at different epoch boundaries"
    assert ends[0]["data"]["outcome"] == "interrupted"
    merged = events(folder / "events.jsonl")
    assert merged[-1]["data"] == ends[0]["data"]
    saved = torch.load(checkpoint, weights_only=True)
    assert saved["rounds_completed"] == ends[0]["data"]["discarded_round"] == ends[0]["data"]["rounds_completed"]
    assert f"--resume {checkpoint}" in output  # rank 0 said how to continue
