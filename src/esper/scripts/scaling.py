"""`python -m esper.scripts.scaling {collectives,throughput}`: what sharding envs over ranks costs on this machine.

- `collectives` (run it under `torchrun --nproc-per-node N`): times every exchange a sharded run makes, with the
  trainer's real payloads (K envs' observations and outcomes built by the trainer's own code, the PPO client's
  state for the replica check). Each of `--repeats` samples starts after a barrier, so it times the collective,
  not the ranks' skew; rank 0 prints the median and 90th percentile of each, in microseconds.
- `throughput`: runs the same training command in one process and on 1, 2 and 4 torchrun ranks (gloo), and reads
  each run's events: env-epochs per second of the epoch loop (the trainer's throughput telemetry, rounds after the
  first) and of the whole run (TRAINING_STARTED to TRAINING_ENDED), with the load average around each run.

Both print a markdown table (docs/distributed.md quotes them); `--json FILE` also writes the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

TRAIN = (
    *("ppo", "--preset", "cifar_baseline", "--task", "cifar_baseline", "--slots", "r0c0", "r0c1", "r0c2"),
    *("--episode-length", "5", "--train-samples", "200", "--val-samples", "100", "--batch-size", "25", "--quiet"),
)


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timed(run: Callable[[], object], barrier: Callable[[], None], repeats: int) -> list[float]:
    """Microseconds of `run`, each sample started right after a barrier (three unrecorded warm-up calls first)."""
    samples = []
    for index in range(repeats + 3):
        barrier()
        start = time.perf_counter()
        run()
        if index >= 3:
            samples.append((time.perf_counter() - start) * 1e6)
    return samples


def rank_payloads(setup: Any, hub: Any, shard: Any) -> tuple[list[Any], list[Any]]:
    """This rank's envs' observations and outcomes after a first epoch, built by the trainer's own code."""
    from esper.simic.training import wiring
    from esper.simic.training.observations import observe_env
    from esper.simic.training.parallel_env_state import EnvOutcome

    engine = wiring.build_engine(setup)
    parts = wiring.trainer_parts(setup, hub, engine, shard=shard)
    envs = parts.env_factory.create_envs(0, shard.env_ids)
    for env in envs:
        env.signals = env.signal_tracker.update(1, 2.3, 10.0)
    engine.close()
    return [observe_env(env, max_seeds=None) for env in envs], [EnvOutcome.of(env, 0.1, 0, False) for env in envs]


def build_observations_of(observations: list[Any], shard: Any, setup: Any) -> Any:
    """The K-env batch every rank feeds the policy, from this rank's observations."""
    from esper.simic.training.observations import build_observations

    envs: list[Any] = []
    batch = build_observations(
        envs, max_seeds=None, device=setup.devices[0], exchange=lambda _: shard.gather(observations)
    )
    return batch


def collectives(n_envs: int, repeats: int) -> list[dict[str, Any]]:
    """Every exchange of a sharded run, timed on this rank with the trainer's real payloads."""
    from esper.nissa import TelemetryHub
    from esper.simic.training import wiring
    from esper.simic.training.config import TrainingConfig
    from esper.simic.training.launch import open_shard

    config = TrainingConfig.from_dict({"n_envs": n_envs, "slots": ["r0c0", "r0c1", "r0c2"], "train_samples": 50})
    with open_shard(n_envs, "cpu", None) as shard:
        setup = wiring.prepare_run(config, "ppo", shard)
        hub = TelemetryHub()
        observations, outcomes = rank_payloads(setup, hub, shard)
        batch = build_observations_of(observations, shard, setup)
        setup.client.begin_round(n_envs)
        exchanges: dict[str, Callable[[], object]] = {
            "policy act on all K envs (replicated, not a collective)": lambda: setup.client.act(batch),
            "gather observations (all_gather_object)": lambda: shard.gather(observations),
            "gather outcomes (all_gather_object)": lambda: shard.gather(outcomes),
            "stop agreement (all_reduce, 1 int)": lambda: shard.any(False),
            "replica check (digest + all_gather_object)": lambda: shard.check_replicas(setup.client.state_dict, 0),
            "barrier": shard.barrier,
            "share a name (broadcast_object_list)": lambda: shard.share("telemetry_run"),
        }
        rows = []
        for name, run in exchanges.items():
            samples = timed(run, shard.barrier, repeats)
            rows.append({"exchange": name, "median_us": statistics.median(samples), "p90_us": percentile(samples, 0.9)})
        hub.close()
        rows.append({"ranks": shard.world_size, "envs": n_envs, "rank": shard.rank})
    return rows


def one_run(ranks: int, n_envs: int, rounds: int, folder: Path) -> dict[str, Any]:
    """One training run (ranks 0: a plain process) and its env-epochs per second, read from its events."""
    argv = [*TRAIN, "--envs", str(n_envs), "--rounds", str(rounds), "--telemetry-dir", str(folder)]
    argv += ["--run-name", f"ranks{ranks}"]
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"] if ranks else []
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    load_before = os.getloadavg()[0]
    subprocess.run([sys.executable, *launcher, "-m", "esper.scripts.train", *argv], check=True, env=env)
    events = [json.loads(line) for line in (folder / f"ranks{ranks}" / "events.jsonl").read_text().splitlines()]
    timing = [e["data"] for e in events if e["data"].get("kind") == "throughput"][1:]  # rounds after the first
    updates = [e["data"]["update_time_ms"] for e in events if e["event_type"] == "PPO_UPDATE_COMPLETED"]
    stamps = [
        datetime.fromisoformat(e["timestamp"])
        for e in events
        if e["event_type"] in ("TRAINING_STARTED", "TRAINING_ENDED")
    ]
    wall = (stamps[-1] - stamps[0]).total_seconds()
    return {
        "ranks": ranks or "one process",
        "epoch_ms": statistics.median(t["step_time_ms"] for t in timing),
        "ppo_update_ms": statistics.median(updates),
        "loop_env_epochs_per_s": statistics.median(t["env_epochs_per_s"] for t in timing),
        "run_env_epochs_per_s": n_envs * rounds * int(TRAIN[TRAIN.index("--episode-length") + 1]) / wall,
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def throughput(n_envs: int, rounds: int, ranks: Sequence[int]) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as folder:
        return [one_run(n, n_envs, rounds, Path(folder)) for n in (0, *ranks)]


def table(rows: Sequence[dict[str, Any]]) -> str:
    shown = [row for row in rows if "rank" not in row]
    keys = list(shown[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for row in shown:
        lines.append("| " + " | ".join(f"{v:.1f}" if isinstance(v, float) else str(v) for v in row.values()) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m esper.scripts.scaling", description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["collectives", "throughput"])
    parser.add_argument("--envs", type=int, default=8, help="K, the number of envs (default: 8)")
    parser.add_argument("--repeats", type=int, default=200, help="samples per exchange (default: 200)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per throughput run (default: 3)")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4], help="rank counts (default: 1 2 4)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures here")
    args = parser.parse_args(argv)
    if args.what == "collectives":
        rows = collectives(args.envs, args.repeats)
        if rows[-1]["rank"] != 0:
            return 0
    else:
        rows = throughput(args.envs, args.rounds, args.ranks)
    print(table(rows))
    print(f"load average {', '.join(f'{v:.2f}' for v in os.getloadavg())} on {os.cpu_count()} cores")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
