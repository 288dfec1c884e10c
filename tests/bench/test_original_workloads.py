"""benchmarks/original_workloads.py against a checkout of the original (esper-lite 11ebe0f6), in its own process.

Opt-in: set ESPER_ORIGINAL_SRC to the checkout's `src/` (and ESPER_ORIGINAL_PYTHON to an interpreter that has its
imports, e.g. psutil; default: this one). Without it the test is skipped: CI has no copy of the original.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ORIGINAL_SRC = os.environ.get("ESPER_ORIGINAL_SRC", "")

CHECK = textwrap.dedent(
    """
    import original_workloads as o

    suite = o.paired_benchmarks()
    assert sorted(suite) == [f"original_workload[{n}env]" for n in (1, 2, 4)], sorted(suite)
    assert dict(suite["original_workload[4env]"].units) == {"env_epochs": 4, "samples": 4000}
    assert all(b.threads is None and not b.proxies and b.runs_per_unit == 1 for b in suite.values())
    train, test = o.scaled_mock_datasets(2)()
    assert (len(train), len(test)) == (2000, 400), (len(train), len(test))

    workload = suite["original_workload[1env]"].make()
    for epoch in (1, 2):
        workload.prepare()
        assert workload.epoch == epoch, workload.epoch
        workload.run()
    workload.close()
    print("ORIGINAL-WORKLOADS-OK")
    """
)


@pytest.mark.skipif(not ORIGINAL_SRC, reason="ESPER_ORIGINAL_SRC (the original's src/) is not set")
def test_two_epochs_of_the_original(tmp_path: Path) -> None:
    shim = tmp_path / "shim"  # our tripwire only, as the paired driver puts it: never our esper
    shim.mkdir()
    (shim / "tripwire").symlink_to(ROOT / "src" / "tripwire")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ORIGINAL_SRC, str(shim), str(ROOT / "benchmarks")])}
    python = os.environ.get("ESPER_ORIGINAL_PYTHON", sys.executable)
    done = subprocess.run(
        [python, "-c", CHECK], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0 and "ORIGINAL-WORKLOADS-OK" in done.stdout, done.stderr[-3000:]
