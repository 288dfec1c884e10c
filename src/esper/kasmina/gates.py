"""Quality gates G1/G2/G3/G5: may a seed advance into the next stage of its lifecycle?

Permissive mode (the training default, JAN values): G2 needs >= 1 epoch in TRAINING. Strict mode adds the
minimum epochs, the improvement and gradient-health checks. G0 (seed id and blueprint present) is checked by
`SeedSlot.germinate` itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from esper.kasmina.alpha import AlphaController
from esper.kasmina.state import STRICT_G2_GRAD_HEALTH, SeedState
from esper.leyline import GATE_FOR_STAGE, AlphaMode, GateLevel, SeedStage
from esper.leyline.stages import MIN_BLENDING_EPOCHS, MIN_TRAINING_EPOCHS

# The forward moves `advance_stage` may make. Failure stages are reached through `prune`, and
# HOLDING -> BLENDING only through `schedule_prune` / `set_alpha_target`.
ADVANCE_TARGETS: dict[SeedStage, SeedStage] = {
    SeedStage.GERMINATED: SeedStage.TRAINING,
    SeedStage.TRAINING: SeedStage.BLENDING,
    SeedStage.BLENDING: SeedStage.HOLDING,
    SeedStage.HOLDING: SeedStage.FOSSILIZED,
}

STRICT_G2_MIN_IMPROVEMENT = 0.5  # percentage points since germination
STRICT_G5_MIN_CONTRIBUTION = 1.0  # percentage points
FULL_ALPHA = 1.0
_ALPHA_EPS = 1e-9


@dataclass(frozen=True)
class GateResult:
    """The verdict of one gate: which gate, whether it passed, why, and the stage it guards."""

    gate: GateLevel
    passed: bool
    reason: str
    target: SeedStage


def gate_for(target: SeedStage) -> GateLevel:
    """The gate guarding entry to `target` (G0 for stages without a gate of their own)."""
    return GATE_FOR_STAGE.get(target, GateLevel.G0)


def refuse(target: SeedStage, reason: str) -> GateResult:
    return GateResult(gate=gate_for(target), passed=False, reason=reason, target=target)


def _g2_failures(state: SeedState, permissive: bool) -> list[str]:
    failures: list[str] = []
    min_epochs = MIN_TRAINING_EPOCHS if permissive else MIN_BLENDING_EPOCHS
    if state.epochs_in_stage < min_epochs:
        failures.append(f"epochs_in_training {state.epochs_in_stage} < {min_epochs}")
    if permissive:
        return failures
    if state.grad_norm is None:
        failures.append("gradient health never measured")
    elif state.grad_health < STRICT_G2_GRAD_HEALTH:
        failures.append(f"gradient health {state.grad_health} < {STRICT_G2_GRAD_HEALTH}")
    improvement = state.improvement
    if improvement is None or improvement < STRICT_G2_MIN_IMPROVEMENT:
        failures.append(f"improvement {improvement} < {STRICT_G2_MIN_IMPROVEMENT}")
    return failures


def _g3_failures(state: SeedState, controller: AlphaController, permissive: bool) -> list[str]:
    failures: list[str] = []
    if controller.mode != AlphaMode.HOLD:
        failures.append(f"alpha ramping {controller.mode.name}, {controller.time_to_target} ticks left")
    if controller.target < FULL_ALPHA - _ALPHA_EPS:
        failures.append(f"alpha target {controller.target} < {FULL_ALPHA}")
    elif controller.alpha < controller.target - _ALPHA_EPS:
        failures.append(f"alpha {controller.alpha} has not reached target {controller.target}")
    if not permissive and state.epochs_in_stage < MIN_BLENDING_EPOCHS:
        failures.append(f"epochs_in_blending {state.epochs_in_stage} < {MIN_BLENDING_EPOCHS}")
    return failures


def _g5_failures(state: SeedState, permissive: bool) -> list[str]:
    failures: list[str] = []
    if state.contribution is None:
        failures.append("no counterfactual contribution measured")
    elif not permissive and state.contribution < STRICT_G5_MIN_CONTRIBUTION:
        failures.append(f"contribution {state.contribution} < {STRICT_G5_MIN_CONTRIBUTION}")
    if not state.is_healthy:
        failures.append(f"seed unhealthy (gradient health {state.grad_health})")
    return failures


def evaluate_gate(state: SeedState, target: SeedStage, controller: AlphaController, *, permissive: bool) -> GateResult:
    """Evaluate the gate guarding `state.stage -> target`; the move itself must be in `ADVANCE_TARGETS`."""
    if ADVANCE_TARGETS.get(state.stage) != target:
        return refuse(target, f"{state.stage.name} -> {target.name} is not a gated advance")
    if target == SeedStage.TRAINING:
        failures: list[str] = []  # G1: the stage check above is the whole gate
    elif target == SeedStage.BLENDING:
        failures = _g2_failures(state, permissive)
    elif target == SeedStage.HOLDING:
        failures = _g3_failures(state, controller, permissive)
    else:
        failures = _g5_failures(state, permissive)
    passed = not failures
    return GateResult(
        gate=gate_for(target), passed=passed, reason="; ".join(failures) if failures else "ok", target=target
    )
