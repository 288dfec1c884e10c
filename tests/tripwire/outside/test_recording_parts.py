"""`benchmarks/recording_parts.py` takes away what each of its variants says, on CleanRL's `ppo.py` as published.

Its figures are timings and are not checked here; what each variant's recording holds is. A variant whose change
stopped reaching tripwire (an internal renamed) would time the full recording under another name.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "recording_parts.py"


def test_each_variant_records_what_it_says_it_keeps(tmp_path: Path) -> None:
    out = tmp_path / "parts.json"
    command = [sys.executable, str(SCRIPT), "--rounds", "1", "--json", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    held = {row["variant"]: row["held"] for row in json.loads(out.read_text())["variants"]}
    full = held["recorded"]
    assert full["checkpoints"] > 0 and full["syncs"] > 0 and full["events"] > 0
    assert held["plain"] == {}
    assert held["no checkpoints"] == {**full, "checkpoints": 0}
    assert held["syncs only"] == {**full, "checkpoints": 0, "events": 0}
    assert held["instruments only"] == {**full, "syncs": 0}
    assert held["not delivered"] == {**full, "syncs": 0}
    assert held["no kernels"]["checkpoints"] == full["checkpoints"] and held["no kernels"]["syncs"] <= full["syncs"]
