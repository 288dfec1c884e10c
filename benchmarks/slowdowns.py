"""Injected slowdowns for proving the benchmark gates: `ESPER_BENCH_SLOWDOWN=<pass>:<fraction>[,...]`.

Only the benchmark suite reads this (the trainer has no such hook). Each entry wraps one engine pass:

- `train_pass:0.10` / `validate:0.10`: after every call, busy-wait until the process has used 10 % more CPU time
  than the pass itself did. Pure host work: no aten op and no sync is added, so only timing can see it.
- `validate_ops:0.12`: after every fused validation, run extra aten ops (a fixed chain of small matrix products)
  costing about 12 % of the pass. The number of products is fixed per process from the first call's timing, so
  the aten-op proxy sees a constant extra count and the timing sees the cost.

`install(text)` patches `VectorizedEngine` for the rest of the process (the paired A/B workers);
`patches(text)` lists the (attribute, wrapper) pairs for a monkeypatch context (the pytest suite).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from typing import Any

import torch

from esper.tolaria.engine import VectorizedEngine

SLOWDOWN_ENV = "ESPER_BENCH_SLOWDOWN"
TARGETS = {"train_pass": "train_pass", "validate": "validate", "validate_ops": "validate"}


class SlowdownError(ValueError):
    """A malformed ESPER_BENCH_SLOWDOWN value."""


def parse(text: str) -> dict[str, float]:
    """`train_pass:0.20,validate:0.1` -> {"train_pass": 0.2, "validate": 0.1}; one-line error otherwise."""
    parsed: dict[str, float] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        kind, _, fraction = entry.partition(":")
        try:
            value = float(fraction)
        except ValueError:
            value = -1.0
        if kind not in TARGETS or not 0.0 < value < 10.0:
            choices = ", ".join(f"{name}:<fraction>" for name in TARGETS)
            raise SlowdownError(f"{SLOWDOWN_ENV}={text!r}: expected {choices} (e.g. train_pass:0.20)")
        parsed[kind] = value
    return parsed


class SlowedPass:
    """An engine pass followed by busy work of `fraction` times its own CPU time (no ops, no syncs)."""

    def __init__(self, original: Callable[..., Any], fraction: float) -> None:
        self.original = original
        self.fraction = fraction

    def __get__(self, engine: VectorizedEngine | None, owner: type | None = None) -> Any:
        return self if engine is None else functools.partial(self, engine)

    def __call__(self, engine: VectorizedEngine, *args: Any) -> Any:
        start = time.process_time()
        result = self.original(engine, *args)
        deadline = time.process_time() + (time.process_time() - start) * self.fraction
        while time.process_time() < deadline:
            pass
        return result


class OpAddingPass(SlowedPass):
    """An engine pass followed by extra aten ops worth about `fraction` of its first call's CPU time."""

    SIZE = 48

    def __init__(self, original: Callable[..., Any], fraction: float) -> None:
        super().__init__(original, fraction)
        generator = torch.Generator().manual_seed(0)
        self.matrix = torch.randn(self.SIZE, self.SIZE, generator=generator) / self.SIZE
        self.products: int | None = None

    def extra_ops(self, count: int) -> None:
        value = self.matrix
        for _ in range(count):
            value = torch.mm(value, self.matrix)

    def __call__(self, engine: VectorizedEngine, *args: Any) -> Any:
        start = time.process_time()
        result = self.original(engine, *args)
        if self.products is None:  # fix the count once, from this process's first call
            spent = time.process_time() - start
            probe = time.process_time()
            self.extra_ops(200)
            per_product = max((time.process_time() - probe) / 200, 1e-7)
            self.products = max(1, round(spent * self.fraction / per_product))
        self.extra_ops(self.products)
        return result


def patches(text: str) -> list[tuple[str, SlowedPass]]:
    """(VectorizedEngine attribute, wrapper) for every entry of `text`."""
    found = []
    for kind, fraction in parse(text).items():
        attribute = TARGETS[kind]
        wrapper = OpAddingPass if kind == "validate_ops" else SlowedPass
        found.append((attribute, wrapper(getattr(VectorizedEngine, attribute), fraction)))
    return found


def install(text: str | None = None) -> list[str]:
    """Patch the engine for the rest of this process from `text` (default: the environment variable)."""
    spec = os.environ.get(SLOWDOWN_ENV, "") if text is None else text
    installed = []
    for attribute, wrapper in patches(spec):
        setattr(VectorizedEngine, attribute, wrapper)
        installed.append(attribute)
    return installed
