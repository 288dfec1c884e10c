"""The factored action space: one enum per action head, head sizes, and which heads matter per op."""

from __future__ import annotations

from enum import IntEnum


class LifecycleOp(IntEnum):
    """The op head: what the controller does this epoch."""

    WAIT = 0
    GERMINATE = 1
    SET_ALPHA_TARGET = 2
    PRUNE = 3
    FOSSILIZE = 4
    ADVANCE = 5


class BlueprintAction(IntEnum):
    """Seed architectures. Ids are the lowercase names; NOOP is always masked."""

    NOOP = 0
    CONV_LIGHT = 1
    ATTENTION = 2
    NORM = 3
    DEPTHWISE = 4
    BOTTLENECK = 5
    CONV_SMALL = 6
    CONV_HEAVY = 7
    LORA = 8
    LORA_LARGE = 9
    MLP_SMALL = 10
    MLP = 11
    FLEX_ATTENTION = 12

    @property
    def blueprint_id(self) -> str:
        return self.name.lower()


CNN_BLUEPRINTS = frozenset(
    {
        BlueprintAction.NOOP,
        BlueprintAction.CONV_LIGHT,
        BlueprintAction.ATTENTION,
        BlueprintAction.NORM,
        BlueprintAction.DEPTHWISE,
        BlueprintAction.BOTTLENECK,
        BlueprintAction.CONV_SMALL,
        BlueprintAction.CONV_HEAVY,
    }
)


class AlphaAlgorithm(IntEnum):
    """How a seed's output is blended into the host stream."""

    ADD = 1
    MULTIPLY = 2
    GATE = 3


class AlphaMode(IntEnum):
    HOLD = 0
    UP = 1
    DOWN = 2


class AlphaCurve(IntEnum):
    LINEAR = 1
    COSINE = 2
    SIGMOID = 3


class GerminationStyle(IntEnum):
    """The style head: blend curve and blend algorithm chosen together."""

    LINEAR_ADD = 0
    LINEAR_MULTIPLY = 1
    SIGMOID_ADD = 2
    GATED_GATE = 3


STYLE_CURVE: dict[GerminationStyle, AlphaCurve] = {
    GerminationStyle.LINEAR_ADD: AlphaCurve.LINEAR,
    GerminationStyle.LINEAR_MULTIPLY: AlphaCurve.LINEAR,
    GerminationStyle.SIGMOID_ADD: AlphaCurve.SIGMOID,
    GerminationStyle.GATED_GATE: AlphaCurve.LINEAR,
}
STYLE_ALGORITHM: dict[GerminationStyle, AlphaAlgorithm] = {
    GerminationStyle.LINEAR_ADD: AlphaAlgorithm.ADD,
    GerminationStyle.LINEAR_MULTIPLY: AlphaAlgorithm.MULTIPLY,
    GerminationStyle.SIGMOID_ADD: AlphaAlgorithm.ADD,
    GerminationStyle.GATED_GATE: AlphaAlgorithm.GATE,
}


class TempoAction(IntEnum):
    FAST = 0
    STANDARD = 1
    SLOW = 2


TEMPO_EPOCHS: dict[TempoAction, int] = {TempoAction.FAST: 3, TempoAction.STANDARD: 5, TempoAction.SLOW: 8}


class AlphaTargetAction(IntEnum):
    HALF = 0
    SEVENTY = 1
    FULL = 2


ALPHA_TARGET_VALUES: dict[AlphaTargetAction, float] = {
    AlphaTargetAction.HALF: 0.5,
    AlphaTargetAction.SEVENTY: 0.7,
    AlphaTargetAction.FULL: 1.0,
}


class AlphaSpeedAction(IntEnum):
    INSTANT = 0
    FAST = 1
    MEDIUM = 2
    SLOW = 3


ALPHA_SPEED_TICKS: dict[AlphaSpeedAction, int] = {
    AlphaSpeedAction.INSTANT: 0,
    AlphaSpeedAction.FAST: 3,
    AlphaSpeedAction.MEDIUM: 5,
    AlphaSpeedAction.SLOW: 8,
}


class AlphaCurveAction(IntEnum):
    LINEAR = 0
    COSINE = 1
    SIGMOID_GENTLE = 2
    SIGMOID = 3
    SIGMOID_SHARP = 4


# (curve, steepness) per curve action; steepness only matters for sigmoid curves.
ALPHA_CURVE_SPEC: dict[AlphaCurveAction, tuple[AlphaCurve, float]] = {
    AlphaCurveAction.LINEAR: (AlphaCurve.LINEAR, 12.0),
    AlphaCurveAction.COSINE: (AlphaCurve.COSINE, 12.0),
    AlphaCurveAction.SIGMOID_GENTLE: (AlphaCurve.SIGMOID, 6.0),
    AlphaCurveAction.SIGMOID: (AlphaCurve.SIGMOID, 12.0),
    AlphaCurveAction.SIGMOID_SHARP: (AlphaCurve.SIGMOID, 24.0),
}

DEFAULT_SIGMOID_STEEPNESS = 12.0

# Head order is part of the contract: buffers, masks and telemetry all use it.
ACTION_HEAD_NAMES: tuple[str, ...] = (
    "slot",
    "blueprint",
    "style",
    "tempo",
    "alpha_target",
    "alpha_speed",
    "alpha_curve",
    "op",
)

_FIXED_HEAD_SIZES: dict[str, int] = {
    "blueprint": len(BlueprintAction),
    "style": len(GerminationStyle),
    "tempo": len(TempoAction),
    "alpha_target": len(AlphaTargetAction),
    "alpha_speed": len(AlphaSpeedAction),
    "alpha_curve": len(AlphaCurveAction),
    "op": len(LifecycleOp),
}


def head_sizes(num_slots: int) -> dict[str, int]:
    """Size of every action head, in `ACTION_HEAD_NAMES` order, for a layout with `num_slots` slots."""
    if num_slots < 1:
        raise ValueError(f"num_slots must be >= 1, got {num_slots}")
    sizes = {"slot": num_slots, **_FIXED_HEAD_SIZES}
    return {name: sizes[name] for name in ACTION_HEAD_NAMES}


# Heads that receive advantage and entropy for each op (causal relevance).
HEAD_RELEVANCE_BY_OP: dict[LifecycleOp, frozenset[str]] = {
    LifecycleOp.WAIT: frozenset({"op"}),
    LifecycleOp.GERMINATE: frozenset({"op", "slot", "blueprint", "style", "tempo", "alpha_target"}),
    LifecycleOp.SET_ALPHA_TARGET: frozenset({"op", "slot", "style", "alpha_target", "alpha_speed", "alpha_curve"}),
    LifecycleOp.PRUNE: frozenset({"op", "slot", "alpha_speed", "alpha_curve"}),
    LifecycleOp.FOSSILIZE: frozenset({"op", "slot"}),
    LifecycleOp.ADVANCE: frozenset({"op", "slot"}),
}

# Mask keys produced by the mask builder: every head plus the op-conditioned slot mask.
MASK_KEYS: tuple[str, ...] = (*ACTION_HEAD_NAMES, "slot_by_op")
