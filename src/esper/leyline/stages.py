"""Seed lifecycle stages, their allowed transitions, gate levels and lifecycle constants."""

from __future__ import annotations

from enum import IntEnum


class SeedStage(IntEnum):
    """Where a seed is in its life. Value 5 is skipped on purpose (it was SHADOWING upstream)."""

    UNKNOWN = 0
    DORMANT = 1
    GERMINATED = 2
    TRAINING = 3
    BLENDING = 4
    HOLDING = 6
    FOSSILIZED = 7
    PRUNED = 8
    EMBARGOED = 9
    RESETTING = 10


class GateLevel(IntEnum):
    """Quality gates guarding entry to GERMINATED (G0), TRAINING (G1), BLENDING (G2), HOLDING (G3), FOSSILIZED (G5)."""

    G0 = 0
    G1 = 1
    G2 = 2
    G3 = 3
    G5 = 5


VALID_TRANSITIONS: dict[SeedStage, tuple[SeedStage, ...]] = {
    SeedStage.UNKNOWN: (SeedStage.DORMANT,),
    SeedStage.DORMANT: (SeedStage.GERMINATED,),
    SeedStage.GERMINATED: (SeedStage.TRAINING, SeedStage.PRUNED),
    SeedStage.TRAINING: (SeedStage.BLENDING, SeedStage.PRUNED),
    SeedStage.BLENDING: (SeedStage.HOLDING, SeedStage.PRUNED),
    # HOLDING -> BLENDING is the scheduled-prune path (alpha ramps back down).
    SeedStage.HOLDING: (SeedStage.FOSSILIZED, SeedStage.BLENDING, SeedStage.PRUNED),
    SeedStage.FOSSILIZED: (),
    SeedStage.PRUNED: (SeedStage.EMBARGOED,),
    SeedStage.EMBARGOED: (SeedStage.RESETTING,),
    SeedStage.RESETTING: (SeedStage.DORMANT,),
}

GATE_FOR_STAGE: dict[SeedStage, GateLevel] = {
    SeedStage.GERMINATED: GateLevel.G0,
    SeedStage.TRAINING: GateLevel.G1,
    SeedStage.BLENDING: GateLevel.G2,
    SeedStage.HOLDING: GateLevel.G3,
    SeedStage.FOSSILIZED: GateLevel.G5,
}

ACTIVE_STAGES = frozenset({SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.HOLDING, SeedStage.FOSSILIZED})
FAILURE_STAGES = frozenset({SeedStage.PRUNED, SeedStage.EMBARGOED, SeedStage.RESETTING})
# Stages in which a slot holds a live (not yet fossilized, not failed) seed.
LIVE_STAGES = frozenset({SeedStage.GERMINATED, SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.HOLDING})
PRUNABLE_STAGES = LIVE_STAGES
ADVANCEABLE_STAGES = frozenset({SeedStage.GERMINATED, SeedStage.TRAINING, SeedStage.BLENDING})
# Stages whose slot counts as empty for germination.
EMPTY_STAGES = frozenset({SeedStage.UNKNOWN, SeedStage.DORMANT})

# Lifecycle constants (JAN values).
MIN_PRUNE_AGE = 1
MIN_HOLDING_EPOCHS = 5
MIN_TRAINING_EPOCHS = 1  # permissive G2 at JAN: >= 1 epoch in TRAINING
MIN_BLENDING_EPOCHS = 3
EMBARGO_EPOCHS = 5
RESETTING_EPOCHS = 1
AUTO_PRUNE_PENALTY = -0.2


def is_valid_transition(src: SeedStage, dst: SeedStage) -> bool:
    """True when the lifecycle allows moving from `src` to `dst`."""
    return dst in VALID_TRANSITIONS[src]


# Index of each stage in the 10-wide stage one-hot of the observation features.
STAGE_ONEHOT_INDEX: dict[SeedStage, int] = {stage: i for i, stage in enumerate(SeedStage)}
