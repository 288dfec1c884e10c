"""What makes two runs of one loop draw other numbers, found while it is recorded: torch's generator never seeded.

torch seeds its default generator from the OS when it is imported, so a loop that draws from it without seeding it
draws other numbers in every process (TorchRL's own MuJoCo PPO and CartPole DQN seed nothing: two recordings
differed from their first checkpoint). `mark()` reads the generator before and after the run; `seeding_watched()`
watches the calls that set it while the loop runs (`torch.manual_seed`, `torch.seed`, `torch.set_rng_state`: their
code swapped, `tripwire.sync.swaps`, so a reference taken before the run is seen too); `unseeded()` says whether the
loop drew from it with the seed the run started with and set it in none of those ways. An unchanged seed alone would
not do: a process that recorded the same seeded loop before starts with the loop's own seed already set.

Python's `random` and NumPy's global generator are not followed: libraries draw from them as they are imported
(rich takes an id from `random.getrandbits` at import), which a recording cannot tell from the loop's own draws, and
NumPy's `seed` is compiled code that cannot be watched without replacing it.

Python's string hashing is kept too (`hash_seed()`): a process started without `PYTHONHASHSEED` hashes strings with
a seed of its own, so a loop that iterates a set of strings (rsl_rl's logger writes its episode scalars in the order
of a set of their names) writes the same events in another order in each process. `compare` names it when the same
events came in another order and a side hashed at random (`tripwire.outside.compare.chance`).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from tripwire.sync.swaps import swap_code

__all__ = ["RANDOM_HASHING", "TORCH", "Marks", "described", "hash_seed", "mark", "notes", "seeding_watched", "unseeded"]

TORCH = "torch"  # the generator followed, by the name a result keeps


RANDOM_HASHING = "random"  # `hash_seed()` of a process that hashes strings with a seed of its own


def hash_seed() -> str:
    """The seed this process hashes strings with: `PYTHONHASHSEED` as it started (`0` when hashing is not
    randomized), or `RANDOM_HASHING` when each process draws its own."""
    if not sys.flags.hash_randomization:
        return "0"
    given = os.environ.get("PYTHONHASHSEED", "")  # read before the loop runs: it may set its own for its children
    return given if given.isdigit() else RANDOM_HASHING


@dataclass(frozen=True)
class Marks:
    """torch's default generator as it stands: its seed (`torch.initial_seed()`) and its state."""

    torch_seed: int
    torch_state: torch.Tensor


def mark() -> Marks:
    return Marks(torch.initial_seed(), torch.default_generator.get_state())


@contextlib.contextmanager
def seeding_watched() -> Iterator[set[str]]:
    """The generators the loop set while it ran (`TORCH`), by their seeding calls."""
    seeded: set[str] = set()

    def torch_set(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        seeded.add(TORCH)
        return original(*args, **kwargs)  # pass-through

    functions = (torch.random.manual_seed, torch.random.seed, torch.random.set_rng_state)
    swaps = [swap_code(function, torch_set) for function in functions]
    try:
        yield seeded
    finally:
        for swap in reversed(swaps):
            if swap is not None:
                swap.restore()


def unseeded(before: Marks, after: Marks, seeded: set[str]) -> tuple[str, ...]:
    """`(TORCH,)` when the loop drew from torch's default generator (its state moved) with the seed the run started
    with and set it in none of the watched ways; else `()`."""
    same_seed = before.torch_seed == after.torch_seed
    if TORCH not in seeded and same_seed and not torch.equal(before.torch_state, after.torch_state):
        return (TORCH,)
    return ()


def notes(generators: tuple[str, ...], after: Marks) -> list[str]:
    """`run`'s note for each generator the loop drew from unseeded."""
    said = {
        TORCH: f"the loop drew from torch's default generator and ended the run with the seed it started with "
        f"({after.torch_seed}): a loop that never seeds it draws from the process's seed, which torch takes from the "
        "OS at import, so another run draws other numbers and `compare` finds the trajectories different from the "
        "first checkpoint; seed it in the loop (`torch.manual_seed`) or in an adapter",
    }
    return [said[generator] for generator in generators if generator in said]


def described(generator: str) -> str:
    """How `compare` names a generator."""
    return {TORCH: "torch's default generator"}.get(generator, generator)
