"""The sharded-run tests launch torchrun through the gate's rank runner (tests/guardrails/distributed_scenario.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "guardrails"))
