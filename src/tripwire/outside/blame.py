"""Whose fault a crash is: the loop's, or tripwire's own, read from the traceback.

A recording runs the loop with tripwire's instruments and stand-ins in its path, so a crash's traceback can hold
tripwire's frames. It is the loop's when the innermost frame that is neither torch's or the standard library's nor a
*pass-through* of tripwire's is the loop's own (its files, or the libraries it uses from site-packages): an error
raised there, or raised by torch for the arguments the loop gave it. A pass-through is the line of a stand-in or
instrument that calls what the loop called (`return original(*args, **kwargs) # pass-through`): the call's own error
comes up through it and stays the loop's, named with the stand-in it passed, since a stand-in in the wrong place could
also be its cause. It is tripwire's when that innermost frame is tripwire's own code (a hook, the counter, an
instrument's bookkeeping, a teardown): the loop may well be fine, and `run` says so and exits with its own code.
"""

from __future__ import annotations

import functools
import linecache
import os
import sysconfig
import traceback
from dataclasses import dataclass

from tripwire.common.folders import folder_prefixes
from tripwire.sync.state import _TRIPWIRE_DIR

__all__ = ["Blame", "blame"]

PASS_THROUGH = "# pass-through"


@dataclass(frozen=True)
class Blame:
    """`tripwire` (its own code raised), `loop`, or `through` (the loop's call raised inside a stand-in)."""

    whose: str
    frame: str = ""  # tripwire's frame for `tripwire` and `through`: "src/tripwire/sync/watched.py:48 in watched"


def _named(frame: traceback.FrameSummary) -> str:
    path = frame.filename
    if path.startswith(_TRIPWIRE_DIR):
        path = "tripwire/" + os.path.relpath(path, _TRIPWIRE_DIR)
    return f"{path}:{frame.lineno} in {frame.name}"


@functools.cache
def _beneath() -> tuple[str, ...]:
    """torch's folder and the standard library's: code the loop calls, never the loop itself (site-packages is the
    loop's own world: Stable-Baselines3's algorithms, gymnasium, tensordict)."""
    import torch

    paths = sysconfig.get_paths()
    return folder_prefixes(
        os.path.dirname(torch.__file__), *(paths[name] for name in ("stdlib", "platstdlib") if paths.get(name))
    )


def _is_beneath(filename: str) -> bool:
    return filename.startswith(_beneath()) or filename.startswith("<")


def blame(error: BaseException) -> Blame:
    """Whose fault `error` is (see the module docstring)."""
    through = ""
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        if frame.filename.startswith(_TRIPWIRE_DIR):
            if PASS_THROUGH in linecache.getline(frame.filename, frame.lineno or 0):
                through = through or _named(frame)
                continue
            return Blame("tripwire", _named(frame))
        if _is_beneath(frame.filename):
            continue
        return Blame("through", through) if through else Blame("loop")
    return Blame("through", through) if through else Blame("loop")
