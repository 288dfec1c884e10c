"""Modules built where they run: a seeded build on the device, not a host build moved there.

A module built on the host and moved to a CUDA device uploads each parameter and buffer with a blocking copy. In the
loop that was every germinated seed in each env, and every env's host at the start of each round, so the host
waited on the device once per tensor (tests/test_sync_scaling.py counts it on CPU). `built_on` seeds the RNG of the
host and of the device, builds under `torch.device(device)`, and restores both RNG states afterwards, so a build
draws nothing from the run's own streams. On CPU the numbers are the ones a host build gives; on CUDA, module init
draws from the device's generator, so a CUDA run's initial weights differ from a CPU run's (its goldens are keyed by
the cuda context).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def built_on(device: torch.device, seed: int) -> Iterator[None]:
    """Within the block, modules are built on `device` from RNG state seeded with `seed`; both RNGs are restored."""
    on_cuda = device.type == "cuda"
    with torch.random.fork_rng(devices=[device] if on_cuda else []):
        # only these two generators: `torch.manual_seed` would reseed every other device's too, and leave them so
        torch.default_generator.manual_seed(seed)
        if on_cuda:
            with torch.cuda.device(device):
                torch.cuda.manual_seed(seed)
        with torch.device(device):
            yield
