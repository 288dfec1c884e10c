"""torch.distributed collectives are sync points: counted per region as `collective:<op>`, with their call site."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from tripwire.sync import hot_path
from tripwire.sync.budget import SyncBudget, check_budget
from tripwire.sync.counter import SyncCounter

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="this torch build has no torch.distributed")


@pytest.fixture
def one_rank_group(tmp_path: Path) -> Iterator[None]:
    """A real gloo process group of one rank in this process (a FileStore, no network)."""
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def exchange(values: list[float]) -> list[float]:
    """A loop step of a sharded trainer: one upload, one all-reduce, one object gather and one read."""
    total = torch.tensor(values, device=DEVICE)
    dist.all_reduce(total)
    gathered: list[object] = [None]
    dist.all_gather_object(gathered, {"rewards": values})
    return total.tolist()


def test_each_collective_is_one_sync_of_kind_collective_op_in_its_region(one_rank_group: None) -> None:
    with SyncCounter() as counter, hot_path("rank_exchange"):
        exchange([1.0, 2.0])
    in_region = [event for event in counter.events if event.region == "rank_exchange"]
    kinds = sorted(event.kind for event in in_region)
    # all_gather_object's own size exchange and .item() inside torch are not counted a second time
    expected = ["collective:all_gather_object", "collective:all_reduce", "tensor_to_device", "tolist"]
    assert kinds == expected, counter.format()
    sites = {event.kind: event for event in in_region}
    assert sites["collective:all_reduce"].site.startswith("tests/tripwire/sync/test_sync_collectives.py:")
    assert sites["collective:all_reduce"].function == "exchange"


def test_barrier_and_broadcast_are_counted_too(one_rank_group: None) -> None:
    with SyncCounter() as counter, hot_path("setup"):
        dist.barrier()
        dist.broadcast_object_list(["run-dir"], src=0)
        dist.broadcast(torch.zeros(2), src=0)
    assert counter.counts_by_kind("setup") == {
        "collective:barrier": 1,
        "collective:broadcast": 1,
        "collective:broadcast_object_list": 1,
    }


def test_objects_gathered_from_host_memory_arrive_in_host_memory(one_rank_group: None) -> None:
    """`all_gather_object` pickles each rank's objects and unpickles them on every rank: a tensor arrives where its
    sender kept it. This trainer gathers its envs' action masks, built in host memory, and `stack_masks` moves their
    stack with `flat.to(device)`: on a GPU run of e_distributed (gloo, its policy on the host) a no-op, which its CPU
    run counted as 12 copies to the host, the unpickled masks taken for device tensors. What this rank sends stands
    for what every rank sends (they run the same code): when all its tensors are host memory, so are the ones handed
    back. Tensors sent from the device stay device tensors, and so does anything received by a rank that sent none."""

    def gathered(masks: dict[str, torch.Tensor]) -> torch.Tensor:
        parts: list[list[dict[str, torch.Tensor]]] = [[]]
        dist.all_gather_object(parts, [masks])
        per_env = [env for part in parts for env in part]
        return torch.stack([torch.cat([mask.reshape(-1) for mask in env.values()]) for env in per_env])

    def host() -> None:
        flat = gathered({"op": torch.ones(3, dtype=torch.bool), "slot": torch.zeros(2, dtype=torch.bool)})
        flat.to("cpu")  # already there on a GPU run too: nothing copied
        flat.to(DEVICE)  # the stack uploaded
        box: list[object] = [torch.arange(3)]
        dist.broadcast_object_list(box, src=0)
        box[0].tolist()  # type: ignore[union-attr]  # host memory read

    def device() -> None:
        flat = gathered({"op": torch.ones(3, dtype=torch.bool, device=DEVICE)})
        flat.to("cpu")  # a device tensor's copy to the host

    with SyncCounter() as counter, hot_path("host"):
        host()
    assert counter.counts_by_kind("host") == {
        "collective:all_gather_object": 1,
        "collective:broadcast_object_list": 1,
        "to_device": 1,
    }
    with SyncCounter() as counter, hot_path("device"):
        device()
    assert counter.counts_by_kind("device") == {"collective:all_gather_object": 1, "to_cpu": 1}


def test_an_extra_collective_per_env_is_caught_by_the_budget(one_rank_group: None) -> None:
    def epoch(n_envs: int, extra: bool) -> None:
        with hot_path("rank_exchange"):
            exchange([0.5] * n_envs)
            for _ in range(n_envs if extra else 0):  # the hazard: an all-reduce per env left in the loop
                dist.all_reduce(torch.zeros(1))

    with SyncCounter() as clean:
        epoch(3, extra=False)
    budget = SyncBudget(regions=clean.counts_by_region(), sites=clean.site_keys_by_region())
    with SyncCounter() as hazard:
        epoch(3, extra=True)
    report = check_budget(hazard, budget)
    assert not report.ok
    text = report.format()
    assert "region 'rank_exchange': 7 syncs, budget 4 (+3)" in text, text
    assert "in test_an_extra_collective_per_env_is_caught_by_the_budget.<locals>.epoch" in text
    assert "[collective:all_reduce×3]" in text and "NEW " in text


def test_the_patches_are_removed_when_the_counter_stops() -> None:
    original = dist.all_reduce
    with SyncCounter():
        assert dist.all_reduce is not original
        assert dist.distributed_c10d.all_gather_object is not None
    assert dist.all_reduce is original
    assert dist.distributed_c10d.all_reduce is original
