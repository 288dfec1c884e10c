"""tripwire history on ElegantRL's own commits: the scenario of `ppo_scenario.py`, with the driver kept here.

A history walk checks out each commit of the range into a tree of its own, where this folder's driver is not, so
this scenario calls the driver from here (with the commit's `elegantrl` first on the path) and writes each run's
files to a folder of its own:

    python -m tripwire history --repo path/to/ElegantRL --range A..B --paths elegantrl \\
        --scenario examples/elegantrl/ppo_history.py

Over ElegantRL's 13 commits to `elegantrl/` up to 8ea76af the walk names what each did to this loop: four crash (a
save of an attribute PPO leaves `None`, fixed by the fifth), three change values (among them "negative entropy",
which flips the entropy term), one changes the telemetry (the evaluation's log gains a text), one adds 17 syncs at a
save, and three are bitwise refactors (docs/tripwire.md, "A real history").
"""

from __future__ import annotations

import dataclasses
import runpy
import sys
import tempfile
from pathlib import Path

from tripwire.scenario import load_scenario

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "ppo_run.py"
BASE = load_scenario(HERE / "ppo_scenario.py")


def train() -> None:
    """The driver as `python ppo_run.py ...` runs it, its run's files in a fresh folder (walks run side by side)."""
    saved = sys.argv
    sys.argv = [str(DRIVER), *BASE.argv, "--runs", tempfile.mkdtemp(prefix="elegantrl-runs-")]
    try:
        runpy.run_path(str(DRIVER), run_name="__main__")
    finally:
        sys.argv = saved


scenario = dataclasses.replace(BASE, name="elegantrl-ppo-history", script="", call=train)
