"""Stand-ins for the torch methods and functions the sync counter watches (`tripwire.sync.hooks`).

While a counter is active, each watched callable (`Tensor.item`, `.cpu`, `.to`, `__bool__`, `torch.tensor`, the host
factories, the place-keeping methods, ...) is replaced on `torch.Tensor` or in `torch` by a stand-in made here. On a
thread that does not count, or inside bookkeeping that is not counted (`ignore_syncs`, the body of a call already
counted), a stand-in calls the original at once; on a counting thread it hands the call to the counter's handler.
Every other torch call runs as it does without tripwire: a function mode, the earlier design, cost every torch call
of the loop a trip through Python (CleanRL's `ppo.py` ran 1.6 to 1.8 times slower under a mode that did nothing).

Dynamo traces through the stand-ins (this file is on its inline-when-called list) and, as it traces,
`is_compiling()` is true, so what it puts in the graph is the original call: watching a compiled loop adds no graph
break. This module is kept small, importing nothing of tripwire but the inline list, for that reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.compiler import is_compiling

from tripwire.sync.dynamo import inline_when_called

inline_when_called(__file__)

Handler = Callable[[Any, Any, tuple[Any, ...], dict[str, Any]], Any]


def stand_in(key: Any, original: Any, handle: Handler, local: Any, elsewhere: Callable[[], bool]) -> Callable[..., Any]:
    """A function to put where `original` was: `handle(key, original, args, kwargs)` on a counting thread
    (`local.counting`, or `elsewhere()`: autograd's device thread running a counting thread's backward) outside
    suppressed code, else `original(*args, **kwargs)`. `key` is torch's own function, which the handler classifies
    the call by (`original` may be another tool's wrapper around it)."""

    def watched(*args: Any, **kwargs: Any) -> Any:
        if is_compiling():
            return original(*args, **kwargs)
        if local.suppress or (local.counting <= 0 and not elsewhere()):
            return original(*args, **kwargs)
        return handle(key, original, args, kwargs)

    name = getattr(original, "__name__", "watched")
    watched.__name__ = name
    watched.__qualname__ = getattr(original, "__qualname__", name)
    watched.__doc__ = getattr(original, "__doc__", None)
    return watched
