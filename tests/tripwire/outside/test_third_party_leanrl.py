"""LeanRL's torch.compile PPO as published, recorded from outside with the scenario docs/tripwire.md documents
(`examples/leanrl/ppo_continuous_scenario.py`), the command as a user types it.

The loop imports tensordict while it is recorded; tensordict keys its `torch.stack` handler by the function it finds
in `torch` then. Before the counter's stand-ins were hidden from imports that handler was keyed by a stand-in, and
the rollout's `torch.stack` failed with `Multiple dispatch failed for 'torch.stack'` under tripwire alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tripwire.outside.result import Result

ROOT = Path(__file__).resolve().parents[3]
SCENARIO = ROOT / "examples" / "leanrl" / "ppo_continuous_scenario.py"
PUBLISHED = ROOT / "tests" / "tripwire" / "third_party" / "leanrl"


def test_the_documented_leanrl_example_records_ok(tmp_path: Path) -> None:
    out = tmp_path / "base"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    command = [sys.executable, "-m", "tripwire", "run", str(SCENARIO), "--root", str(PUBLISHED), "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env, check=False)
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:]
    assert done.returncode == 0, last
    result = Result.load(out)
    assert result.status == "ok", result.cause
    assert result.syncs is not None and result.syncs.total > 0
    assert result.compile is not None and result.compile.total > 0  # it compiled itself, and tripwire saw it
    assert result.trajectory is not None and len(result.trajectory) == 8  # 4 rollouts, each with its GAE
