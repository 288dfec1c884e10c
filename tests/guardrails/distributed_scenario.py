"""A scenario on the ranks of a local torchrun launch (gloo, localhost), recorded as the gate records one process.

    python -m torch.distributed.run --standalone --nproc-per-node N distributed_scenario.py OUT ARGV...
    python distributed_scenario.py --fork N OUT ARGV...   (the same ranks, forked from one warm process)

Each rank builds its config from the `python -m esper.scripts.train` command line ARGV, opens its shard as the
CLI does under torchrun (`launch.open_shard`), and runs `run_training` with the gate's trajectory probe under
a SyncCounter. It writes OUT/rank<r>.json (its trajectory and every sync it made) and OUT/rank<r>.weights.pt (its
final weights: its own envs' and the policy replica). `--fork N` is a warm launcher for tests: it imports torch
and the trainer once and forks the N ranks with the environment torchrun gives them (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT; rank 0 hosts the store), saving each rank's start-up and torchrun's own
(seconds each on the shared 2-core test machine); the ranks run the same code as under torchrun, from
`open_shard` on. `start_ranks` launches either way in the background,
`collect_ranks` reads the ranks back as one run: the trajectory merged into the single-process order (checkpoints
every rank records must agree bitwise across ranks), the merged events.jsonl, and all ranks' syncs in one counter.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tripwire.bitwise.trajectory import Trajectory
from tripwire.sync.state import SyncEvent

ROOT = Path(__file__).resolve().parents[2]
STOP_GRACE_S = 30  # for torchrun to stop its ranks after SIGTERM
LAUNCH_TIMEOUT_S = 300


@dataclass
class RankLaunch:
    """A torchrun launch in the background, and where its ranks write."""

    process: subprocess.Popen[str]
    out: Path
    ranks: int
    events: Path  # the merged events.jsonl the run writes


@dataclass
class RankedRun:
    """What the ranks of one launch produced, read back as one run."""

    trajectory: Trajectory
    events: list[dict[str, Any]]
    sync_events: list[SyncEvent]
    weights: list[dict[str, torch.Tensor]]  # per rank
    vendor_ops: list[str]  # every rank's `VendorBoundOps` lines, rank by rank


def torchrun_command(ranks: int, script: Sequence[str]) -> list[str]:
    """`python -m torch.distributed.run --standalone --nproc-per-node N SCRIPT...` (localhost, gloo)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", *script]


def start_ranks(
    ranks: int, argv: Sequence[str], out: Path, run_name: str = "ranked", *, fork: bool = False
) -> RankLaunch:
    """Launch ARGV on `ranks` ranks (torchrun, or `fork`ed from one warm process) with its telemetry under OUT;
    returns at once."""
    out.mkdir(parents=True, exist_ok=True)
    argv = [*argv, "--telemetry-dir", str(out / "telemetry"), "--run-name", run_name]
    script = [str(Path(__file__)), str(out), *argv]
    command = (
        [sys.executable, script[0], "--fork", str(ranks), *script[1:]] if fork else torchrun_command(ranks, script)
    )
    env = {**os.environ, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0"), "OMP_NUM_THREADS": "1"}
    # A session of its own, so `stop_ranks` can signal the launcher's whole group. The ranks are in sessions of their
    # own (torchrun's): they stop when torchrun, on SIGTERM, stops them (a rank left behind would hold the output pipe
    # open, and the launcher's `communicate()` would wait for it).
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    return RankLaunch(process, out, ranks, out / "telemetry" / run_name / "events.jsonl")


def stop_ranks(launch: RankLaunch) -> None:
    """End a launch that may still run, then collect its output. torchrun starts each rank in a session of its own,
    so killing the launcher's group would orphan them (they then wait for the launcher's store, holding the output
    pipe, and `communicate()` with them): SIGTERM first, which torchrun forwards to its ranks, then SIGKILL."""
    if launch.process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launch.process.pid, signal.SIGTERM)
        try:
            launch.process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(launch.process.pid, signal.SIGKILL)
    launch.process.communicate(timeout=LAUNCH_TIMEOUT_S)


def wait_ranks(launch: RankLaunch) -> str:
    """Wait for the launch; its output, or an AssertionError with the output's tail when it failed."""
    try:
        output, _ = launch.process.communicate(timeout=LAUNCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        stop_ranks(launch)
        raise AssertionError(f"torchrun did not finish in {LAUNCH_TIMEOUT_S} s: its ranks were stopped") from None
    assert launch.process.returncode == 0, f"torchrun exited {launch.process.returncode}:\n{output[-4000:]}"
    return output


def collect_ranks(launch: RankLaunch) -> RankedRun:
    """Wait for the launch and read its ranks back as one run."""
    wait_ranks(launch)
    records = [json.loads((launch.out / f"rank{r}.json").read_text(encoding="utf-8")) for r in range(launch.ranks)]
    trajectories = [Trajectory.from_json(record["trajectory"]) for record in records]
    lines = launch.events.read_text(encoding="utf-8").splitlines()
    return RankedRun(
        trajectory=merge_trajectories(trajectories),
        events=[json.loads(line) for line in lines],
        sync_events=[SyncEvent(**event) for record in records for event in record["syncs"]],
        weights=[torch.load(launch.out / f"rank{r}.weights.pt", weights_only=True) for r in range(launch.ranks)],
        vendor_ops=[f"rank {r}: {line}" for r, record in enumerate(records) for line in record["vendor_ops"]],
    )


def merge_trajectories(trajectories: Sequence[Trajectory]) -> Trajectory:
    """The ranks' trajectories as one process records it.

    A checkpoint every rank records (actions, rewards, normalizers, the policy) must be bitwise equal on every
    rank; the others (each rank's own envs' weights) are placed before the next shared checkpoint, in rank order,
    which is env-id order since every rank holds a contiguous block of envs.
    """
    names = [set(trajectory.names()) for trajectory in trajectories]
    shared = [name for name in trajectories[0].names() if all(name in seen for seen in names)]
    position = {name: index for index, name in enumerate(shared)}
    reference = dict(trajectories[0].checkpoints)
    placed: list[tuple[tuple[int, int, int], str, dict[str, str]]] = []
    for rank, trajectory in enumerate(trajectories):
        pending: list[tuple[int, str, dict[str, str]]] = []
        for index, (name, digests) in enumerate(trajectory):
            if name not in position:
                pending.append((index, name, digests))
                continue
            if digests != reference[name]:
                raise AssertionError(f"rank {rank} disagrees with rank 0 at shared checkpoint {name!r}")
            placed.extend(((position[name], rank, i), n, d) for i, n, d in pending)
            pending = []
            if rank == 0:
                placed.append(((position[name], len(trajectories), index), name, digests))
        placed.extend(((len(shared), rank, i), n, d) for i, n, d in pending)
    placed.sort(key=lambda item: item[0])
    return Trajectory([(name, digests) for _, name, digests in placed], dict(trajectories[0].context))


def main(argv: Sequence[str]) -> int:
    """One rank: run ARGV as the CLI would under torchrun, with the probe and a sync counter; write OUT/rank<r>."""
    from guardrail_scenarios import TrajectoryProbe, single_threaded

    from esper.scripts.train import build_parser, config_from_args
    from esper.simic.training.launch import open_shard
    from esper.simic.training.vectorized import run_training
    from tripwire.bitwise.trajectory import TrajectoryRecorder
    from tripwire.bitwise.vendor_ops import VendorBoundOps
    from tripwire.common.context import capture_context
    from tripwire.sync.counter import SyncCounter

    out, *train_argv = argv
    args = build_parser().parse_args(train_argv)
    config = config_from_args(args)
    recorder = TrajectoryRecorder(context=capture_context(config.device))
    with single_threaded(), open_shard(config.n_envs, config.device, config.devices) as shard:
        with SyncCounter() as counter, VendorBoundOps() as vendor:
            result = run_training(config, controller=args.command, probe=TrajectoryProbe(recorder), shard=shard)
        rank = shard.rank
    record = {
        "trajectory": recorder.trajectory.to_json(),
        "syncs": [dataclasses.asdict(event) for event in counter.events],
        "vendor_ops": vendor.lines(),
    }
    Path(out, f"rank{rank}.json").write_text(json.dumps(record), encoding="utf-8")
    torch.save(result.final_weights, Path(out, f"rank{rank}.weights.pt"))
    return 0


def fork_ranks(ranks: int, argv: Sequence[str]) -> int:
    """The warm launcher: import once, fork one process per rank with torchrun's environment, wait for all."""
    import guardrail_scenarios  # noqa: F401  (the warm import: torch, the trainer and the gate)

    torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])  # its first construction imports torch._dynamo: seconds

    with socket.socket() as probe:  # a free port for rank 0's store
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    children = []
    for rank in range(ranks):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                env = {"RANK": rank, "LOCAL_RANK": rank, "WORLD_SIZE": ranks, "MASTER_PORT": port}
                os.environ.update({name: str(value) for name, value in env.items()}, MASTER_ADDR="127.0.0.1")
                code = main(argv)
            finally:
                sys.stdout.flush()
                os._exit(code)
        children.append(pid)
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]
    print(f"ranks exited with {codes}")
    return 0 if not any(codes) else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--fork"]:
        sys.exit(fork_ranks(int(sys.argv[2]), sys.argv[3:]))
    sys.exit(main(sys.argv[1:]))
