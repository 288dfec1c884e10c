"""The paired A/B driver: two persistent worker processes, units in ABBA order, a verdict per benchmark.

Each side (`Side`: a source tree, the folder its suite lives in, extra environment) runs in its own
`tripwire.bench.worker` process, started once, with the side's `src/` first on `PYTHONPATH` and, ahead of it, a
folder holding only this driver's own `tripwire` package (so both sides are timed and counted by the same
harness code, whatever tripwire version each tree carries). Only one worker computes at a time.

Per benchmark: warm-up units on both sides (discarded), then blocks of four units, ABBA then BAAB, until the
confidence interval of the paired ratio is resolved against the tolerance, the block limit is reached or the
benchmark's time budget is spent (never fewer than `min_blocks`). Before every block (`fresh_every`) both sides
build a fresh workload instance and warm it up: one instance's memory layout alone moved a policy call's time by
up to 55 % against another instance of the same code in the same process, so a side measured on one instance
would carry that luck as a bias; with a fresh pair per block it becomes noise that the interval accounts for.
Benchmarks of one thread in all (one torch thread, no worker threads of their own) run on one CPU shared by both
workers (`shared_cpu`); a benchmark of more threads keeps every CPU. Left to the scheduler, each
worker settles on a core of its own, and one core of a VM can run steadily slower than the other. Measured on the
2-core CI VM with the tiny suite of `tests/bench/test_bench_paired.py`, 8 A/A runs each: unpinned, estimates of
-20 % to +15 % with tight intervals (one REGRESSION, one "improved"); on a shared CPU, -1.5 % to +1.3 %.
Exact proxies (aten ops, host syncs) are asked of both sides once. `paired_stats` turns blocks into a verdict.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tripwire.bench.paired_stats import PairedVerdict, RatioEstimate, block_ratios, decide, estimate
from tripwire.common.errors import TripwireError

CLOCKS = ("cpu", "wall")


class PairedError(TripwireError, RuntimeError):
    """A worker that could not start, answered an error or died; the message names the side and the cause."""


@dataclass(frozen=True)
class Side:
    """One side of the comparison: whose trainer a worker imports, and how the worker is started."""

    label: str  # "base" / "head", or "original" / "ours"
    tree: Path
    suite_dir: Path  # the folder holding the suite module (a tree's benchmarks/)
    suite: str = "workloads:paired_benchmarks"
    python: str = sys.executable
    env: Mapping[str, str] = field(default_factory=dict)
    extra_paths: tuple[Path, ...] = ()  # ahead of tree/src (e.g. an original checkout's own src)


@dataclass(frozen=True)
class Schedule:
    """How much to measure per benchmark."""

    warmup_units: int = 2
    fresh_every: int = 1  # blocks per workload instance on each side (0: one instance for the whole benchmark)
    fresh_warmup: int = 1  # discarded units on each fresh instance
    min_blocks: int = 12
    max_blocks: int = 48
    check_every: int = 4
    budget_s: float = 30.0
    clock: str = "cpu"

    def __post_init__(self) -> None:
        if self.clock not in CLOCKS:
            raise ValueError(f"clock must be one of {CLOCKS}, got {self.clock!r}")
        if not 3 <= self.min_blocks <= self.max_blocks:
            raise ValueError(f"need 3 <= min_blocks <= max_blocks, got {self.min_blocks} and {self.max_blocks}")


@dataclass
class SideUnits:
    """Unit times of one side, in measurement order."""

    wall_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    cpus: int = 0  # the most CPUs a unit ran on (0: not reported)

    def on(self, clock: str) -> list[float]:
        return self.cpu_ms if clock == "cpu" else self.wall_ms

    def extend(self, answer: Mapping[str, Any]) -> None:
        self.wall_ms.extend(float(v) for v in answer["wall_ms"])
        self.cpu_ms.extend(float(v) for v in answer["cpu_ms"])
        self.cpus = max(self.cpus, int(answer.get("cpus", 0)))


@dataclass
class BenchOutcome:
    """One benchmark: both sides' units, the paired estimate on each clock, proxies and the verdict."""

    name: str
    settings: dict[str, Any]
    verdict: PairedVerdict
    base: SideUnits = field(default_factory=SideUnits)
    head: SideUnits = field(default_factory=SideUnits)
    ratios: dict[str, RatioEstimate] = field(default_factory=dict)  # clock -> estimate
    proxies: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)  # name -> (base, head)
    proxy_verdict: PairedVerdict | None = None  # CHANGED when an exact proxy differs, ok when all agree
    # (base, head): building and running the first unit (a compiled workload compiles there), kept out of the units
    first_unit_s: tuple[float | None, float | None] = (None, None)
    seconds: float = 0.0
    note: str = ""

    @property
    def tolerance(self) -> float:
        return float(self.settings.get("tolerance", 0.0))

    @property
    def fails(self) -> bool:
        return self.verdict.fails or (self.proxy_verdict is not None and self.proxy_verdict.fails)

    @property
    def verdict_text(self) -> str:
        """The timing verdict, then the proxy verdict when it fails: `REGRESSION + CHANGED (aten_ops 195 -> 1327)`."""
        text = self.verdict.value
        if self.proxy_verdict is PairedVerdict.CHANGED:
            text = f"{text} + CHANGED" if self.verdict is not PairedVerdict.OK else "CHANGED"
        return text + (f" ({self.note})" if self.note else "")


@dataclass
class PairedComparison:
    """Every benchmark's outcome, the two sides' contexts and the gated clock."""

    labels: tuple[str, str]
    clock: str
    outcomes: list[BenchOutcome]
    contexts: dict[str, dict[str, str]]

    @property
    def failed(self) -> bool:
        return any(outcome.fails for outcome in self.outcomes)


ADDR_NO_RANDOMIZE = 0x0040000  # linux/personality.h
PAD_VARIABLE = "TRIPWIRE_ENV_PAD"


def fixed_layout() -> None:
    """In the worker before exec: turn address-space randomization off (Linux), so that the memory layout, and
    with it cache-set and 4K-aliasing effects, is the same in every run instead of a per-process lottery (one
    workload's per-process median moved by 65 % between processes with it on, 17 % with it off). Elsewhere, or
    where the call is refused, the worker runs with the system's default and its context says so."""
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        current = libc.personality(0xFFFFFFFF)
        if current != -1:
            libc.personality(current | ADDR_NO_RANDOMIZE)


def shared_cpu() -> int | None:
    """The CPU both workers run benchmarks of one thread in all on: the highest one this process may use (CPU 0 takes
    most interrupts), or None where affinity cannot be set (not Linux) or only one CPU is allowed anyway."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    allowed = os.sched_getaffinity(0)
    return max(allowed) if len(allowed) > 1 else None


def worker_environments(sides: tuple[Side, Side], shim: Path) -> tuple[dict[str, str], dict[str, str]]:
    """Each side's environment: its paths first, then padded to the same size as the other side's, because the
    environment's size shifts the initial stack, which alone moves timings between otherwise identical processes."""
    envs = []
    for side in sides:
        paths = [shim, *side.extra_paths, side.tree / "src", side.suite_dir]
        env = {**os.environ, **side.env, "PYTHONPATH": os.pathsep.join(str(p) for p in paths)}
        env.pop(PAD_VARIABLE, None)
        envs.append(env)
    sizes = [sum(len(k) + len(v) + 2 for k, v in env.items()) for env in envs]
    largest = max(sizes) + len(PAD_VARIABLE) + 2
    for env, size in zip(envs, sizes):
        env[PAD_VARIABLE] = "x" * (largest - size - len(PAD_VARIABLE) - 2)
    return envs[0], envs[1]


def shim_dir(root: Path) -> Path:
    """A folder holding only a link to this driver's `tripwire` package, to put first on a worker's path."""
    package = Path(__file__).resolve().parent.parent
    link = root / "tripwire"
    if not link.exists():
        link.symlink_to(package, target_is_directory=True)
    return root


class WorkerProcess:
    """One side's persistent worker: JSON requests in, JSON answers out; its stderr goes to a log file."""

    def __init__(
        self, side: Side, env: Mapping[str, str], device: str, log_path: Path, pin_cpu: int | None = None
    ) -> None:
        self.side = side
        self.log_path = log_path
        command = [side.python, "-m", "tripwire.bench.worker", "--suite", side.suite, "--device", device]
        if pin_cpu is not None:
            command += ["--cpu", str(pin_cpu)]
        self.log: IO[bytes] = open(log_path, "wb")  # noqa: SIM115 - lives as long as the worker
        try:
            self.process = subprocess.Popen(
                command,
                cwd=side.tree,
                env=dict(env),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.log,
                text=True,
                preexec_fn=fixed_layout,
            )
        except OSError as exc:
            self.log.close()
            raise PairedError(f"{side.label}: cannot start {side.python}: {exc}") from exc
        self.read()  # the "ready" line, or the reason the suite did not load

    def read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.process.wait()
            raise PairedError(f"{self.side.label} worker exited (code {self.process.returncode}): {self.log_tail()}")
        answer: dict[str, Any] = json.loads(line)
        if not answer.get("ok"):
            raise PairedError(f"{self.side.label} ({self.side.tree}): {answer.get('error')}")
        return answer

    def request(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps(payload) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError as exc:
            raise PairedError(f"{self.side.label} worker is gone: {self.log_tail()}") from exc
        return self.read()

    def log_tail(self) -> str:
        self.log.flush()
        lines = self.log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        return lines[-1] if lines else f"no output (log {self.log_path})"

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.process.stdin.close()
                self.process.wait(timeout=30)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self.log.close()


def abba(block: int) -> tuple[int, int, int, int]:
    """Which side (0 base, 1 head) runs each unit of a block: ABBA on even blocks, BAAB on odd ones."""
    return (0, 1, 1, 0) if block % 2 == 0 else (1, 0, 0, 1)


class PairedRun:
    """Measures benchmarks on two live workers."""

    def __init__(self, workers: tuple[WorkerProcess, WorkerProcess], schedule: Schedule) -> None:
        self.workers = workers
        self.schedule = schedule

    def units(self, side: int, name: str, count: int) -> dict[str, Any]:
        return self.workers[side].request({"op": "run", "name": name, "units": count})

    def measure(self, name: str, settings: dict[str, Any]) -> BenchOutcome:
        schedule, start = self.schedule, time.perf_counter()
        outcome = BenchOutcome(name, settings, PairedVerdict.OK)
        for side in (0, 1):
            self.units(side, name, schedule.warmup_units)
        blocks = 0
        while True:
            if schedule.fresh_every and blocks and blocks % schedule.fresh_every == 0:
                for side in abba(blocks)[:2]:
                    self.workers[side].request({"op": "fresh", "name": name, "warmup": schedule.fresh_warmup})
            for side in abba(blocks):
                (outcome.base, outcome.head)[side].extend(self.units(side, name, 1))
            blocks += 1
            if blocks < schedule.min_blocks or blocks % schedule.check_every:
                continue
            gated = self.estimate(outcome, schedule.clock)
            spent = time.perf_counter() - start
            if gated.resolved(outcome.tolerance) or blocks >= schedule.max_blocks or spent >= schedule.budget_s:
                break
        for clock in CLOCKS:
            outcome.ratios[clock] = self.estimate(outcome, clock)
        outcome.verdict = decide(outcome.ratios[schedule.clock], outcome.tolerance)
        if settings.get("proxies"):
            self.compare_proxies(outcome)
        first = [self.workers[side].request({"op": "first", "name": name}).get("seconds") for side in (0, 1)]
        outcome.first_unit_s = (first[0], first[1])
        outcome.seconds = time.perf_counter() - start
        return outcome

    @staticmethod
    def estimate(outcome: BenchOutcome, clock: str) -> RatioEstimate:
        base, head = outcome.base.on(clock), outcome.head.on(clock)
        return estimate(block_ratios(base, head), seed_text=f"{outcome.name}/{clock}")

    def compare_proxies(self, outcome: BenchOutcome) -> None:
        counts = [self.workers[side].request({"op": "proxies", "name": outcome.name})["proxies"] for side in (0, 1)]
        for key in sorted(set(counts[0]) | set(counts[1])):
            outcome.proxies[key] = (counts[0].get(key), counts[1].get(key))
        changed = [key for key, (old, new) in outcome.proxies.items() if old != new]
        outcome.proxy_verdict = PairedVerdict.CHANGED if changed else PairedVerdict.OK
        if changed:
            outcome.note = ", ".join(f"{key} {outcome.proxies[key][0]} -> {outcome.proxies[key][1]}" for key in changed)


def select(names: Sequence[str], keywords: Sequence[str]) -> list[str]:
    """Benchmarks whose name contains any of `keywords` (all when none are given)."""
    return [name for name in names if not keywords or any(word in name for word in keywords)]


def compare_sides(
    sides: tuple[Side, Side],
    schedule: Schedule,
    out: Path,
    *,
    device: str = "cpu",
    keywords: Sequence[str] = (),
    pin_cpu: int | str | None = "auto",
) -> PairedComparison:
    """Start both workers, measure every selected benchmark, and return the comparison. `pin_cpu`: the CPU
    benchmarks of one thread in all run on, on both sides ("auto": `shared_cpu()`; None: left to the scheduler)."""
    if pin_cpu == "auto":
        pin_cpu = shared_cpu()
    elif isinstance(pin_cpu, str):
        raise ValueError(f"pin_cpu must be a CPU number, 'auto' or None, got {pin_cpu!r}")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tripwire-shim-") as scratch:
        shim = shim_dir(Path(scratch))
        started: list[WorkerProcess] = []
        try:
            for side, env in zip(sides, worker_environments(sides, shim)):
                # each side compiles into a cache of its own, so neither side's first (compiling) unit reuses the
                # other's generated code
                env = {**env, "TORCHINDUCTOR_CACHE_DIR": str(Path(scratch) / f"inductor-{side.label}")}
                started.append(WorkerProcess(side, env, device, out / f"{side.label}-worker.log", pin_cpu))
            workers = (started[0], started[1])
            hellos = [worker.request({"op": "hello"}) for worker in workers]
            return run_benchmarks(sides, workers, hellos, schedule, keywords)
        finally:
            for worker in started:
                worker.close()


def run_benchmarks(
    sides: tuple[Side, Side],
    workers: tuple[WorkerProcess, WorkerProcess],
    hellos: list[dict[str, Any]],
    schedule: Schedule,
    keywords: Sequence[str],
) -> PairedComparison:
    base_benches, head_benches = hellos[0]["benchmarks"], hellos[1]["benchmarks"]
    names = select(sorted(set(base_benches) | set(head_benches)), keywords)
    if not names:
        raise PairedError(f"no paired benchmark matches {list(keywords)}: the suites have {sorted(head_benches)}")
    runner = PairedRun(workers, schedule)
    outcomes = []
    for name in names:
        if name not in head_benches:
            note = f"in {sides[0].label} but not in {sides[1].label}: renamed, skipped or deleted?"
            outcomes.append(BenchOutcome(name, base_benches[name], PairedVerdict.MISSING, note=note))
        elif name not in base_benches:
            note = f"only in {sides[1].label}: nothing to compare it with yet"
            outcomes.append(BenchOutcome(name, head_benches[name], PairedVerdict.NEW, note=note))
        else:
            print(f"measuring {name} ...", file=sys.stderr, flush=True)
            outcomes.append(runner.measure(name, head_benches[name]))
    contexts = {side.label: hello["context"] for side, hello in zip(sides, hellos)}
    return PairedComparison((sides[0].label, sides[1].label), schedule.clock, outcomes, contexts)
