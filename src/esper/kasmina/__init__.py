"""kasmina: the CNN host, its seed slots (lifecycle, gates, alpha control, blending) and the seed blueprints.

Imports only esper.leyline and torch.
"""

from esper.kasmina.alpha import AlphaController, curve_value
from esper.kasmina.blueprints import blueprint_param_count, create_blueprint
from esper.kasmina.building import built_on
from esper.kasmina.gates import GateResult
from esper.kasmina.host import CNNHost
from esper.kasmina.model import MorphogeneticModel
from esper.kasmina.slot import SeedSlot
from esper.kasmina.state import LifecycleCallback, LifecycleError, SeedState

__all__ = [
    "AlphaController",
    "CNNHost",
    "GateResult",
    "LifecycleCallback",
    "LifecycleError",
    "MorphogeneticModel",
    "SeedSlot",
    "SeedState",
    "blueprint_param_count",
    "built_on",
    "create_blueprint",
    "curve_value",
]
