"""A checkpoint records the deterministic-kernel settings it was trained under, and a resume under others says so in
one note (on CUDA the resumed run would not repeat the unbroken one bitwise)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

from esper.simic.training.checkpoint import determinism_note

RUN = [sys.executable, "-m", "esper.scripts.train", "ppo", "--rounds", "1", "--envs", "1", "--episode-length", "3"]
RUN += ["--train-samples", "50", "--val-samples", "25", "--batch-size", "25", "--memory-size", "32", "--quiet"]


def test_the_checkpoint_holds_the_determinism_settings(tmp_path: Path) -> None:
    saved = tmp_path / "ck.pt"
    done = subprocess.run([*RUN, "--save", str(saved)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    state = torch.load(saved, weights_only=False)["state"]
    assert state["determinism"]["requested"] is True
    assert set(state["determinism"]) == {"requested", "algorithms", "cudnn_deterministic", "cudnn_benchmark",
                                         "cublas_workspace_config"}  # fmt: skip


def test_a_resume_under_other_settings_is_noted_and_the_same_ones_are_not() -> None:
    saved = {"requested": True, "algorithms": True, "cudnn_deterministic": True, "cudnn_benchmark": False}
    now = {**saved, "requested": False, "algorithms": False}
    note = determinism_note("ck.pt", saved, now)
    assert note is not None and "requested True -> False, algorithms True -> False" in note
    assert determinism_note("ck.pt", saved, dict(saved)) is None
    assert determinism_note("ck.pt", None, now) is None  # written before the settings were recorded
