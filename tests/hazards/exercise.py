"""Run every gate scenario of a (possibly patched) tree once, for coverage.py to see which lines they ran.

    python -m coverage run --rcfile TREE/pyproject.toml exercise.py TREE

Run in a subprocess whose PYTHONPATH points at the tree's `src/`, as `probe.py` is; the hazard runner then asks
`tripwire.gates.exercised` which lines the hazard changed that no scenario ran (the gate's changed-line check).
No golden is read or written: only what runs matters here.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path


def main(argv: list[str]) -> int:
    tree = Path(argv[0])
    sys.path.insert(0, str(tree / "tests" / "guardrails"))
    import guardrail_scenarios as scenarios

    with tempfile.TemporaryDirectory(prefix="exercise-") as scratch:
        for scenario in [*scenarios.SCENARIOS.values(), scenarios.TWO_ENVS]:
            scenarios.run_scenario(scenario, Path(scratch) / scenario.name, probe=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
