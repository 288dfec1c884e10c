"""Env sharding over torch.distributed ranks: which envs a rank runs, and the few collectives that keep every
rank's policy identical to a single process's.

A run launched by `torchrun --nproc-per-node N -m esper.scripts.train ... --envs K` gives rank r a contiguous
block of env ids (`shard_env_ids`). An env is seeded by its id, never by its rank, and envs are re-created every
round, so no env state crosses ranks. Per epoch each rank trains and validates its own envs, then:

1. `gather` the envs' observations (all_gather_object, concatenated in rank order = env-id order): every rank
   holds the full K-env batch and runs the SAME policy call on it with the same replicated sampling generator;
2. each rank executes the actions of its own envs, and `gather` their outcomes (reward, effective op, rollback
   flag, ...), so every rank records the identical full rollout;
3. `any` (one all-reduce) makes the ranks' stop requests agree at the epoch boundary.

After the last epoch every rank runs the identical PPO update on the identical rollout, so the replicas stay equal
without a weight broadcast; `check_replicas` asserts it at each round's end with one digest gather. Every
policy-side computation is therefore literally the single-process one: events and weights are bitwise equal for
any number of ranks. `LocalShard` (one process) does none of this and adds no work: the loop reads the same.

Collectives run in the hot-path region `rank_exchange` (tripwire counts them as `collective:<op>`). A collective
that fails (a peer died: gloo raises at once) raises `PeerFailure`; `failure()` then names the rank that failed,
from the store key that rank wrote before it exited, or from the pid it registered when it died without writing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Protocol, TypeVar

import torch
import torch.distributed as dist
from torch.distributed import Store  # type: ignore[attr-defined]  # not in its __all__

from esper.leyline import TelemetryEvent
from esper.messages import first_line
from tripwire.sync import hot_path

T = TypeVar("T")
EXCHANGE = hot_path("rank_exchange")
FAILED_KEY = "failed"
FAILURE_WAIT_S = 3.0  # how long a survivor waits for the failed rank's own report in the store


class Phase(IntEnum):
    """Where in a round an event was emitted: the third part of its merge key (`esper.nissa.merge`)."""

    START = 0  # before the first round: TRAINING_STARTED, CHECKPOINT_LOADED
    TRAIN = 1
    ABSORB = 2
    GOVERNOR = 3
    ACT = 4
    OUTCOMES = 5
    UPDATE = 6
    END = 7  # TRAINING_ENDED


END_ROUND = 1 << 30  # the round part of the terminal event's merge key: after every round


class ShardError(ValueError):
    """A sharded launch that cannot work (more ranks than envs, --devices under torchrun); one line."""


class PeerFailure(RuntimeError):
    """A collective failed: another rank stopped (crashed, was killed, or raised). Once `RankShard.failure` has
    found out which rank, the message names it."""

    def __init__(self, message: str, rank: int) -> None:
        super().__init__(message)
        self.rank = rank
        self.peer: RankFailure | None = None

    def __str__(self) -> str:
        if self.peer is None:
            return super().__str__()
        return f"{self.peer.cause} (rank {self.rank} stopped with it)"


class ReplicaDivergence(RuntimeError):
    """The ranks' policy replicas differ after an update: they did not run the same computation."""


@dataclass(frozen=True)
class RankFailure:
    """Which rank failed (None: unknown) and why, for the run's terminal event."""

    rank: int | None
    cause: str


def shard_env_ids(n_envs: int, world_size: int, rank: int) -> tuple[int, ...]:
    """Rank `rank`'s contiguous block of env ids; the first `n_envs % world_size` ranks get one more."""
    if world_size > n_envs:
        raise ShardError(
            f"{world_size} ranks for {n_envs} envs: every rank needs at least one env; pass --envs {world_size} "
            "or more, or start fewer ranks (--nproc-per-node)"
        )
    base, extra = divmod(n_envs, world_size)
    start = rank * base + min(rank, extra)
    return tuple(range(start, start + base + (1 if rank < extra else 0)))


class EventOrder:
    """The hub's `annotate` hook on a rank: stamps each event with its rank and merge key
    (round, epoch, phase, env_id, sequence), the sequence counting events of one env within one phase."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.position: tuple[int, int, int] = (-1, 0, int(Phase.START))
        self.counts: dict[int, int] = {}

    def mark(self, round_idx: int, epoch: int, phase: Phase) -> None:
        position = (round_idx, epoch, int(phase))
        if position != self.position:
            self.position, self.counts = position, {}

    def __call__(self, event: TelemetryEvent) -> TelemetryEvent:
        sequence = self.counts.get(event.env_id, 0)
        self.counts[event.env_id] = sequence + 1
        return dataclasses.replace(event, rank=self.rank, order=(*self.position, event.env_id, sequence))


class EnvShard(Protocol):
    """What the loop asks of the ranks; `LocalShard` answers for one process without any collective."""

    rank: int
    world_size: int
    env_ids: tuple[int, ...]
    device: torch.device | None  # the rank's own device (None: one process, devices as configured)
    annotate: Callable[[TelemetryEvent], TelemetryEvent] | None

    @property
    def is_leader(self) -> bool: ...

    def gather(self, items: Sequence[T]) -> list[T]: ...

    def any(self, flag: bool) -> bool: ...

    def barrier(self) -> None: ...

    def share(self, text: str) -> str: ...

    def check_replicas(self, state: Callable[[], Mapping[str, Any]], round_idx: int) -> None: ...

    def mark(self, round_idx: int, epoch: int, phase: Phase) -> None: ...

    def failure(self, exc: BaseException) -> RankFailure | None: ...


class LocalShard:
    """One process holds every env: every exchange is the identity and nothing is stamped."""

    rank = 0
    world_size = 1
    device: torch.device | None = None
    annotate: Callable[[TelemetryEvent], TelemetryEvent] | None = None

    def __init__(self, n_envs: int) -> None:
        self.env_ids = tuple(range(n_envs))

    @property
    def is_leader(self) -> bool:
        return True

    def gather(self, items: Sequence[T]) -> list[T]:
        return list(items)

    def any(self, flag: bool) -> bool:
        return flag

    def barrier(self) -> None:
        return None

    def share(self, text: str) -> str:
        return text

    def check_replicas(self, state: Callable[[], Mapping[str, Any]], round_idx: int) -> None:
        return None

    def mark(self, round_idx: int, epoch: int, phase: Phase) -> None:
        return None

    def failure(self, exc: BaseException) -> RankFailure | None:
        return None


class RankShard:
    """One rank of a torch.distributed run (an initialized default process group)."""

    def __init__(self, *, n_envs: int, device: torch.device, store: Store | None) -> None:
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.env_ids = shard_env_ids(n_envs, self.world_size, self.rank)
        self.device: torch.device | None = device
        self.order = EventOrder(self.rank)
        self.annotate: Callable[[TelemetryEvent], TelemetryEvent] | None = self.order
        self.store = store
        if store is not None:
            store.set(f"pid/{self.rank}", f"{socket.gethostname()}:{os.getpid()}")

    @property
    def is_leader(self) -> bool:
        return self.rank == 0

    @contextlib.contextmanager
    def _collective(self, name: str) -> Iterator[None]:
        """Region `rank_exchange` around one collective; a failure (a peer is gone) becomes `PeerFailure`."""
        with EXCHANGE:
            try:
                yield
            except Exception as exc:  # gloo and NCCL raise RuntimeError subclasses when a peer is gone
                raise PeerFailure(f"{name} failed on rank {self.rank}: {first_line(exc, 200)}", self.rank) from exc

    def gather(self, items: Sequence[T]) -> list[T]:
        """Every rank's items, concatenated in rank order (= env-id order: blocks are contiguous)."""
        parts: list[Any] = [None] * self.world_size
        with self._collective("all_gather_object"):
            dist.all_gather_object(parts, list(items))
        return [item for part in parts for item in part]

    def any(self, flag: bool) -> bool:
        """True on every rank when any rank's flag is True (one all-reduce)."""
        value = torch.tensor([int(flag)], dtype=torch.int32, device=self.device)
        with self._collective("all_reduce"):
            dist.all_reduce(value, op=dist.ReduceOp.MAX)
            return bool(value.item())

    def barrier(self) -> None:
        with self._collective("barrier"):
            dist.barrier()

    def share(self, text: str) -> str:
        """Rank 0's `text` on every rank."""
        box = [text]
        with self._collective("broadcast_object_list"):
            dist.broadcast_object_list(box, src=0)
        return str(box[0])

    def check_replicas(self, state: Callable[[], Mapping[str, Any]], round_idx: int) -> None:
        """Raise ReplicaDivergence unless every rank's `state()` has the same digest."""
        with EXCHANGE:
            digest = state_digest(state())
        digests = self.gather([digest])
        differing = [rank for rank, digest in enumerate(digests) if digest != digests[0]]
        if differing:
            raise ReplicaDivergence(
                f"policy replicas differ after round {round_idx + 1}: rank(s) {differing} disagree with rank 0 "
                "(the ranks ran different code, data or numerics: mixed hardware or library versions?)"
            )

    def mark(self, round_idx: int, epoch: int, phase: Phase) -> None:
        self.order.mark(round_idx, epoch, phase)

    def failure(self, exc: BaseException) -> RankFailure:
        """This rank's own failure (written to the store for the others), or the failed peer's, when a collective
        failed because another rank stopped."""
        if isinstance(exc, PeerFailure):
            exc.peer = self._peer_failure(exc)
            return exc.peer
        cause = "aborted by a second stop signal" if isinstance(exc, KeyboardInterrupt) else describe(exc)
        if self.store is not None:
            with contextlib.suppress(Exception):  # best effort: the store may be gone too
                self.store.compare_set(FAILED_KEY, "", f"{self.rank}\t{cause}")
        return RankFailure(self.rank, cause)

    def _peer_failure(self, exc: PeerFailure) -> RankFailure:
        reported = self._reported_failure()
        if reported is not None:
            rank, cause = reported
            return RankFailure(rank, f"rank {rank} failed: {cause}")
        dead = self._dead_ranks()
        if dead:
            return RankFailure(dead[0], f"rank {dead[0]} died without reporting why (killed?)")
        return RankFailure(None, f"another rank stopped without reporting why: {exc}")

    def _reported_failure(self) -> tuple[int, str] | None:
        if self.store is None:
            return None
        deadline = time.monotonic() + FAILURE_WAIT_S
        with contextlib.suppress(Exception):
            while not self.store.check([FAILED_KEY]):
                if time.monotonic() > deadline:
                    return None
                time.sleep(0.05)
            rank, _, cause = self.store.get(FAILED_KEY).decode().partition("\t")
            return int(rank), cause
        return None

    def _dead_ranks(self) -> list[int]:
        """Ranks on this host whose registered process is gone."""
        dead = []
        host = socket.gethostname()
        for rank in range(self.world_size):
            if rank == self.rank or self.store is None:
                continue
            with contextlib.suppress(Exception):
                where, _, pid = self.store.get(f"pid/{rank}").decode().rpartition(":")
                if where == host and not _alive(int(pid)):
                    dead.append(rank)
        return dead


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {first_line(exc, fallback='')}"


WireTensor = tuple[torch.dtype, tuple[int, ...], bytes]


def tensor_to_wire(tensor: torch.Tensor) -> WireTensor:
    """A host tensor as (dtype, shape, raw bytes) for a gather: it pickles far faster than the tensor itself
    (docs/distributed.md, "pickles its masks as raw bytes")."""
    return tensor.dtype, tuple(tensor.shape), tensor.numpy().tobytes()


def tensor_from_wire(wire: WireTensor) -> torch.Tensor:
    """The inverse of `tensor_to_wire`, bitwise."""
    dtype, shape, raw = wire
    return torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape)


def state_digest(state: Any) -> str:
    """sha256 of a nested state (tensors bitwise, one host copy per device; other values by repr)."""
    digest = hashlib.sha256()
    by_device: dict[torch.device, list[torch.Tensor]] = {}
    _digest_walk(state, "", digest, by_device)
    for parts in by_device.values():
        digest.update(torch.cat(parts).cpu().numpy().tobytes())
    return digest.hexdigest()


def _digest_walk(value: Any, path: str, digest: Any, by_device: dict[torch.device, list[torch.Tensor]]) -> None:
    """Hash the structure and plain values of `value` into `digest`; collect its tensors' bytes by device."""
    if isinstance(value, torch.Tensor):
        digest.update(f"{path}:{value.dtype}:{tuple(value.shape)};".encode())
        by_device.setdefault(value.device, []).append(value.detach().reshape(-1).contiguous().view(torch.uint8))
    elif isinstance(value, Mapping):
        for key in value:
            _digest_walk(value[key], f"{path}/{key}", digest, by_device)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _digest_walk(item, f"{path}/{index}", digest, by_device)
    else:
        digest.update(f"{path}={value!r};".encode())
