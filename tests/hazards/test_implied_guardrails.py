"""A guardrail implied by the expected one (telemetry payloads beside telemetry counts or a trajectory) is no
wrong guardrail; beside a sync-budget hazard it still is."""

from __future__ import annotations

from catalogue import SYNC_BUDGET, TELEMETRY, TELEMETRY_PAYLOAD, TRAJECTORY, Hazard
from runner import judge

PAYLOAD = {TELEMETRY_PAYLOAD: "telemetry payload diverged at event 3 of 22 (EPOCH_COMPLETED@env0): field ..."}


def test_payloads_firing_beside_a_trajectory_or_telemetry_hazard_is_caught() -> None:
    for expected in (TRAJECTORY, TELEMETRY):
        assert judge(Hazard("h", "", (), expected, "a_baseline"), {expected: "fired", **PAYLOAD}) == "caught"


def test_payloads_alone_do_not_catch_a_telemetry_hazard() -> None:
    assert judge(Hazard("h", "", (), TELEMETRY, "a_baseline"), PAYLOAD) == "WRONG GUARDRAIL"


def test_payloads_firing_beside_a_sync_budget_hazard_is_the_wrong_guardrail() -> None:
    hazard = Hazard("h", "", (), SYNC_BUDGET, "a_baseline")
    assert judge(hazard, {SYNC_BUDGET: "region 'train_pass': 40 syncs", **PAYLOAD}) == "WRONG GUARDRAIL"
