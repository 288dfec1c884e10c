"""The modules the static sync audit reads, derived from the loop's entry (the gate and the hazard runner share it).

Not a list kept by hand: every esper module that `run_training`'s module reaches through imports (lazy ones
included) is audited, so a module that joins the loop (a new buffer, a helper the policy client calls) is audited
the day it is imported, with budgets per function in `baselines/static_sync/hot_path.json`.
"""

from __future__ import annotations

from pathlib import Path

from tripwire.gates.static_audit import reachable_modules

# The training loop's entry: `esper.simic.training.vectorized.run_training` builds the run and drives the trainer.
LOOP_ENTRIES = ("esper.simic.training.vectorized",)


def hot_path_modules(root: Path) -> tuple[str, ...]:
    """The audited source files of the tree at `root`, relative to it."""
    return reachable_modules(LOOP_ENTRIES, root / "src", root)
