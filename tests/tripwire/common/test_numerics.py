"""Portable CPU numerics: the pin reaches ATen, oneDNN and MKL, changes the bits on a wider-ISA CPU, and repeats."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping

import pytest
import torch

from tripwire.common.context import capture_context, context_key
from tripwire.common.numerics import PIN_VARIABLES, apply_portable_cpu_env, is_pinned, pin_hint, portable_cpu_env

# A small training step that goes through all three libraries: a convolution (oneDNN), linear layers and an
# LSTM (MKL's sgemm), softmax, normalization and Adam's foreach ops (ATen's vectorized kernels).
WORKLOAD = """
import json, torch
from tripwire.common.context import capture_context
from tripwire.bitwise.digest import state_digest
torch.manual_seed(0)
torch.set_num_threads(1)
conv = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                           torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10))
lstm = torch.nn.LSTM(10, 32, batch_first=True)
head = torch.nn.Linear(32, 5)
params = [*conv.parameters(), *lstm.parameters(), *head.parameters()]
opt = torch.optim.Adam(params, lr=1e-3)
x = torch.randn(8, 3, 32, 32).contiguous(memory_format=torch.channels_last)
for _ in range(3):
    feats = conv(x).view(2, 4, 10)
    out, _ = lstm(feats)
    loss = torch.log_softmax(head(out), dim=-1).mean().neg()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(json.dumps({"context": capture_context("cpu"), "digests": state_digest({
    "conv": conv.state_dict(), "lstm": lstm.state_dict(), "head": head.state_dict()})}))
"""


def run_workload(pinned: bool) -> Mapping[str, object]:
    """Run WORKLOAD in a fresh interpreter, pinned or at the machine's native code paths."""
    env = {k: v for k, v in os.environ.items() if k not in PIN_VARIABLES}
    if pinned:
        env.update(portable_cpu_env())
    done = subprocess.run([sys.executable, "-c", WORKLOAD], env=env, capture_output=True, text=True, check=True)
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def native_capability() -> str:
    env = {k: v for k, v in os.environ.items() if k not in PIN_VARIABLES}
    command = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    return subprocess.run([sys.executable, "-c", command], env=env, capture_output=True, text=True).stdout.strip()


needs_x86_avx2 = pytest.mark.skipif(
    native_capability() not in {"AVX2", "AVX512"}, reason="the AVX2 pin needs an x86-64 CPU with AVX2"
)


@needs_x86_avx2
def test_the_suite_runs_pinned() -> None:
    context = capture_context("cpu")
    assert is_pinned(context), f"the test process is not pinned: {context} (tests/conftest.py sets the pin)"
    assert context["cpu_capability"] == "AVX2"
    assert context_key(context).startswith("cpu-avx2-t1-")


@needs_x86_avx2
def test_two_pinned_runs_are_bitwise_equal() -> None:
    first, second = run_workload(pinned=True), run_workload(pinned=True)
    assert first["digests"] == second["digests"]


@needs_x86_avx2
def test_the_pin_changes_the_bits_on_this_machine() -> None:
    # On an AVX-512 CPU all three libraries change path; on an AVX2 CPU MKL still does (its native AVX2 branch
    # against the pinned compatible one: 12 of 15 tensors differ on an emulated Intel AVX2 CPU, 10 of 13 on an
    # emulated AMD one, docs/portability.md). Equal bits would mean the pin is not reaching the libraries.
    native = run_workload(pinned=False)
    pinned = run_workload(pinned=True)
    assert pinned["context"]["cpu_capability"] == "AVX2"  # type: ignore[index]
    differing = [name for name, digest in pinned["digests"].items() if native["digests"][name] != digest]  # type: ignore[attr-defined,index]
    capability = native["context"]["cpu_capability"]  # type: ignore[index]
    assert differing, f"native ({capability}) and pinned runs are bitwise equal: the pin does nothing here"


@needs_x86_avx2
@pytest.mark.parametrize(
    ("library", "verbose", "pinned_line"),
    [("MKL", "MKL_VERBOSE", "CNR:COMPATIBLE,STRICT"), ("oneDNN", "ONEDNN_VERBOSE", "isa:Intel AVX2")],
)
def test_each_library_reports_the_pinned_code_path(library: str, verbose: str, pinned_line: str) -> None:
    env = {**os.environ, **portable_cpu_env(), verbose: "1"}
    done = subprocess.run([sys.executable, "-c", WORKLOAD], env=env, capture_output=True, text=True, check=True)
    assert pinned_line in done.stdout + done.stderr, f"{library} did not report {pinned_line!r} under the pin"


def test_an_explicit_setting_wins_over_the_pin() -> None:
    environ = {"MKL_CBWR": "AVX2"}
    in_force = apply_portable_cpu_env(environ)
    assert in_force["MKL_CBWR"] == "AVX2" and in_force["ATEN_CPU_CAPABILITY"] == "avx2"


def test_an_unknown_level_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="unknown portable CPU level 'avx9'"):
        portable_cpu_env("avx9")


def test_an_unpinned_context_is_not_taken_for_pinned() -> None:
    context = {**capture_context("cpu"), "mkl_cbwr": ""}
    assert not is_pinned(context)


@needs_x86_avx2
def test_the_pin_is_keyed_not_the_native_isa() -> None:
    native = run_workload(pinned=False)["context"]
    pinned = capture_context("cpu")
    assert context_key(pinned).startswith("cpu-avx2-")
    if native["cpu_capability"] != "AVX2":  # type: ignore[index]
        assert context_key(native) != context_key(pinned)  # type: ignore[arg-type]
    assert torch.backends.cpu.get_cpu_capability() == "AVX2"


def test_code_inductor_compiles_under_the_pin_is_cached_apart_from_native_code() -> None:
    """Inductor's cache key ignores ATEN_CPU_CAPABILITY: a pinned compilation reused natively aborted the process
    (measured, tripwire.common.numerics.pinned_inductor_cache). The pin brings a cache folder of its own."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    pinned = portable_cpu_env()["TORCHINDUCTOR_CACHE_DIR"]
    assert pinned != default_cache_dir() and pinned.endswith("_pinned_avx2")
    environ = {"TORCHINDUCTOR_CACHE_DIR": "/mine"}
    apply_portable_cpu_env(environ)
    assert environ["TORCHINDUCTOR_CACHE_DIR"] == "/mine"  # the user's folder wins
    assert "TORCHINDUCTOR_CACHE_DIR" not in pin_hint()
