"""Payloads of the lifecycle events a SeedSlot emits (plain JSON-safe values, enum members by name)."""

from __future__ import annotations

from typing import Any

from esper.kasmina.gates import GateResult
from esper.kasmina.state import SeedState
from esper.leyline import TEMPO_EPOCHS, SeedStage


def germinated_payload(state: SeedState) -> dict[str, Any]:
    return {
        "blueprint_id": state.blueprint_id,
        "params": state.seed_params,
        "style": state.style.name,
        "tempo": state.tempo.name,
        "blend_tempo_epochs": TEMPO_EPOCHS[state.tempo],
        "alpha_target": state.alpha_target,
        "algorithm": state.algorithm.name,
    }


def gate_payload(result: GateResult, from_stage: SeedStage) -> dict[str, Any]:
    return {
        "gate": result.gate.name,
        "passed": result.passed,
        "from_stage": from_stage.name,
        "target_stage": result.target.name,
        "reason": result.reason,
    }


def stage_changed_payload(state: SeedState, alpha: float) -> dict[str, Any]:
    """SEED_STAGE_CHANGED, read after the move: `epochs_in_stage` is the time spent in the stage left."""
    return {
        "from": state.previous_stage.name,
        "to": state.stage.name,
        "epochs_in_stage": state.previous_epochs_in_stage,
        "age_epochs": state.age_epochs,
        "alpha": alpha,
        "blueprint_id": state.blueprint_id,
    }


def fossilized_payload(state: SeedState, params: int, alpha: float) -> dict[str, Any]:
    return {
        "blueprint_id": state.blueprint_id,
        "params_added": params,
        "contribution": state.contribution,
        "age_epochs": state.age_epochs,
        "alpha": alpha,
    }


def pruned_payload(state: SeedState, params: int) -> dict[str, Any]:
    """SEED_PRUNED, read after the move to PRUNED."""
    return {
        "reason": state.prune_reason,
        "auto_pruned": state.auto_pruned,
        "blueprint_id": state.blueprint_id,
        "stage_before": state.previous_stage.name,
        "age_epochs": state.age_epochs,
        "params_removed": params,
        "contribution": state.contribution,
    }
