"""A seed's lifecycle record (`SeedState`), the lifecycle event callback type and gradient-health scoring."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from esper.leyline import (
    AlphaAlgorithm,
    BlueprintAction,
    GerminationStyle,
    SeedStage,
    TelemetryEventType,
    TempoAction,
)

# (event_type, slot_id, seed_id, data): how a slot reports lifecycle changes; the caller adds env context.
LifecycleCallback = Callable[[TelemetryEventType, str, str | None, dict[str, Any]], None]

# Contribution velocity is an EMA of the per-epoch change in contribution.
VELOCITY_DECAY = 0.7

# Gradient health from the seed's gradient norm after an epoch: 1 healthy, 0.5 vanishing, 0 exploding/NaN.
VANISHING_GRAD_NORM = 1e-7
EXPLODING_GRAD_NORM = 1e3
HEALTHY_GRAD_THRESHOLD = 0.5  # G5: "the seed is healthy"
STRICT_G2_GRAD_HEALTH = 0.7  # strict G2: gradient health of at least 0.7


class LifecycleError(RuntimeError):
    """A lifecycle operation the slot's current stage does not allow (e.g. germinating an occupied slot)."""


def grad_health_from_norm(norm: float) -> float:
    """Score a seed's gradient norm: 0.0 when non-finite or exploding, 0.5 when vanishing, else 1.0."""
    if not math.isfinite(norm) or norm > EXPLODING_GRAD_NORM:
        return 0.0
    if norm < VANISHING_GRAD_NORM:
        return 0.5
    return 1.0


@dataclass
class SeedState:
    """Everything the slot knows about its seed, from germination until the slot is DORMANT again.

    The record survives pruning so PRUNED/EMBARGOED/RESETTING stay observable (masks, rewards, telemetry);
    it is cleared when the slot returns to DORMANT.
    """

    seed_id: str
    blueprint: BlueprintAction
    style: GerminationStyle
    tempo: TempoAction
    alpha_target: float  # the germination target alpha that BLENDING ramps toward
    algorithm: AlphaAlgorithm
    stage: SeedStage = SeedStage.GERMINATED
    previous_stage: SeedStage = SeedStage.DORMANT
    epochs_in_stage: int = 0
    previous_epochs_in_stage: int = 0  # epochs spent in `previous_stage` (for potential-based shaping)
    age_epochs: int = 0  # epochs since germination
    acc_at_germination: float | None = None
    current_accuracy: float | None = None  # last accuracy fed to `record_accuracy` (strict G2 only)
    contribution: float | None = None  # counterfactual contribution in percentage points
    contribution_velocity: float = 0.0
    scheduled_prune: bool = False  # an alpha ramp to 0 is under way and ends in prune
    auto_pruned: bool = False  # pruned by the governor or a finished scheduled prune (reward penalty)
    prune_reason: str | None = None
    grad_norm: float | None = None
    grad_health: float = 1.0  # unmeasured counts as healthy
    seed_params: int = 0
    init_seed: int = 0

    @property
    def blueprint_id(self) -> str:
        return self.blueprint.blueprint_id

    @property
    def is_healthy(self) -> bool:
        return self.grad_health >= HEALTHY_GRAD_THRESHOLD

    @property
    def improvement(self) -> float | None:
        """Accuracy gained since germination (pp), when both ends are known."""
        if self.current_accuracy is None or self.acc_at_germination is None:
            return None
        return self.current_accuracy - self.acc_at_germination
