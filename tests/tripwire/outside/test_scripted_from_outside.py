"""TorchScript from outside: a scripted function runs in the JIT's interpreter, past every Python stand-in, so what
it syncs is counted only where it reaches a kernel (`.item()` as `implicit:_local_scalar_dense`, data-dependent ops),
at the line that calls the scripted function and in its regions. docs/guardrails.md lists what stays unseen."""

from __future__ import annotations

import warnings
from pathlib import Path

from tripwire.outside.record import record
from tripwire.scenario import Region, Scenario

LOOP = """
import torch


@torch.jit.script
def scripted(x: torch.Tensor) -> float:
    kept = torch.nonzero(x > 0).shape[0]
    return x.sum().item() + kept


def main():
    x = torch.arange(4.0)
    for _ in range(3):
        scripted(x)
"""


def test_syncs_a_scripted_function_makes_at_kernels_are_counted_at_its_callers_line(tmp_path: Path) -> None:
    (tmp_path / "loop.py").write_text(LOOP, encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script is deprecated, and still in use
        result = record(Scenario(name="js", call="loop:main", regions=[Region("loop:scripted", "step")]), tmp_path)
    assert result.ok, result.cause
    rows = sorted((r.region, r.kind, r.text, r.count) for r in result.syncs.records)
    assert rows == [
        ("step", "implicit:_local_scalar_dense", "scripted(x)", 3),
        ("step", "implicit:nonzero", "scripted(x)", 3),
    ]
