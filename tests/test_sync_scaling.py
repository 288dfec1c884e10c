"""Host synchronizations per epoch do not grow with the number of envs (1, 2 and 4 envs give equal counts).

Each run is watched by a `tripwire.sync.SyncCounter`; a probe marks the end of every epoch (after the actions),
so the syncs between two marks are that epoch's: the train pass, fused validation, the epoch transfer, the
observations, the policy call and the action transfer, lifecycle operations and governor snapshots (epoch 5).
The first epoch's syncs include the round's set-up before it (its envs are built, one host model each): built on
their device, they upload nothing, so that too must not grow with the envs (built on the host and moved, each env's
host and each germinated seed were uploaded one tensor at a time: 22 more syncs per env on a GPU). Syncs after the
last mark (PPO update, final weight copies) are not per-epoch and are left out. The heuristic run germinates,
advances, blends and prunes seeds in every env (checked), so per-env lifecycle paths run 1, 2 and 4 times per epoch.
The PPO run adds the policy's `action_transfer` region. Measured on CPU: 4 syncs per epoch (heuristic), 6 (PPO), at
every env count.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from esper.nissa import InMemoryBackend, TelemetryHub
from esper.simic.training.config import TrainingConfig
from esper.simic.training.vectorized import run_training
from tripwire.sync import SyncEvent
from tripwire.sync.budget import check_scaling
from tripwire.sync.counter import SyncCounter

ENV_COUNTS = (1, 2, 4)
EPOCHS = {"heuristic": 8, "ppo": 3}


@dataclass
class EpochMarks:
    """Records how many sync events the counter held at the end of each epoch."""

    counter: SyncCounter
    ends: list[int] = field(default_factory=list)

    def after_train_pass(self, round_idx: int, epoch: int, envs: Sequence[object]) -> None:
        pass

    def after_actions(
        self, round_idx: int, epoch: int, heads: Sequence[Sequence[int]], rewards: Sequence[float]
    ) -> None:
        self.ends.append(len(self.counter.events))

    def after_record(self, round_idx: int, epoch: int, policy: object) -> None:
        pass

    def after_update(self, round_idx: int, policy: object) -> None:
        pass


@dataclass(frozen=True)
class WatchedRun:
    epochs: list[list[SyncEvent]]  # the sync events of each epoch
    event_types: Counter[str]


def _watched_run(controller: str, n_envs: int) -> WatchedRun:
    config = TrainingConfig(
        n_episodes=1, n_envs=n_envs, max_epochs=EPOCHS[controller], train_samples=100, val_samples=50, batch_size=25,
        slots=["r0c0", "r0c1"], seed=3,
    )  # fmt: skip
    backend = InMemoryBackend()
    hub = TelemetryHub()
    hub.add_backend(backend)
    with SyncCounter() as counter:
        marks = EpochMarks(counter)
        run_training(config, controller=controller, hub=hub, probe=marks)  # type: ignore[arg-type]
    hub.close()
    starts = [0, *marks.ends[:-1]]
    epochs = [counter.events[start:end] for start, end in zip(starts, marks.ends)]
    return WatchedRun(epochs, Counter(event.event_type.name for event in backend.events))


@pytest.fixture(scope="module")
def heuristic_runs() -> dict[int, WatchedRun]:
    return {n_envs: _watched_run("heuristic", n_envs) for n_envs in ENV_COUNTS}


@pytest.fixture(scope="module")
def ppo_runs() -> dict[int, WatchedRun]:
    return {n_envs: _watched_run("ppo", n_envs) for n_envs in ENV_COUNTS}


@pytest.fixture(params=["heuristic_runs", "ppo_runs"])
def runs(request: pytest.FixtureRequest) -> dict[int, WatchedRun]:
    watched: dict[int, WatchedRun] = request.getfixturevalue(request.param)
    return watched


def _by_region(events: list[SyncEvent]) -> dict[str, int]:
    return dict(Counter(event.region for event in events))


def _by_site(events: list[SyncEvent]) -> dict[str, int]:
    return dict(Counter(f"{event.region} {event.site} {event.kind}" for event in events))


def test_every_epoch_was_marked(runs: dict[int, WatchedRun]) -> None:
    assert {len(run.epochs) for run in runs.values()} == {len(runs[1].epochs)}
    assert len(runs[1].epochs) in EPOCHS.values()


def test_the_counter_saw_the_epoch_transfer(runs: dict[int, WatchedRun]) -> None:
    """Guards the comparisons below against a counter that sees nothing (equal zeros prove no scaling)."""
    for run in runs.values():
        assert all(_by_region(epoch).get("epoch_transfer", 0) > 0 for epoch in run.epochs)


def test_per_epoch_sync_total_does_not_grow_with_envs(runs: dict[int, WatchedRun]) -> None:
    totals = {n_envs: [len(epoch) for epoch in run.epochs] for n_envs, run in runs.items()}
    print(f"\nsyncs per epoch by env count: {totals}")
    assert len({tuple(per_epoch) for per_epoch in totals.values()}) == 1, totals


def test_per_epoch_syncs_per_region_do_not_grow_with_envs(runs: dict[int, WatchedRun]) -> None:
    for index in range(len(runs[1].epochs)):
        report = check_scaling({n_envs: _by_region(run.epochs[index]) for n_envs, run in runs.items()})
        if not report.ok:
            sites = {n_envs: _by_site(run.epochs[index]) for n_envs, run in runs.items()}
            pytest.fail(f"epoch {index + 1}: {report.format()}\nsites: {sites}")


def test_heuristic_runs_exercised_the_lifecycle_in_every_env(heuristic_runs: dict[int, WatchedRun]) -> None:
    """Guards the comparison against runs where no per-env lifecycle code ran during the epochs."""
    for n_envs, run in heuristic_runs.items():
        assert run.event_types["SEED_GERMINATED"] >= n_envs
        assert run.event_types["SEED_STAGE_CHANGED"] >= 3 * n_envs
        assert run.event_types["SEED_GATE_EVALUATED"] >= 2 * n_envs
