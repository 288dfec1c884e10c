"""A run sharded over 1, 2 or 4 ranks (gloo, localhost) is bitwise the single-process run with the same envs:
trajectory, events in order, final weights and checkpoint; and a sharded resume equals a one-process one.

The ranks are forked from one warm launcher with the environment torchrun gives them (`distributed_scenario.py
--fork`), so they run the CLI's code from `open_shard` on without paying torch's start-up per rank; the real
torchrun launches are scenario (e) of the gate and the failure and signal tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from distributed_scenario import RankedRun, RankLaunch, collect_ranks, start_ranks
from sharded_helpers import ARGV, OneProcessRun, checkpoint_state, one_process_run, same_state, without_rank

from esper.simic.training.sharding import shard_env_ids
from tripwire.bitwise.trajectory import compare_trajectories

RANKS = (1, 2, 4)
TWO_ROUNDS = (*ARGV, "--rounds", "2")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sharded")


@pytest.fixture(scope="module")
def launches(workdir: Path) -> dict[int, RankLaunch]:
    """The three launches run at once (they are mostly process start-up), beside the reference run."""
    argv = {n: [*TWO_ROUNDS, "--save", str(workdir / f"n{n}.pt")] for n in RANKS}
    return {n: start_ranks(n, argv[n], workdir / f"n{n}", fork=True) for n in RANKS}


@pytest.fixture(scope="module")
def reference(workdir: Path, launches: dict[int, RankLaunch]) -> OneProcessRun:
    return one_process_run((*TWO_ROUNDS, "--save", str(workdir / "one.pt")))


@pytest.fixture(scope="module")
def sharded(launches: dict[int, RankLaunch]) -> dict[int, RankedRun]:
    return {n: collect_ranks(launch) for n, launch in launches.items()}


@pytest.mark.parametrize("ranks", RANKS)
def test_the_trajectory_does_not_depend_on_the_rank_count(
    ranks: int, reference: OneProcessRun, sharded: dict[int, RankedRun]
) -> None:
    # every env's weights after every train pass, actions, rewards, normalizers and the policy after each update
    report = compare_trajectories(reference.trajectory, sharded[ranks].trajectory, source="one process")
    report.raise_if_diverged()
    assert len(sharded[ranks].trajectory) == len(reference.trajectory) > 0


@pytest.mark.parametrize("ranks", RANKS)
def test_the_merged_events_are_the_single_process_events_in_order(
    ranks: int, reference: OneProcessRun, sharded: dict[int, RankedRun]
) -> None:
    events = sharded[ranks].events
    assert [without_rank(event) for event in events] == [without_rank(event) for event in reference.events]
    owner = {env: rank for rank in range(ranks) for env in shard_env_ids(5, ranks, rank)}
    assert all(event["rank"] == owner[event["env_id"]] for event in events if event["env_id"] >= 0)
    assert {event["event_type"] for event in events} >= {"SEED_GERMINATED", "EPOCH_COMPLETED", "PPO_UPDATE_COMPLETED"}


@pytest.mark.parametrize("ranks", RANKS)
def test_every_policy_replica_and_every_env_ends_with_the_single_process_weights(
    ranks: int, reference: OneProcessRun, sharded: dict[int, RankedRun]
) -> None:
    policy = {name: value for name, value in reference.weights.items() if name.startswith("policy.")}
    envs_seen = set()
    for rank, weights in enumerate(sharded[ranks].weights):
        assert same_state({k: v for k, v in weights.items() if k.startswith("policy.")}, policy) is None, rank
        own = {name: value for name, value in weights.items() if not name.startswith("policy.")}
        assert same_state(own, {name: reference.weights[name] for name in own}) is None, rank
        envs_seen |= {name.split(".", 1)[0] for name in own}
    assert envs_seen == {f"env{i}" for i in range(5)}


@pytest.mark.parametrize("ranks", RANKS)
def test_rank_zero_writes_the_single_process_checkpoint(
    ranks: int, workdir: Path, reference: OneProcessRun, sharded: dict[int, RankedRun]
) -> None:
    assert same_state(checkpoint_state(workdir / f"n{ranks}.pt"), checkpoint_state(workdir / "one.pt")) is None


def test_a_sharded_resume_loads_the_checkpoint_on_every_rank_and_continues_as_one_process(
    workdir: Path, reference: OneProcessRun, sharded: dict[int, RankedRun]
) -> None:
    three = (*ARGV, "--rounds", "3")
    launch = start_ranks(2, [*three, "--resume", str(workdir / "n2.pt")], workdir / "resumed", fork=True)
    one = one_process_run((*three, "--resume", str(workdir / "one.pt")))
    resumed = collect_ranks(launch)
    compare_trajectories(one.trajectory, resumed.trajectory, source="one process resumed").raise_if_diverged()
    assert [without_rank(event) for event in resumed.events] == [without_rank(event) for event in one.events]
    assert resumed.events[1]["event_type"] == "CHECKPOINT_LOADED"
