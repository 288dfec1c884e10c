"""What a paired A/B measures: `PairedBench`, one benchmark a persistent worker process times unit by unit.

A suite exposes its paired benchmarks as a function `name -> PairedBench` (for this repository,
`benchmarks/workloads.py:paired_benchmarks`). The A/B driver (`tripwire.bench.paired`) starts one worker process
per side (`tripwire.bench.worker`), each importing its own tree's trainer, and asks them in turn (ABBA) to time
one unit at a time. This module is torch-free so the driver can read the settings without starting torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol


class Workload(Protocol):
    """What a benchmark times: `prepare()` (untimed, before each run) then `run()` (timed)."""

    def prepare(self) -> None: ...

    def run(self) -> None: ...


@dataclass(frozen=True)
class PairedBench:
    """One paired benchmark.

    `make`: builds a fresh, seeded workload (called once per worker, and once more for each exact proxy).
    `units`: the work one `run()` does ({"env_epochs": 2, "samples": 512}), for throughput figures.
    `runs_per_unit`: `run()` calls timed together as one measured unit (keep a unit at >= ~20 ms so timer and
    scheduler granularity stay below 1 %).
    `tolerance`: the smallest slowdown that fails; the gate fails when the confidence interval of the paired
    ratio lies wholly above zero and its estimate exceeds the tolerance (`tripwire.bench.paired_stats.decide`).
    `threads`: torch intra-op threads while this benchmark runs (None: leave the process setting).
    `workers`: threads of its own the workload computes on beside torch's (an engine's env workers; 1: none). A
    benchmark of one torch thread and one worker runs on the CPU both sides share under `--pin-cpu`; any other
    keeps every CPU. None: not declared, measured once per side on a warm unit (process CPU time over wall time).
    `proxies`: count aten ops and host syncs of one `run()` on a fresh copy, compared exactly between sides.
    """

    make: Callable[[], Workload]
    units: Mapping[str, float] = field(default_factory=dict)
    runs_per_unit: int = 1
    tolerance: float = 0.03
    threads: int | None = None
    proxies: bool = True
    workers: int | None = None

    def __post_init__(self) -> None:
        if self.runs_per_unit < 1:
            raise ValueError(f"runs_per_unit must be at least 1, got {self.runs_per_unit}")
        if not 0.0 < self.tolerance < 1.0:
            raise ValueError(f"tolerance must be a fraction in (0, 1), got {self.tolerance}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be at least 1, got {self.threads}")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.workers}")

    def make_warm(self, units: int) -> Workload:
        """A freshly built workload after `units` untimed warm-up units (`prepare()` then `run()`, per run)."""
        workload = self.make()
        for _ in range(units * self.runs_per_unit):
            workload.prepare()
            workload.run()
        return workload


PairedSuite = Mapping[str, PairedBench]
