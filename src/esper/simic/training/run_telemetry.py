"""A run's telemetry: the hub and where its events go, for one process or for each rank of a sharded run.

One process: one hub, one `<telemetry-dir>/<run>/events.jsonl`. A sharded run: rank 0 makes the run folder and
tells the others its name; each rank's hub stamps its events with the rank and merge key (`EnvShard.annotate`)
and writes them, synchronously, to its own `events.rank<r>.jsonl` there, so a rank that dies has lost nothing it
emitted. At the end `close` merges the ranks' files into the run's `events.jsonl` (`esper.nissa.merge`): rank 0
after every rank has closed its file, or, when the run failed, every surviving rank (the merges are serialized,
and the last one sees every file). The folder must be on a filesystem every rank sees (one node, or a shared one).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from esper.leyline import TelemetryLevel
from esper.nissa.backends import DirectoryBackend, TelemetryPathError
from esper.nissa.hub import TelemetryHub, make_run_name
from esper.nissa.merge import merge_run_dir, rank_file_name
from esper.simic.training.config import TrainingConfig
from esper.simic.training.sharding import EnvShard


@dataclass
class RunTelemetry:
    """The run's hub, whether the run owns it, and the events file the run's readers open."""

    hub: TelemetryHub
    owned: bool
    shard: EnvShard
    events_path: Path | None = None  # events.jsonl (a sharded run's merged view, written by `close`)
    sharded_dir: Path | None = None  # the run folder of a sharded run's per-rank files

    def close(self, *, failed: bool) -> None:
        """Close (or flush) the hub; in a sharded run, merge the ranks' files into events.jsonl."""
        if not self.owned:
            self.hub.flush()
            return
        self.hub.close()
        if self.sharded_dir is None:
            return
        if failed:  # best effort: the survivors merge what every rank wrote, the last merge sees it all
            with contextlib.suppress(Exception):
                merge_run_dir(self.sharded_dir)
            return
        self.shard.barrier()  # every rank has closed its file
        if self.shard.is_leader:
            merge_run_dir(self.sharded_dir)


def open_run_telemetry(config: TrainingConfig, hub: TelemetryHub | None, shard: EnvShard) -> RunTelemetry:
    """The run's hub (the caller's, or one of our own) and the events file it writes."""
    if hub is not None:
        return RunTelemetry(hub, owned=False, shard=shard)
    level = config.telemetry_level
    sharded = shard.annotate is not None
    own = TelemetryHub(level, annotate=shard.annotate, synchronous=sharded)
    if config.telemetry_dir is None or level is TelemetryLevel.OFF:
        return RunTelemetry(own, owned=True, shard=shard)
    run_name = config.run_name or make_run_name()
    if not sharded:
        backend = DirectoryBackend(config.telemetry_dir, run_name)
        own.add_backend(backend)
        return RunTelemetry(own, owned=True, shard=shard, events_path=backend.path)
    backend = _rank_backend(config.telemetry_dir, run_name, shard)
    own.add_backend(backend)
    return RunTelemetry(
        own, owned=True, shard=shard, events_path=backend.run_dir / "events.jsonl", sharded_dir=backend.run_dir
    )


def _rank_backend(root: str, run_name: str, shard: EnvShard) -> DirectoryBackend:
    """This rank's file in the run folder rank 0 made (its name, made unique there, is shared with the others)."""
    leader = DirectoryBackend(root, run_name, events_file=rank_file_name(0)) if shard.is_leader else None
    folder = shard.share("" if leader is None else leader.run_dir.name)
    if leader is not None:
        return leader
    if not (Path(root) / folder).is_dir():
        raise TelemetryPathError(
            f"rank {shard.rank} cannot see the run folder {Path(root) / folder} that rank 0 made: a sharded run's "
            "--telemetry-dir must be on a filesystem every node shares"
        )
    return DirectoryBackend(root, folder, events_file=rank_file_name(shard.rank), new_folder=False)
