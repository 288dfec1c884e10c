"""Tiny paired suites for the instruction-count tests (`tripwire.bench.instructions`), with injectable slowdowns.

`host_suite`: pure-Python workloads (no torch, so valgrind starts in seconds). `torch_suite`: a small conv-net SGD
step, the shape of the gate's calibration workload at a host-bound size. `TINY_SUITE_SLOWDOWN` adds to every
`run()` either `work:<iterations>` (a pure-Python loop of that many iterations: fixed host work) or
`spin:<fraction>` (busy-waiting until the process has used `fraction` more CPU time than the run itself did).
"""

from __future__ import annotations

import os
import time
from typing import Any

from tripwire.bench.paired_spec import PairedBench

SLOWDOWN_ENV = "TINY_SUITE_SLOWDOWN"


def host_work(iterations: int) -> int:
    total = 0
    for i in range(iterations):
        total += i * i % 7
    return total


def slowdown() -> tuple[str, float]:
    kind, _, amount = os.environ.get(SLOWDOWN_ENV, "").partition(":")
    return (kind, float(amount)) if kind in ("work", "spin") else ("", 0.0)


class Slowed:
    """Wraps a workload's `run()` with the slowdown named in TINY_SUITE_SLOWDOWN (if any)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.kind, self.amount = slowdown()

    def prepare(self) -> None:
        self.inner.prepare()

    def run(self) -> None:
        start = time.process_time()
        self.inner.run()
        if self.kind == "work":
            host_work(int(self.amount))
        elif self.kind == "spin":
            deadline = time.process_time() + (time.process_time() - start) * self.amount
            while time.process_time() < deadline:
                pass


class HostLoop:
    """A fixed amount of pure-Python work per run; `prepare()` does more work that must not be counted."""

    def __init__(self, iterations: int) -> None:
        self.iterations = iterations

    def prepare(self) -> None:
        host_work(5000)

    def run(self) -> None:
        host_work(self.iterations)


class ConvStep:
    """One SGD step of a small conv net on a fixed batch (4 images of 3x16x16), one thread."""

    def __init__(self) -> None:
        import torch
        from torch import nn

        torch.manual_seed(0)
        self.torch = torch
        self.model = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(16, 10),
        )
        generator = torch.Generator().manual_seed(1)
        self.inputs = torch.randn(4, 3, 16, 16, generator=generator)
        self.targets = torch.randint(0, 10, (4,), generator=generator)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)

    def prepare(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def run(self) -> None:
        loss = self.torch.nn.functional.cross_entropy(self.model(self.inputs), self.targets)
        loss.backward()
        self.optimizer.step()


def host_suite() -> dict[str, PairedBench]:
    return {
        "loop": PairedBench(lambda: Slowed(HostLoop(20000))),
        "loop_x3": PairedBench(lambda: Slowed(HostLoop(10000)), runs_per_unit=3),
    }


def torch_suite() -> dict[str, PairedBench]:
    return {
        "conv_step": PairedBench(lambda: Slowed(ConvStep()), threads=1),
        "conv_step_x2": PairedBench(lambda: Slowed(ConvStep()), runs_per_unit=2, threads=1),
    }
