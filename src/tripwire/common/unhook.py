"""Taking a stand-in out of what the watched loop built on it while it was recorded.

tripwire replaces an attribute for a recording (a watched torch method, a checkpoint's target) and puts the original
back after. Meanwhile the loop, or torch itself, may have replaced the attribute again: with an object of its own
(a library imported then patching `torch.as_tensor`), which stays, as it would without tripwire; or with a wrapper of
what it found there, the stand-in: torch's optimizer wraps `Adam.step` once, for its profiler, at the first `Adam()`
(`Optimizer.profile_hook_step`), and a `functools.wraps` decorator does the same. Such a wrapper stays too, holding
the original where it held the stand-in: the process is left as the loop would have made it with no recording, and
no stand-in outlives its recording.
"""

from __future__ import annotations

import types
from typing import Any

__all__ = ["put_back", "unhook"]

_DEPTH = 6  # wrappers of wrappers followed, at most


def put_back(owner: Any, name: str, had_own: bool, original: Any, ours: Any) -> None:
    """Undo `setattr(owner, name, ours)` (or `owner[name] = ours`, for a script's namespace dict): put `original` back
    (or remove the attribute `owner` did not hold) while `ours` is still there; else leave the loop's object, with
    `ours` taken out of it (`unhook`)."""
    namespace = owner if isinstance(owner, dict) else None
    held = (namespace if namespace is not None else vars(owner)).get(name)
    if held is ours:
        if namespace is not None:
            namespace[name] = original
        elif had_own:
            setattr(owner, name, original)
        else:
            delattr(owner, name)
    elif held is not None:
        unhook(held, ours, original if had_own else _inherited(owner, name))


def unhook(holder: Any, ours: Any, original: Any) -> bool:
    """Replace `ours` by `original` wherever `holder`, a function the loop made, reaches it: a closure cell or an
    attribute (`__wrapped__`), followed through nested wrappers, bound methods and `staticmethod`/`classmethod`. A
    descriptor stand-in (`staticmethod(stand_in)`) is matched by the function it holds. Whether one was found."""
    if original is None:
        return False
    pairs = [(ours, original)]
    if isinstance(ours, (staticmethod, classmethod)) and isinstance(original, (staticmethod, classmethod)):
        pairs.append((ours.__func__, original.__func__))
    found = False
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(holder, 0)]
    while stack:
        item, depth = stack.pop()
        if id(item) in seen or depth > _DEPTH:
            continue
        seen.add(id(item))
        if isinstance(item, (staticmethod, classmethod, types.MethodType)):
            stack.append((item.__func__, depth + 1))
            continue
        if not isinstance(item, types.FunctionType):
            continue
        # its attributes: `__wrapped__`, and what a library keeps of what it wrapped beside it (dynamo's
        # `torch.compiler.disable` keeps `_torchdynamo_orig_callable`, which it unwraps to when the loop compiles it)
        for attribute, value in list(item.__dict__.items()):
            replacement = next((own for stand, own in pairs if value is stand), None)
            if replacement is not None:
                item.__dict__[attribute] = replacement
                found = True
            elif isinstance(value, (types.FunctionType, types.MethodType, staticmethod, classmethod)):
                stack.append((value, depth + 1))
        for cell in item.__closure__ or ():
            try:
                value = cell.cell_contents
            except ValueError:  # a cell not yet filled
                continue
            replacement = next((own for stand, own in pairs if value is stand), None)
            if replacement is not None:
                cell.cell_contents = replacement
                found = True
            elif isinstance(value, (types.FunctionType, types.MethodType, staticmethod, classmethod)):
                stack.append((value, depth + 1))
    return found


def _inherited(owner: Any, name: str) -> Any:
    """What `owner.name` is without `owner`'s own entry: a base class's (None for a module)."""
    for base in getattr(owner, "__mro__", ())[1:]:
        if name in vars(base):
            return vars(base)[name]
    return None
