"""What makes two runs of one loop draw other numbers, found while it is recorded: torch's generator never seeded, and
NumPy generators made from OS entropy.

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

A NumPy generator made from OS entropy while the loop runs is followed (`OsEntropy`): `np.random.default_rng()`,
`np.random.seed()`, or a gymnasium space or env never seeded, whose generator is made so at its first draw. skrl's
CartPole DQN explores through its action space's `sample()`, and the space is never seeded: three recordings of
eleven took other random actions from the first checkpoint on. NumPy asks one function for that entropy,
`numpy.random.bit_generator.randbits`, looked up by name at each call; while the loop runs it is a stand-in that
notes the loop's line, then returns what the original returns. Noted only where the generator keeps the entropy
(`_from_entropy`): a copy, an unpickled generator or a `RandomState(seed)` is made unseeded and given its state
right after. What the loop's child processes make is not seen.

Python's string hashing is kept too (`hash_seed()`): a process started without `PYTHONHASHSEED` hashes strings with
a seed of its own, so a loop that iterates a set of strings (rsl_rl's logger writes its episode scalars in the order
of a set of their names) writes the same events in another order in each process. `compare` names it when the same
events came in another order and a side hashed at random (`tripwire.outside.compare.chance`).
"""

from __future__ import annotations

import contextlib
import dis
import functools
import os
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import torch

from tripwire.sync.swaps import swap_code

__all__ = [
    "RANDOM_HASHING",
    "TORCH",
    "Marks",
    "OsEntropy",
    "described",
    "hash_seed",
    "mark",
    "notes",
    "numpy_entropy",
    "seeding_watched",
    "unseeded",
]

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


def numpy_entropy() -> Any:
    """NumPy's module that asks the OS for a generator's entropy (`randbits`), or None where this NumPy does not ask
    through it: a stand-in put there is seen (`_stand_in_seen`), or nothing is watched."""
    try:
        import numpy.random.bit_generator as module
    except ImportError:  # pragma: no cover - numpy is a dependency of tripwire
        return None
    return module if callable(getattr(module, "randbits", None)) and _stand_in_seen(module) else None


@functools.cache
def _stand_in_seen(module: Any) -> bool:
    """Whether NumPy's compiled code looks `randbits` up by name at each call (so a stand-in is seen), tried once a
    process: a `SeedSequence()` made with a counting stand-in in place. It asks the OS for 128 bits, which moves no
    generator of the process."""
    import numpy as np

    asked: list[int] = []
    original = module.randbits

    def counting(*args: Any, **kwargs: Any) -> Any:
        asked.append(1)
        return original(*args, **kwargs)

    module.randbits = counting
    try:
        np.random.SeedSequence()
    finally:
        module.randbits = original
    return bool(asked)


_COPIES = os.path.join("numpy", "random", "_pickle.py")  # NumPy's helpers that rebuild a copied or unpickled generator


def _from_entropy(frame: Any) -> bool:
    """Whether the generator `frame` is asking NumPy for keeps the OS entropy NumPy draws for it. NumPy draws it for
    every generator made without a seed, and some are given their state right after: a copy or an unpickled one
    (`copy.deepcopy(rng)`, rebuilt by NumPy's `_pickle` helpers), a `RandomState(seed)` (made unseeded, then seeded the
    legacy way), a `bit_generator.jumped()`. Taken as kept only where that cannot be: `frame` made the call with no
    arguments at all (`np.random.default_rng()`, `np.random.seed()`; not `jumped()`), or its own `seed` is None
    (gymnasium's `np_random(seed=None)`, through which every space and env never seeded makes its generator). A
    `default_rng(seed)` given a None from elsewhere is not taken (a result keeps only what is certain)."""
    code = frame.f_code
    if code.co_filename.endswith(_COPIES):
        return False
    if "seed" in code.co_varnames and frame.f_locals.get("seed", 0) is None:
        return True
    lasti = frame.f_lasti
    instructions = list(dis.get_instructions(code))
    for index, instruction in enumerate(instructions):
        if instruction.offset == lasti:
            if instruction.opname not in ("CALL", "CALL_KW") or instruction.arg != 0:
                return False
            # what loaded the callable: the instruction before the call's own preparation
            loader = next(
                (item for item in reversed(instructions[:index]) if item.opname not in _CALL_PREPARATION), None
            )
            return loader is None or loader.argval not in _GIVEN_STATE
    return False


_CALL_PREPARATION = frozenset({"PRECALL", "PUSH_NULL", "KW_NAMES", "CACHE"})
# called with no arguments, and still given a state: `bit_generator.jumped()` makes its result unseeded, then copies
# its own state into it
_GIVEN_STATE = frozenset({"jumped"})


class OsEntropy:
    """`with OsEntropy(site) as made:` notes each NumPy generator made from OS entropy on any thread while active:
    `made.sites` is `{line: generators made there}` (`site()` names the line, the loop's where it can), `made.faults`
    what went wrong in tripwire's own noting (the generator was made all the same), `made.watched` whether this NumPy
    could be watched at all. The stand-in is taken out on leaving, unless the loop put its own in its place."""

    def __init__(self, site: Callable[[], str]) -> None:
        self.site = site
        self.sites: dict[str, int] = {}
        self.faults: list[str] = []
        self.watched = False
        self._lock = threading.Lock()
        self._module: Any = None
        self._original: Any = None
        self._stand_in: Any = None

    def __enter__(self) -> OsEntropy:
        module = numpy_entropy()
        if module is None:
            return self
        original = module.randbits
        watch = self

        def randbits(*args: Any, **kwargs: Any) -> Any:
            watch._note()
            return original(*args, **kwargs)  # pass-through

        self._module, self._original, self._stand_in = module, original, randbits
        module.randbits = randbits
        self.watched = True
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._module is not None and getattr(self._module, "randbits", None) is self._stand_in:
            self._module.randbits = self._original
        self._module = self._original = self._stand_in = None

    def made(self) -> list[tuple[str, int]]:
        """`(line, generators made there)`, most first."""
        with self._lock:
            return sorted(self.sites.items(), key=lambda entry: (-entry[1], entry[0]))

    def _note(self) -> None:
        try:
            if not _from_entropy(sys._getframe(2)):  # the frame that asked NumPy for the generator
                return
            line = self.site()
            with self._lock:
                self.sites[line] = self.sites.get(line, 0) + 1
        except Exception as error:  # tripwire's fault, never the loop's: the generator is made, and the fault kept
            self.faults.append(f"{type(error).__name__}: {error}")
