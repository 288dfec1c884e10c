"""torch before 2.14 crashes (SIGSEGV) in GroupNorm's channels-last CPU backward when only the weight needs a
gradient: a norm seed reading the host's detached channels_last features. `CpuSafeGroupNorm` steps around it there,
and is not built where torch is fixed. `nox -s torch_versions` also runs this file on torch 2.11, where it crashes."""

from __future__ import annotations

import subprocess
import sys

import torch
from torch import nn

from esper.kasmina.blueprints import GROUP_NORM_NEEDS_NCHW_COPY, CpuSafeGroupNorm, NormSeed, _group_norm

STEP = """
import sys, torch
from torch import nn
from esper.kasmina.blueprints import CpuSafeGroupNorm
kind = {"plain": nn.GroupNorm, "safe": CpuSafeGroupNorm}[sys.argv[1]]
torch.manual_seed(0)
norm = kind(1, 16)
features = torch.randn(8, 16, 8, 8).contiguous(memory_format=torch.channels_last)  # the host's, detached
norm(features).sum().backward()
print("weight grad", norm.weight.grad.abs().sum().item())
"""


def _step(kind: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", STEP, kind], capture_output=True, text=True, timeout=120)


def test_a_norm_on_detached_channels_last_features_trains_on_this_torch() -> None:
    done = _step("safe")
    assert done.returncode == 0 and "weight grad" in done.stdout, done.stderr[-2000:]


def test_torch_itself_crashes_there_exactly_where_the_workaround_is_built() -> None:
    """The hazard is real where we work around it, and absent where we do not: plain nn.GroupNorm dies by a signal
    on the versions `GROUP_NORM_NEEDS_NCHW_COPY` names (2.11 and 2.13 seen), and trains on the others."""
    done = _step("plain")
    if GROUP_NORM_NEEDS_NCHW_COPY:
        assert done.returncode < 0, f"torch {torch.__version__} did not crash: the workaround may be unneeded"
    else:
        assert done.returncode == 0, done.stderr[-2000:]


def test_where_torch_is_fixed_the_seeds_build_plain_group_norm() -> None:
    """No extra Python per forward and GroupNorm's own kernel, so every golden keeps its bits on torch >= 2.14."""
    norm = _group_norm(32)
    assert type(norm) is (CpuSafeGroupNorm if GROUP_NORM_NEEDS_NCHW_COPY else nn.GroupNorm)
    assert type(NormSeed(16).norm) is type(norm)


def test_the_safe_norm_computes_group_norm_and_its_gradients() -> None:
    torch.manual_seed(1)
    plain, safe = nn.GroupNorm(2, 32), CpuSafeGroupNorm(2, 32)
    safe.load_state_dict(plain.state_dict())
    features = torch.randn(4, 32, 6, 6).contiguous(memory_format=torch.channels_last)
    wanted = plain(features.contiguous())  # NCHW: the path torch < 2.14 survives
    wanted.square().sum().backward()
    got = safe(features)
    got.square().sum().backward()
    torch.testing.assert_close(got, wanted)
    torch.testing.assert_close(safe.weight.grad, plain.weight.grad)
    torch.testing.assert_close(safe.bias.grad, plain.bias.grad)
    with torch.no_grad():  # nothing recorded: the input is passed as it is (no copy)
        assert safe(features).is_contiguous(memory_format=torch.channels_last) == plain(features).is_contiguous(
            memory_format=torch.channels_last
        )
