"""Env sharding without launching ranks: which envs a rank runs, event stamps, digests, launch detection, one-line
refusals, and a one-process run that neither stamps nor exchanges anything."""

from __future__ import annotations

import json
import pickle
import threading
from pathlib import Path

import pytest
import torch

from esper.leyline import TelemetryEvent, TelemetryEventType
from esper.nissa import InMemoryBackend, TelemetryHub
from esper.nissa.event_schema import validate_line
from esper.scripts.train import main
from esper.simic.training.launch import torchrun_launch
from esper.simic.training.sharding import (
    EventOrder,
    LocalShard,
    Phase,
    ShardError,
    shard_env_ids,
    state_digest,
)

T = TelemetryEventType


@pytest.mark.parametrize(("n_envs", "world"), [(5, 1), (5, 2), (5, 4), (8, 4), (3, 3)])
def test_every_env_belongs_to_exactly_one_rank_in_contiguous_blocks(n_envs: int, world: int) -> None:
    blocks = [shard_env_ids(n_envs, world, rank) for rank in range(world)]
    assert [env for block in blocks for env in block] == list(range(n_envs))
    assert max(map(len, blocks)) - min(map(len, blocks)) <= 1 and all(blocks)


def test_more_ranks_than_envs_is_refused_in_one_line() -> None:
    with pytest.raises(ShardError, match=r"^4 ranks for 3 envs: every rank needs at least one env; pass --envs 4"):
        shard_env_ids(3, 4, 0)


def test_events_are_stamped_with_rank_and_merge_key_where_the_loop_is() -> None:
    order = EventOrder(rank=1)
    first = order(TelemetryEvent(T.TRAINING_STARTED))
    order.mark(0, 2, Phase.ACT)
    a, b = order(TelemetryEvent(T.SEED_GERMINATED, env_id=3)), order(TelemetryEvent(T.EPOCH_COMPLETED, env_id=3))
    other = order(TelemetryEvent(T.EPOCH_COMPLETED, env_id=4))
    order.mark(0, 3, Phase.ACT)
    later = order(TelemetryEvent(T.EPOCH_COMPLETED, env_id=3))
    assert first.order == (-1, 0, Phase.START, -1, 0) and first.rank == 1
    assert [e.order for e in (a, b, other, later)] == [
        (0, 2, Phase.ACT, 3, 0),
        (0, 2, Phase.ACT, 3, 1),
        (0, 2, Phase.ACT, 4, 0),
        (0, 3, Phase.ACT, 3, 0),
    ]


def test_stamped_lines_and_a_named_failed_rank_follow_the_schema() -> None:
    stamped = EventOrder(rank=0)(TelemetryEvent(T.TAMIYO_INITIATED, {"val_accuracy": 10.0}, env_id=0, epoch=1))
    validate_line(json.dumps(stamped.to_json_dict()))
    end = {"outcome": "failed", "rounds_completed": 0, "discarded_round": 0, "stopped_after_epoch": None}
    line = TelemetryEvent(T.TRAINING_ENDED, {**end, "cause": "rank 1 failed: boom", "failed_rank": 1}, rank=0)
    validate_line(json.dumps(line.to_json_dict()))
    plain = TelemetryEvent(T.TRAINING_STARTED).to_json_dict()
    assert "rank" not in plain and "order" not in plain  # a single-process line is unchanged


def test_a_synchronous_hub_writes_each_event_inside_emit_on_the_emitting_thread() -> None:
    seen: list[str] = []

    def annotate(event: TelemetryEvent) -> TelemetryEvent:
        seen.append(threading.current_thread().name)
        return event

    memory = InMemoryBackend()
    hub = TelemetryHub(annotate=annotate, synchronous=True)
    hub.add_backend(memory)
    hub.emit(TelemetryEvent(T.TRAINING_STARTED))
    assert len(memory.events) == 1 and seen == [threading.current_thread().name]  # written before emit returned
    hub.close()


def test_the_replica_digest_sees_a_one_ulp_change_and_nothing_else() -> None:
    state = {"policy": {"w": torch.tensor([1.0, 2.0]), "step": torch.tensor(3)}, "lr": 0.001}
    copy = {"policy": {"w": torch.tensor([1.0, 2.0]), "step": torch.tensor(3)}, "lr": 0.001}
    nudged = {"policy": {"w": torch.nextafter(torch.tensor([1.0, 2.0]), torch.tensor(9.0)), "step": torch.tensor(3)}}
    assert state_digest(state) == state_digest(copy)
    assert state_digest(state) != state_digest({**nudged, "lr": 0.001})
    assert state_digest(state) != state_digest({**copy, "lr": 0.002})


def test_a_plain_process_is_not_a_launch_and_torchrun_variables_are() -> None:
    assert torchrun_launch({}) is None
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    launch = torchrun_launch({**env, "TORCHELASTIC_RUN_ID": "job", "TORCHELASTIC_RESTART_COUNT": "2"})
    assert launch is not None and (launch.rank, launch.world_size, launch.run_id) == (1, 2, "job/2")


def test_one_process_exchanges_nothing() -> None:
    shard = LocalShard(3)
    items = [object(), object()]
    assert shard.gather(items) == items and shard.any(True) and not shard.any(False)
    assert shard.env_ids == (0, 1, 2) and shard.is_leader and shard.annotate is None


def test_the_cli_refuses_more_ranks_than_envs_before_connecting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    env = {"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code = main(["heuristic", "--envs", "2", "--rounds", "1", "--quiet"])
    assert code == 2
    assert capsys.readouterr().err == (
        "train: error: 4 ranks for 2 envs: every rank needs at least one env; pass --envs 4 or more, or start "
        "fewer ranks (--nproc-per-node)\n"
    )


def test_an_observation_crosses_ranks_bitwise_with_its_masks_sent_as_bytes() -> None:
    from esper.simic.training.observations import EnvObservation
    from esper.tamiyo.features import SlotObservation
    from esper.tamiyo.signals import TrainingSignals

    masks = {"op": torch.tensor([True, False, True]), "slot_by_op": torch.tensor([[True, False], [False, True]])}
    signals = TrainingSignals(1, 5, 2.3, 10.0, (2.3,), (10.0,), plateau=False, stable=True)
    sent = EnvObservation(3, [0.1, 1e-30], [0, 2], masks, signals, (SlotObservation.empty(),))
    received = pickle.loads(pickle.dumps(sent))
    assert (received.env_id, received.features, received.blueprints) == (3, [0.1, 1e-30], [0, 2])
    assert received.signals == signals and received.slots == sent.slots
    for key, mask in masks.items():
        got = received.masks[key]
        assert got.dtype == mask.dtype and got.shape == mask.shape and torch.equal(got, mask)
