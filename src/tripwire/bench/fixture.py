"""Timed benchmark rounds for pytest-benchmark: CUDATimer per round, an interleaved calibration, gate metadata.

`measure(benchmark, workload, spec, calibration)` drives a pytest-benchmark fixture in pedantic mode. Each round
first calls `workload.prepare()` and times one calibration pass (untimed by pytest-benchmark), then times
`workload.run()` with `tripwire.timing.CUDATimer`: CUDA events on the stream doing the work when the device is
CUDA, `perf_counter` on CPU. On CUDA the timer's stop waits on its end event, so pytest-benchmark's own
wall-clock figures cover the queued kernels too rather than launch time only.

Every round (and calibration pass) also records the process CPU time it used. On a CPU device the gate judges
that clock (`clock="cpu"`): on a shared runner wall time mostly measures the neighbours (an A/A run on a 2-core
machine shared by four jobs swung 2-4x), while the CPU time this process spends is barely touched by them.
Its blind spot is time spent waiting (sleeps, worker processes, locks); the wall-clock figures are still recorded
and reported. On CUDA the gate judges the CUDA-event times (`clock="wall"`).

The per-round samples, the calibration samples, the work units per round (e.g. env-epochs, samples) and the
gate settings go to `benchmark.extra_info["tripwire"]`, where `tripwire.bench` reads them back from the
`--benchmark-json` file. The calibration workload is a fixed plain-PyTorch conv-net training step that no
trainer change can touch: timings are compared as ratios to it, so a baseline recorded on one machine gates
on another.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import torch
from torch import nn

from tripwire.bench.store import TIME_METRIC, TRIPWIRE_KEY
from tripwire.timing import CUDATimer


class Workload(Protocol):
    """What a benchmark times: `prepare()` (untimed, before each round) then `run()` (timed)."""

    def prepare(self) -> None: ...

    def run(self) -> None: ...


@dataclass(frozen=True)
class BenchSpec:
    """How one benchmark is run and gated.

    `units`: work done by one `run()` ({"env_epochs": 2, "samples": 2000}); each becomes a `<unit>_per_s` figure.
    `metric`: the gated figure, `time_ms` (lower is better) or `<unit>_per_s` (higher is better).
    `threshold`: the smallest relative change that counts (0.10 = 10 %), judged on calibration-normalized values.
    `alpha`: the significance level of the one-sided Mann-Whitney U test between baseline and current rounds.
    """

    units: dict[str, float]
    metric: str = TIME_METRIC
    threshold: float = 0.10
    alpha: float = 0.01
    rounds: int = 10
    warmup: int = 1
    proxies: dict[str, int] = field(default_factory=dict)
    clock: str = "auto"  # "cpu" (process CPU time), "wall" (CUDATimer), "auto": cpu on a CPU device, else wall

    def __post_init__(self) -> None:
        if self.metric != TIME_METRIC and self.metric.removesuffix("_per_s") not in self.units:
            raise ValueError(f"metric {self.metric!r} needs a unit {self.metric.removesuffix('_per_s')!r} in units")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold must be a fraction in (0, 1), got {self.threshold}")
        if self.rounds < 3:
            raise ValueError(f"a gated benchmark needs at least 3 rounds, got {self.rounds}")
        if self.clock not in ("auto", "cpu", "wall"):
            raise ValueError(f"clock must be auto, cpu or wall, got {self.clock!r}")


class CalibrationWorkload:
    """A fixed plain-PyTorch workload (small conv net, SGD step) timed next to every round as a machine yardstick."""

    def __init__(self, device: torch.device | str = "cpu", *, steps: int = 1, batch: int = 32) -> None:
        self.device = torch.device(device)
        self.steps = steps
        generator = torch.Generator().manual_seed(1234)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(1234)
            self.model = nn.Sequential(
                nn.Conv2d(3, 16, 3, padding=1),
                nn.BatchNorm2d(16),
                nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Conv2d(16, 32, 3, padding=1),
                nn.BatchNorm2d(32),
                nn.ReLU(),
                nn.AdaptiveAvgPool2d(1),
                nn.Flatten(),
                nn.Linear(32, 10),
            ).to(self.device)
        self.inputs = torch.randn(batch, 3, 32, 32, generator=generator).to(self.device)
        self.targets = torch.randint(0, 10, (batch,), generator=generator).to(self.device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)

    def run(self) -> None:
        for _ in range(self.steps):
            self.optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(self.model(self.inputs), self.targets)
            loss.backward()
            self.optimizer.step()

    def measure_ms(self) -> tuple[float, float]:
        """One timed calibration pass: (wall or CUDA-event milliseconds, process CPU milliseconds)."""
        timer = CUDATimer(self.device)
        cpu_start = time.process_time()
        timer.start()
        self.run()
        wall = timer.stop()
        return wall, (time.process_time() - cpu_start) * 1000.0


@dataclass
class RoundLog:
    """What the rounds of one benchmark recorded (the JSON payload under extra_info["tripwire"])."""

    device: str
    timer: str
    samples_ms: list[float] = field(default_factory=list)
    calibration_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    calibration_cpu_ms: list[float] = field(default_factory=list)


class _Rounds:
    """The pedantic setup/target pair: calibration in setup, the timed run in the target."""

    def __init__(self, workload: Workload, calibration: CalibrationWorkload, device: torch.device) -> None:
        self.workload = workload
        self.calibration = calibration
        self.timer = CUDATimer(device)
        self.log = RoundLog(device=str(device), timer=self.timer.kind)

    def setup(self) -> None:
        self.workload.prepare()
        wall, cpu = self.calibration.measure_ms()
        self.log.calibration_ms.append(wall)
        self.log.calibration_cpu_ms.append(cpu)

    def target(self) -> None:
        cpu_start = time.process_time()
        self.timer.start()
        self.workload.run()
        self.log.samples_ms.append(self.timer.stop())
        self.log.cpu_ms.append((time.process_time() - cpu_start) * 1000.0)


def run_rounds(workload: Workload, spec: BenchSpec, calibration: CalibrationWorkload) -> RoundLog:
    """Warm up, then run `spec.rounds` calibrated, timed rounds without pytest-benchmark (tests, probes)."""
    rounds = _Rounds(workload, calibration, calibration.device)
    for _ in range(spec.warmup):
        workload.prepare()
        workload.run()
    for _ in range(spec.rounds):
        rounds.setup()
        rounds.target()
    return rounds.log


def measure(benchmark: Any, workload: Workload, spec: BenchSpec, calibration: CalibrationWorkload) -> RoundLog:
    """Time `workload` with a pytest-benchmark fixture and record the gate's data in `benchmark.extra_info`."""
    for _ in range(spec.warmup):
        workload.prepare()
        workload.run()
    rounds = _Rounds(workload, calibration, calibration.device)
    benchmark.pedantic(rounds.target, setup=rounds.setup, rounds=spec.rounds, iterations=1, warmup_rounds=0)
    record(benchmark.extra_info, rounds.log, spec)
    return rounds.log


def record(extra_info: dict[str, Any], log: RoundLog, spec: BenchSpec) -> None:
    """Write the human figures (median time, throughput per unit) and the gate payload into `extra_info`."""
    median_ms = statistics.median(log.samples_ms)
    extra_info["time_ms"] = median_ms
    for unit, amount in spec.units.items():
        extra_info[f"{unit}_per_s"] = 1000.0 * amount / median_ms if median_ms > 0 else 0.0
    extra_info[TRIPWIRE_KEY] = {
        **asdict(log),
        "units": dict(spec.units),
        "metric": spec.metric,
        "threshold": spec.threshold,
        "alpha": spec.alpha,
        "proxies": dict(spec.proxies),
        "clock": resolve_clock(spec.clock, log.device),
    }


def resolve_clock(clock: str, device: str) -> str:
    """The clock the gate judges: `auto` is process CPU time on a CPU device and CUDA-event time on a GPU."""
    if clock != "auto":
        return clock
    return "cpu" if device.split(":", 1)[0] == "cpu" else "wall"
