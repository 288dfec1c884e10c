"""tamiyo: the controller's senses and brain (signals, Obs V3 features, action masks, the factored
recurrent actor-critic).

Imports only esper.leyline and torch. Names are exported lazily, so `import esper.tamiyo` loads no torch
until a torch-backed name is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from esper.tamiyo.distributions import MaskedCategorical
    from esper.tamiyo.features import (
        BASE_FEATURES,
        BLUEPRINT_EMBED_DIM,
        NUM_BLUEPRINT_EMBEDDINGS,
        SLOT_FEATURES,
        LastAction,
        SlotObservation,
        batch_features,
        build_features,
        state_dim,
    )
    from esper.tamiyo.masks import SlotMaskState, compute_action_masks, mask_shapes, stack_masks
    from esper.tamiyo.policy import FactoredRecurrentActorCritic, PolicyStep, slot_mask_for_op
    from esper.tamiyo.signals import SignalTracker, TrainingSignals

__all__ = [
    "BASE_FEATURES",
    "BLUEPRINT_EMBED_DIM",
    "NUM_BLUEPRINT_EMBEDDINGS",
    "SLOT_FEATURES",
    "FactoredRecurrentActorCritic",
    "LastAction",
    "MaskedCategorical",
    "PolicyStep",
    "SignalTracker",
    "SlotMaskState",
    "SlotObservation",
    "TrainingSignals",
    "batch_features",
    "build_features",
    "compute_action_masks",
    "mask_shapes",
    "slot_mask_for_op",
    "stack_masks",
    "state_dim",
]

# Which submodule defines each exported name.
_SOURCE: dict[str, str] = {
    "SignalTracker": "signals",
    "TrainingSignals": "signals",
    "BASE_FEATURES": "features",
    "BLUEPRINT_EMBED_DIM": "features",
    "NUM_BLUEPRINT_EMBEDDINGS": "features",
    "SLOT_FEATURES": "features",
    "LastAction": "features",
    "SlotObservation": "features",
    "batch_features": "features",
    "build_features": "features",
    "state_dim": "features",
    "SlotMaskState": "masks",
    "compute_action_masks": "masks",
    "mask_shapes": "masks",
    "stack_masks": "masks",
    "MaskedCategorical": "distributions",
    "FactoredRecurrentActorCritic": "policy",
    "PolicyStep": "policy",
    "slot_mask_for_op": "policy",
}


def __getattr__(name: str) -> Any:
    if name not in _SOURCE:
        raise AttributeError(f"module 'esper.tamiyo' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"esper.tamiyo.{_SOURCE[name]}"), name)
    globals()[name] = value  # cache: later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
