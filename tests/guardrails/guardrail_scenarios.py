"""The gate's canonical scenarios: CLI command lines run in-process with a trajectory probe and counters.

Each scenario is a `python -m esper.scripts.train ...` argument list (so it can be replayed by hand) plus,
where the CLI has no flag for it, extra TrainingConfig keys passed as a `--config-json` file. Running one
returns its telemetry events (wire dicts), its trajectory (digests at every epoch/round checkpoint), the
SyncCounter that watched it and the CompileCounter that saw what torch.compile did. A scenario with `ranks > 1`
runs on that many torchrun ranks (gloo on localhost, `distributed_scenario.py`): its trajectory is merged into the
single-process order, its events are the run's merged events.jsonl, and its counter holds every rank's syncs and
collectives.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
from distributed_scenario import RankLaunch, collect_ranks, start_ranks

from esper.nissa import InMemoryBackend, TelemetryHub
from esper.scripts.train import build_parser, config_from_args
from esper.simic.training.parallel_env_state import ParallelEnvState
from esper.simic.training.policy_client import PolicyClient
from esper.simic.training.vectorized import run_training
from tripwire.bitwise.settings import SettingChange, SettingsWatch
from tripwire.bitwise.trajectory import Trajectory, TrajectoryRecorder
from tripwire.bitwise.vendor_ops import VendorBoundOps
from tripwire.common.context import capture_context
from tripwire.compile.counter import CompileCounter
from tripwire.compile.traced import TracedLines, add_to_coverage
from tripwire.sync import ignore_syncs
from tripwire.sync.counter import SyncCounter
from tripwire.telemetry.payloads import DEFAULT_EXCLUDED

# Call sites are named relative to the tree's root, wherever the run starts: a base tree recorded for `--against` from
# another folder would otherwise name every site `build/against/<sha>/src/...`, and every unchanged line MOVED.
TREE_ROOT = Path(__file__).resolve().parents[2]
LIFECYCLE = ("heuristic", "--task", "cifar_baseline", "--envs", "4", "--slots", "r0c0", "r0c1", "r0c2")
ROUND_END = "ANALYTICS_SNAPSHOT:throughput"  # esper's last per-round event (pyproject's tripwire_round_end too)
HOT_REGIONS = ("train_pass", "fused_validation", "epoch_transfer", "action_transfer")  # budgeted even at 0
SIZES = ("--train-samples", "200", "--val-samples", "100", "--batch-size", "25", "--quiet")
SMALL = ("--train-samples", "100", "--val-samples", "50", "--batch-size", "25", "--quiet")
TINY = ("--train-samples", "24", "--val-samples", "6")  # the tiny CIFAR-10 copy holds 30 and 6 images
PPO_A = ("ppo", "--preset", "cifar_baseline", "--task", "cifar_baseline", "--envs", "1", "--episode-length", "5")

# Payload fields that differ between two runs of the same scenario however deterministic the trainer is, left out
# of the payload goldens (beside tripwire's own event_id and timestamp): durations and rates measured on the wall
# clock (batch_stats / BATCH_EPOCH_COMPLETED, throughput, PPO_UPDATE_COMPLETED) ...
WALL_CLOCK_FIELDS = (
    "data.train_time_s",
    "data.env_epochs_per_s",
    "data.update_time_ms",
    "data.step_time_ms",
    "data.fps",
    "data.samples_per_s",
)
# ... and where the run's files are (CHECKPOINT_LOADED names the checkpoint it resumed from).
RUN_LOCATION_FIELDS = ("data.path",)
PAYLOAD_EXCLUDED = (*DEFAULT_EXCLUDED, *WALL_CLOCK_FIELDS, *RUN_LOCATION_FIELDS)


def cli(line: str, *more: str) -> tuple[str, ...]:
    """A command line as the argument tuple a scenario holds."""
    return (*line.split(), *more)


@dataclass(frozen=True)
class GateScenario:
    """One canonical run: CLI arguments, extra config keys, what it is for, and the lifecycle events it must show."""

    name: str
    argv: tuple[str, ...]
    purpose: str = ""  # one line: what the gate sees through this run that the others leave out
    config_json: dict[str, Any] = field(default_factory=dict)
    must_occur: tuple[str, ...] = ()
    ranks: int = 1  # > 1: sharded over that many torchrun ranks
    # "cifar10": a tiny CIFAR-10 folder in the official format; "imagefolder": a tiny folder of PNGs by class; each
    # written for the run (`--data-dir`)
    data: str = ""

    def with_args(self, *extra: str, name: str | None = None) -> GateScenario:
        """The same scenario with more CLI arguments (later flags win)."""
        return replace(self, name=name or self.name, argv=(*self.argv, *extra), config_json=dict(self.config_json))

    def with_purpose(self, purpose: str) -> GateScenario:
        return replace(self, purpose=purpose)

    def command_line(self) -> str:
        """The `python -m esper.scripts.train` arguments as a user types them (the written data folder named)."""
        data = ("--data-dir", f"<a tiny {self.data} folder written for the run>") if self.data else ()
        return " ".join((*self.argv, *data))


A_BASELINE = GateScenario(
    "a_baseline",
    (*PPO_A, "--rounds", "1", *SIZES),
    "one PPO round on one env: the validation command of the refactor plans",
)
B_LIFECYCLE = GateScenario(
    "b_lifecycle",
    (*LIFECYCLE, "--rounds", "2", "--episode-length", "8", "--seed", "42", *SIZES),
    "4 envs, 3 slots, 2 rounds: seeds germinate, fossilize and are pruned",
    must_occur=("SEED_GERMINATED", "SEED_FOSSILIZED", "SEED_PRUNED"),
)
# (e): (a) with two envs sharded over 2 ranks (one env each), so it must equal the single-process a_two_envs bitwise.
TWO_ENVS = A_BASELINE.with_args("--envs", "2", "--train-samples", "100", name="a_two_envs")
# The canonical scenarios, in order, built once: `nox -s guardrails` runs each against its goldens. Adding one is one
# entry here (docs/guardrails.md's table and the README follow it; tests/guardrails/test_scenario_list.py checks).
ORDER: tuple[GateScenario, ...] = (
    A_BASELINE,
    B_LIFECYCLE,
    GateScenario(
        "c_rollback",
        (*PPO_A, "--rounds", "1", *SIZES),
        "a forced governor rollback: env 0's loss turns NaN at epoch 3",
        config_json={"inject_nan_epoch": 3},
        must_occur=("GOVERNOR_ROLLBACK",),
    ),
    GateScenario(
        "d_resume",
        (*PPO_A, "--rounds", "2", *SIZES),
        "save and resume: round 1 resumed from (a)'s checkpoint",
        must_occur=("CHECKPOINT_LOADED",),
    ),
    GateScenario(
        "e_distributed",
        TWO_ENVS.argv,
        "two envs sharded over two torchrun ranks (gloo), equal to the one-process run bitwise",
        ranks=2,
    ),
    # aot_eager: dynamo breaks and recompiles exactly as for inductor (the backend only receives the graphs),
    # AOTAutograd runs as for inductor, and the graphs run on ATen's own kernels, so the trajectory golden travels
    # under the AVX2 pin where inductor's generated kernels would be the compiling CPU's.
    GateScenario(
        "f_compiled",
        (*PPO_A, "--rounds", "1", *SIZES, "--compile", "aot_eager"),
        "(a) with the policy network compiled, equal to (a) bitwise",
    ),
    # (g) and (h): the configuration a user reaches that (a)-(f) leave at its defaults (`nox -s guardrails` reports
    # the fields no scenario moves off its default).
    GateScenario(
        "g_preset_and_flags",
        cli(
            "ppo --preset cifar_baseline_stable --task cifar_minimal --envs 2 --episode-length 5 --rounds 2"
            " --ppo-epochs 2 --memory-size 64 --lr 0.0005 --max-seeds 1 --seed 7",
            *SMALL,
        ),
        "another preset, a --config-json the flags override, another task, reward and PPO settings",
        config_json={
            "lr": 0.001,  # overridden by --lr
            "lstm_hidden_dim": 128,  # overridden by --memory-size
            "hidden_dim": 64,
            "gamma": 0.97,
            "gae_lambda": 0.9,
            "value_coef": 0.5,
            "max_policy_grad_norm": 1.0,
            "target_kl": 0.05,
            "max_grad_norm": 0.5,
            "reward_mode": "simplified",
            "param_budget": 100000,
            "improvement_threshold": 0.5,
            "permissive_gates": False,
        },
    ),
    GateScenario(
        "h_escrow_workers",
        cli(
            "ppo --task cifar_impaired --reward-mode escrow --env-workers 2 --envs 2 --episode-length 5 --rounds 1"
            " --telemetry-level debug --augment --no-normalize --dataset esper.data.digits:load",
            *SMALL,
        ),
        "the escrow reward, two env worker threads, debug telemetry and real data through a user's loader",
    ),
    GateScenario(
        "i_cifar_files",
        cli("ppo --dataset cifar10 --envs 1 --episode-length 4 --rounds 1 --batch-size 6 --quiet", *TINY),
        "CIFAR-10's official on-disk batches through the real loader, its augmentation on",
        data="cifar10",
    ),
    GateScenario(
        "j_image_folder",
        cli("ppo --dataset imagefolder --envs 1 --episode-length 4 --rounds 1 --batch-size 6 --quiet", *TINY),
        "your own images as a folder tree (torchvision's ImageFolder), the reader no other scenario runs",
        data="imagefolder",
    ),
    # aot_eager for the reason (f) uses it: ATen's own kernels, so the golden travels under the AVX2 pin and (k) must
    # equal (b) bitwise; its compile budget says when the step is captured again.
    B_LIFECYCLE.with_args("--compile-step", "aot_eager", name="k_compiled_step").with_purpose(
        "(b) with each env's train step compiled (aot_eager): captured again whenever a seed changes the model"
    ),
)
SCENARIOS: dict[str, GateScenario] = {scenario.name: scenario for scenario in ORDER}
COMPILED = ("f_compiled", "k_compiled_step")  # scenarios with a compile budget


def scenario_table() -> str:
    """The scenarios as docs/guardrails.md lists them (generated; tests/guardrails/test_scenario_list.py compares)."""
    rows = ["| scenario | what it is for | command line | must show |", "|---|---|---|---|"]
    for scenario in ORDER:
        line = f"`{scenario.command_line()}`"
        if scenario.config_json:
            count = len(scenario.config_json)
            line += f" + `--config-json` of {count} key{'s' if count > 1 else ''}"
        if scenario.ranks > 1:
            line += f" on {scenario.ranks} torchrun ranks"
        rows.append(f"| `{scenario.name}` | {scenario.purpose} | {line} | {', '.join(scenario.must_occur)} |")
    return "\n".join(rows)


# Payload fields of a sharded run's events that a single process's events do not have.
RANK_FIELDS = ("rank",)


class TrajectoryProbe:
    """The trainer's `TrainingProbe`: digests env weights, actions, rewards and the updated policy."""

    def __init__(self, recorder: TrajectoryRecorder) -> None:
        self.recorder = recorder

    def after_train_pass(self, round_idx: int, epoch: int, envs: Sequence[ParallelEnvState]) -> None:
        for env in envs:  # a sharded run's rank sees only its envs: the checkpoint is named by the env's id
            with ignore_syncs():  # the probe's reads: neither counted nor paid for under the counting modes
                state = {"model": env.model.state_dict(), "optimizer": env.runtime.host_optimizer.state_dict()}
            self.recorder.record(f"r{round_idx}/e{epoch}/env{env.env_id}/train", state)

    def after_actions(
        self, round_idx: int, epoch: int, heads: Sequence[Sequence[int]], rewards: Sequence[float]
    ) -> None:
        for position, (env_heads, reward) in enumerate(zip(heads, rewards)):
            self.recorder.record(f"r{round_idx}/e{epoch}/env{position}/actions", [int(h) for h in env_heads])
            self.recorder.record(f"r{round_idx}/e{epoch}/env{position}/reward", float(reward))

    def after_record(self, round_idx: int, epoch: int, policy: PolicyClient) -> None:
        with ignore_syncs():
            states = policy.normalizer_states()
        for name, state in states.items():
            self.recorder.record(f"r{round_idx}/e{epoch}/{name}", state)

    def after_update(self, round_idx: int, policy: PolicyClient) -> None:
        # The normalizers first: a normalizer updated twice is named there, not at the policy it feeds.
        with ignore_syncs():
            states, policy_state, rng = policy.normalizer_states(), policy.state_dict(), torch.get_rng_state()
        for name, state in states.items():
            self.recorder.record(f"r{round_idx}/{name}", state)
        self.recorder.record(f"r{round_idx}/policy", policy_state)
        self.recorder.record(f"r{round_idx}/rng", rng)


@dataclass
class ScenarioRun:
    """What one run produced."""

    scenario: GateScenario
    events: list[dict[str, Any]]
    trajectory: Trajectory
    counter: SyncCounter
    compiles: CompileCounter = field(default_factory=CompileCounter)  # what torch.compile did
    # the determinism settings the run changed, each at its line (None: not watched, a run on torchrun ranks)
    settings: list[SettingChange] | None = None
    wall_s: float = 0.0  # the run's wall time (ranks: its events' span), for the clock check
    # the CPU ops whose bits follow the CPU's vendor that the run called, each with its line (`VendorBoundOps`)
    vendor_ops: list[str] = field(default_factory=list)

    def count(self, event_type: str) -> int:
        return sum(1 for event in self.events if event["event_type"] == event_type)


# The one place the trainer changes a determinism setting: deterministic CUDA kernels, on a CUDA run only
DETERMINISM_SETTER = "src/esper/tolaria/determinism.py:"


def stray_settings(run: ScenarioRun) -> list[SettingChange]:
    """The determinism settings the run changed anywhere but the trainer's determinism module: a CPU no-op such as
    `torch.backends.cudnn.benchmark = True` breaks every GPU run's reproducibility, and only its line shows it here."""
    return [change for change in run.settings or () if not change.site.startswith(DETERMINISM_SETTER)]


def scenario_config(scenario: GateScenario, workdir: Path, *extra: str) -> tuple[Any, str]:
    """(TrainingConfig, controller) exactly as the CLI would build them for this scenario."""
    argv = [*scenario.argv, *extra]
    if scenario.data:  # the on-disk format a user has, written where the run reads it
        sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # tests/, where the writers live
        from cifar_files import write_tiny_cifar, write_tiny_image_folder

        folder = workdir / f"{scenario.name}.data"
        if folder.exists():
            shutil.rmtree(folder)
        write = {"cifar10": write_tiny_cifar, "imagefolder": write_tiny_image_folder}[scenario.data]
        argv += ["--data-dir", str(write(folder))]
    if scenario.config_json:
        workdir.mkdir(parents=True, exist_ok=True)
        path = workdir / f"{scenario.name}.config.json"
        path.write_text(json.dumps(scenario.config_json), encoding="utf-8")
        argv += ["--config-json", str(path)]
    args = build_parser().parse_args(argv)
    return config_from_args(args), args.command


@contextmanager
def single_threaded() -> Iterator[None]:
    """Scenarios run on one intra-op thread (as under the gate's OMP_NUM_THREADS=1), whatever the caller set."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def run_scenario(
    scenario: GateScenario, workdir: Path, *extra: str, recorder: TrajectoryRecorder | None = None, probe: bool = True
) -> ScenarioRun:
    """Run in-process under a SyncCounter with a trajectory probe (unless `probe=False`); events stay in memory.
    A scenario with `ranks > 1` runs on torchrun ranks instead (`start_ranked`, `finish_ranked`)."""
    if scenario.ranks > 1:
        return finish_ranked(start_ranked(scenario, workdir, *extra))
    config, controller = scenario_config(scenario, workdir, *extra)
    hub = TelemetryHub()
    backend = InMemoryBackend()
    hub.add_backend(backend)
    with single_threaded():
        if recorder is None:  # never `recorder or ...`: an empty recorder is falsy (it has a length)
            recorder = TrajectoryRecorder(context=capture_context(config.device))
        torch._dynamo.reset()  # each scenario compiles afresh, whatever ran before it in the session
        with (
            SettingsWatch() as settings,
            CompileCounter(root=TREE_ROOT) as compiles,
            SyncCounter(root=TREE_ROOT) as counter,
            TracedLines() as traced,
            VendorBoundOps(TREE_ROOT) as vendor,
        ):
            observer = TrajectoryProbe(recorder) if probe else None
            started = time.perf_counter()
            run_training(config, controller=controller, hub=hub, probe=observer)
            wall_s = time.perf_counter() - started
        add_to_coverage(traced.lines, TREE_ROOT / "src")  # compiled code (f, k) ran, though coverage.py cannot see it
    hub.close()
    events = [event.to_json_dict() for event in backend.events]
    return ScenarioRun(
        scenario, events, recorder.trajectory, counter, compiles, settings.changes, wall_s, vendor.lines()
    )


@dataclass
class RankedScenario:
    """A ranked scenario launched in the background."""

    scenario: GateScenario
    launch: RankLaunch


def start_ranked(scenario: GateScenario, workdir: Path, *extra: str) -> RankedScenario:
    """Launch a ranked scenario (it runs beside whatever the caller does next)."""
    out = workdir / f"{scenario.name}.ranks"
    if out.exists():
        shutil.rmtree(out)
    return RankedScenario(scenario, start_ranks(scenario.ranks, [*scenario.argv, *extra], out, scenario.name))


def finish_ranked(ranked: RankedScenario) -> ScenarioRun:
    """Wait for a ranked scenario; its ranks read back as one run."""
    run = collect_ranks(ranked.launch)
    counter = SyncCounter()
    counter.events = run.sync_events
    span = events_span(run.events)
    return ScenarioRun(ranked.scenario, run.events, run.trajectory, counter, wall_s=span, vendor_ops=run.vendor_ops)


def events_span(events: Sequence[dict[str, Any]]) -> float:
    """Seconds from the first event's timestamp to the last's: a ranked run's own wall time (its launch and the
    moment it is collected depend on what ran beside it)."""
    stamps = [datetime.fromisoformat(event["timestamp"]) for event in events if event.get("timestamp")]
    return (max(stamps) - min(stamps)).total_seconds() if len(stamps) > 1 else 0.0


def main(argv: Sequence[str]) -> int:
    """`python guardrail_scenarios.py NAME OUT.json [extra CLI args]`: run a scenario, write its trajectory."""
    name, out, *extra = argv
    run = run_scenario(SCENARIOS[name], Path(out).parent, *extra)
    run.trajectory.save(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
