"""`make_reproducible`: what a CUDA run turns on, and that a CPU run changes nothing.

No kernel runs here, so a CPU machine can check the settings themselves; that they make two CUDA runs equal, with the
fill of uninitialized memory off, is the device check's bitwise step (tests/device/check.py)."""

from __future__ import annotations

import pytest
import torch

from esper.tolaria.determinism import make_reproducible
from tripwire.bitwise.settings import determinism_settings, restore_settings

FILL = "torch.utils.deterministic.fill_uninitialized_memory"


def test_a_cuda_run_turns_deterministic_kernels_on_and_the_nan_fill_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = determinism_settings()
    try:
        report = make_reproducible([torch.device("cpu"), torch.device("cuda", 0)], True)
        now = determinism_settings()
    finally:
        restore_settings(before)
    assert report["algorithms"] and report["cudnn_deterministic"] and not report["cudnn_benchmark"]
    assert report["cublas_workspace_config"] == ":4096:8"
    # torch's NaN fill of every new uninitialized tensor: a kernel each, 10 % of an epoch's time on an H200
    assert before[FILL] is True and now[FILL] is False
    assert determinism_settings() == before


@pytest.mark.parametrize("devices", [[torch.device("cpu")], [torch.device("cuda", 0)]], ids=["cpu", "cuda-not-asked"])
def test_a_cpu_run_or_one_that_asks_for_none_changes_nothing(devices: list[torch.device]) -> None:
    before = determinism_settings()
    deterministic = devices[0].type == "cpu"
    report = make_reproducible(devices, deterministic)
    assert determinism_settings() == before
    assert report["requested"] is deterministic and report["algorithms"] is False
