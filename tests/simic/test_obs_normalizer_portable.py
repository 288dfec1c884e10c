"""The observation normalizer computes IEEE-rounded arithmetic only, so its bits are the same on every x86 CPU.

On CPU, `torch.sqrt` of a float tensor runs MKL's vector math (VML, high-accuracy mode), which starts from the CPU's
approximate `rsqrtps` and refines it: its result is within an ulp, not correctly rounded, and the approximation differs
between Intel and AMD CPUs. A normalizer written `(x - mean) / torch.sqrt(var + eps)` made scenario (g)'s golden,
recorded on an Intel Xeon, fail on an AMD EPYC at its second round (docs/portability.md). `torch.rsqrt` is ATen's own
IEEE square root and divide. These tests hold `normalize` to the same arithmetic done by numpy, one IEEE-rounded
operation at a time, which is machine-independent wherever the operations are.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from esper.simic.rewards.normalizers import RunningMeanStd


def ieee_normalize(rms: RunningMeanStd, x: torch.Tensor) -> np.ndarray:
    """`normalize` as numpy float32 operations, each correctly rounded: sub, sqrt, divide, multiply, clip."""
    mean, var = rms.mean.numpy(), rms.var.numpy()
    inverse = np.float32(1.0) / np.sqrt(var + np.float32(rms.epsilon))
    return np.clip((x.numpy() - mean) * inverse, np.float32(-rms.clip), np.float32(rms.clip))


def fitted(seed: int, width: int = 64) -> RunningMeanStd:
    """A normalizer with statistics over three rounds of spread-out states (so `var` holds many different values)."""
    generator = torch.Generator().manual_seed(seed)
    rms = RunningMeanStd((width,))
    for _ in range(3):
        rms.update(torch.randn(200, width, generator=generator) * torch.rand(width, generator=generator) * 5 + 1)
    return rms


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_normalize_is_correctly_rounded_arithmetic(seed: int) -> None:
    rms = fitted(seed)
    states = torch.randn(4096, 64, generator=torch.Generator().manual_seed(100 + seed)) * 4
    assert np.array_equal(rms.normalize(states).numpy(), ieee_normalize(rms, states))


def test_the_same_formula_through_torch_sqrt_is_not(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above fails on the hazard it guards: `/ torch.sqrt`, on a torch whose CPU sqrt is MKL's VML."""
    rms = fitted(0)
    probe = torch.rand(1 << 16) * 10
    if np.array_equal(torch.sqrt(probe).numpy(), np.sqrt(probe.numpy())):
        pytest.skip("torch.sqrt is correctly rounded on this machine (no MKL vector math): the hazard cannot show")
    states = torch.randn(4096, 64, generator=torch.Generator().manual_seed(100)) * 4

    def through_sqrt(self: RunningMeanStd, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp((x - self.mean) / torch.sqrt(self.var + self.epsilon), -self.clip, self.clip)

    monkeypatch.setattr(RunningMeanStd, "normalize", through_sqrt)
    by_division = np.clip(
        (states.numpy() - rms.mean.numpy()) / np.sqrt(rms.var.numpy() + np.float32(rms.epsilon)),
        np.float32(-rms.clip),
        np.float32(rms.clip),
    )
    assert not np.array_equal(rms.normalize(states).numpy(), by_division)
