"""The static sync audit of every module the loop reaches, against its committed budget (code a CPU never runs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hot_path_modules import hot_path_modules

from tripwire.gates.goldens import GoldenStore
from tripwire.gates.pytest_plugin import GateLog
from tripwire.gates.static_audit import check_against

pytestmark = pytest.mark.guardrail

ROOT = Path(__file__).resolve().parents[2]


def test_static_sync_audit_of_the_hot_path_holds(tripwire_goldens: GoldenStore, gate_log: GateLog) -> None:
    budget = tripwire_goldens.root / "static_sync" / "hot_path.json"
    sites, report = check_against(hot_path_modules(ROOT), budget, ROOT, update=tripwire_goldens.update)
    status = "updated" if tripwire_goldens.update else "passed"
    detail = f"{sites.total()} sync-capable calls in {sites.functions()} functions"
    gate_log.add("static sync audit", "hot path", status, detail if report.ok else report.format())
