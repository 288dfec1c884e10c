"""After the gate's scenarios ran under coverage.py: what they could not have seen (run by `nox -s guardrails`).

    python tests/guardrails/exercised_gate.py DATA_FILE [--against REF]

First a report, never a failure: the share of the loop's modules (the static audit's list, `hot_path_modules`) the
scenarios ran, the functions they never entered, and the configuration fields no scenario moves off its default
(with the reason, or as a GAP). Then, with `--against REF`: every line of `src/esper` changed since REF that belongs
to an executable statement must have run under a scenario or a guardrail check, or this exits 1 naming each unseen
line (`tripwire.gates.exercised`), unless `tests/guardrails/unexercised.toml` excuses it with a reason.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tripwire.common.errors import TripwireError
from tripwire.gates.exercised import (
    check_changed_lines,
    coverage_rows,
    fields_at_default,
    format_rows,
    load_exclusions,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
EXCLUSIONS = HERE / "unexercised.toml"
UNDER = ("src/esper",)
SHOWN = 12  # modules of the report, least run first

# Configuration fields no scenario moves off its default, each with why the gate cannot (a field that joins the
# list without a reason is reported as a gap to close with a scenario).
NOT_IN_SCENARIOS: dict[str, str] = {
    "amp": "mixed precision runs on CUDA only; the gate's machine has no GPU (CPU runs always fp32)",
    "compile_mode": "a mode of inductor only; the gate compiles with aot_eager (portable numerics, scenario f)",
    "deterministic": "switches deterministic kernels on CUDA only (a CPU run is deterministic either way); the GPU "
    "check runs with it, and the settings guardrail fails a run that changes one",
    "device": "the gate runs on the CPU; GPU runs are checked by the GPU tests when a GPU is lent",
    "devices": "several devices need GPUs",
    "gpu_preload": "keeps data on a GPU",
    "inject_rank_failure": "fault injection: a rank that dies is tests/distributed's job, not a behaviour golden",
    "overwrite": "an output-path safety switch (tests/simic/test_outputs.py); scenario d saves and resumes",
    "resume_path": "set per run by scenario d's fixture (a path on the machine), so the config field is not",
    "save_path": "set per run by scenario d's fixture (a path on the machine), so the config field is not",
    "run_name": "names the run's output folder; no trained value depends on it",
    "telemetry_dir": "scenarios keep events in memory; the file backend is tests/nissa's",
}


def _values(config: Any) -> dict[str, Any]:
    from esper.simic.training.config import json_value

    return {spec.name: json_value(getattr(config, spec.name)) for spec in dataclasses.fields(config)}


def fields_report(workdir: Path) -> list[str]:
    """The configuration fields every scenario leaves at its default, with a reason or as a gap."""
    from guardrail_scenarios import SCENARIOS, TWO_ENVS, scenario_config

    from esper.simic.training.config import TrainingConfig

    configs = [_values(scenario_config(s, workdir)[0]) for s in [*SCENARIOS.values(), TWO_ENVS]]
    left = fields_at_default(_values(TrainingConfig()), configs)
    gaps = [name for name in left if name not in NOT_IN_SCENARIOS]
    total = len(_values(TrainingConfig()))
    lines = [f"configuration: {len(configs)} scenarios leave {len(left)} of {total} fields at their default"]
    lines += [f"  GAP {name}: no scenario sets it and no reason is given (add a scenario)" for name in gaps]
    lines += [f"  {name}: {NOT_IN_SCENARIOS[name]}" for name in left if name in NOT_IN_SCENARIOS]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="exercised_gate.py", description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="the combined coverage.py data file of the gate's run")
    parser.add_argument("--against", metavar="REF", help="fail on changed lines since REF that no scenario ran")
    args = parser.parse_args(argv)
    try:
        from hot_path_modules import hot_path_modules

        print(format_rows(coverage_rows(args.data, ROOT, hot_path_modules(ROOT)), "the loop's modules", SHOWN))
        print("\n".join(fields_report(args.data.parent / "configs")))
        if not args.against:
            return 0
        exclusions = load_exclusions(EXCLUSIONS, ROOT)
        shown = str(EXCLUSIONS.relative_to(ROOT))
        report = check_changed_lines(ROOT, args.against, args.data, UNDER, exclusions, shown)
        print(report.format())
        return 0 if report.ok else 1
    except TripwireError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
