"""How a process joins a sharded run: what torchrun says in the environment, and the shard it opens.

`open_shard` gives a plain process a `LocalShard` and a rank launched by torchrun (or any env:// launcher) its
`RankShard` on an initialized default process group: gloo on CPU, NCCL on CUDA with the rank on cuda:LOCAL_RANK.
The rank also connects to torchrun's store (it outlives the workers), where a failing rank names itself.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import PrefixStore, Store, TCPStore  # type: ignore[attr-defined]  # not in its __all__

from esper.simic.training.sharding import EnvShard, LocalShard, RankShard, ShardError, shard_env_ids

STORE_TIMEOUT = timedelta(seconds=30)


@dataclass(frozen=True)
class Launch:
    """What torchrun told this process: its rank, the group size, its local rank and the store's address."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    run_id: str


def torchrun_launch(environ: Mapping[str, str] | None = None) -> Launch | None:
    """The launch torchrun (or any env:// launcher) describes in the environment; None for a plain process."""
    env = os.environ if environ is None else environ
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    if not all(name in env for name in names):
        return None
    attempt = env.get("TORCHELASTIC_RESTART_COUNT", "0")
    return Launch(
        rank=int(env["RANK"]),
        world_size=int(env["WORLD_SIZE"]),
        local_rank=int(env["LOCAL_RANK"]),
        master_addr=env["MASTER_ADDR"],
        master_port=int(env["MASTER_PORT"]),
        run_id=f"{env.get('TORCHELASTIC_RUN_ID', 'esper')}/{attempt}",
    )


@contextlib.contextmanager
def open_shard(n_envs: int, device: str, devices: Sequence[str] | None) -> Iterator[EnvShard]:
    """The shard of this process: `LocalShard` for a plain run; under torchrun, the rank's `RankShard` on an
    initialized process group (gloo on CPU, NCCL on CUDA: cuda:LOCAL_RANK), destroyed when the run returns."""
    launch = torchrun_launch()
    if launch is None:
        yield LocalShard(n_envs)
        return
    if devices:
        raise ShardError("--devices places envs in one process; under torchrun each rank uses one device: drop it")
    shard_env_ids(n_envs, launch.world_size, launch.rank)  # refuse more ranks than envs before any connection
    rank_device = torch.device("cuda", launch.local_rank) if device.startswith("cuda") else torch.device("cpu")
    if rank_device.type == "cuda":
        torch.cuda.set_device(rank_device)
    dist.init_process_group("nccl" if rank_device.type == "cuda" else "gloo", device_id=_device_id(rank_device))
    shard = RankShard(n_envs=n_envs, device=rank_device, store=_failure_store(launch))
    yield shard
    dist.destroy_process_group()  # not after a failure: a dead peer can make NCCL's teardown hang


def _device_id(device: torch.device) -> torch.device | None:
    return device if device.type == "cuda" else None


def _failure_store(launch: Launch) -> Store | None:
    """A client of torchrun's store (it outlives the workers), where a failing rank names itself."""
    try:
        store = TCPStore(
            launch.master_addr, launch.master_port, is_master=False, timeout=STORE_TIMEOUT, wait_for_workers=False
        )
    except Exception:  # no reachable store: failures are still reported, without the failed rank's name
        return None
    return PrefixStore(f"esper/{launch.run_id}/", store)
