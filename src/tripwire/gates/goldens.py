"""Golden files under one baselines directory: check against them, or regenerate them on purpose.

Layout (every file is reviewed in diffs):

    baselines/telemetry/<test module>/<test name>.json     event-count snapshots (syrupy, `tripwire.telemetry.snapshot`)
    baselines/sync_budgets/<scenario>.json                 per-region sync budgets with call sites
    baselines/compile_budgets/<scenario>.json              what torch.compile may do, per region and line, alike
    baselines/trajectories/<scenario>/<context key>.json   trajectory digests, one file per determinism context
    baselines/payloads/<scenario>/<context key>.json       telemetry payload digests, one checkpoint per event
    baselines/clock/<scenario>.json                        wall-clock fields' scales against the run's wall time

Trajectory and payload goldens are keyed by determinism context (`tripwire.common.context`): a machine whose context
has no golden SKIPS the comparison with the differing settings as the reason, instead of failing falsely. A store
with `require=True` (the pytest plugin sets it under `CI`, unless the run compares against a base tree) FAILS
there instead, in one line saying what to do: a check that cannot run is never a silent pass in CI.
Updating is explicit (`pytest --tripwire-update`, or the project's own command) and refused when `CI` is set.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tripwire.bitwise.trajectory import VALUES_FILE_SUFFIX, Trajectory, compare_trajectories, load_values, save_values
from tripwire.common.context import capture_context, context_key, mismatches
from tripwire.common.errors import (
    CompileBudgetExceeded,
    GoldenFileError,
    NoGoldenApplies,
    SyncBudgetExceeded,
    against_command,
    read_golden_json,
    update_command,
)
from tripwire.common.files import write_text
from tripwire.sync.budget import BudgetReport, SyncBudget, check_budget, write_budget
from tripwire.sync.counter import SyncCounter
from tripwire.sync.log import EventLog
from tripwire.sync.sites import callers_by_line, lines_by_key
from tripwire.sync.state import stale_note
from tripwire.telemetry.clock import (
    DEFAULT_BAND,
    ClockUnitChanged,
    clock_differences,
    clock_fields,
    clock_golden,
    outlasting,
)
from tripwire.telemetry.payloads import DEFAULT_EXCLUDED, check_payloads, payload_trajectory


def _update() -> str:
    return f"{update_command()}, then review and commit the goldens"


@dataclass(frozen=True)
class GoldenOutcome:
    """What a golden check did: `passed`, `updated` or `skipped`, with a one-line detail."""

    status: str
    detail: str = ""


@dataclass
class GoldenStore:
    """Checks and (when `update`) rewrites the goldens of one baselines directory."""

    root: Path
    update: bool = False
    require: bool = False  # no applicable golden fails instead of skipping (CI without a base comparison)
    notes: list[str] = field(default_factory=list)

    def budget_path(self, scenario: str) -> Path:
        return self.root / "sync_budgets" / f"{scenario}.json"

    def compile_budget_path(self, scenario: str) -> Path:
        return self.root / "compile_budgets" / f"{scenario}.json"

    def trajectory_dir(self, scenario: str) -> Path:
        return self.root / "trajectories" / scenario

    def payloads_dir(self, scenario: str) -> Path:
        return self.root / "payloads" / scenario

    def clock_path(self, scenario: str) -> Path:
        return self.root / "clock" / f"{scenario}.json"

    def _shown(self, path: Path) -> str:
        """`path` relative to the baselines directory's parent (the repository root), for messages."""
        try:
            return str(path.relative_to(self.root.parent))
        except ValueError:
            return str(path)

    def check_sync_budget(
        self, scenario: str, counter: SyncCounter, context: dict[str, Any], regions: Sequence[str] = ()
    ) -> GoldenOutcome:
        """Compare the counter with the scenario's budget; over budget or unbudgeted raises with call sites.

        `regions` are hot-path regions budgeted even when they made no sync (written as 0), so a first
        sync there reads "budget 0 (+n)" rather than "unbudgeted".
        """
        return self._check_events(self.budget_path(scenario), scenario, counter, context, regions, "sync")

    def check_compile_budget(
        self, scenario: str, counter: EventLog, context: dict[str, Any], regions: Sequence[str] = ()
    ) -> GoldenOutcome:
        """Compare what torch.compile did (a `tripwire.compile.counter.CompileCounter`) with the scenario's compile
        budget: a new graph break, recompile or fallback raises naming its region, line and reason."""
        return self._check_events(self.compile_budget_path(scenario), scenario, counter, context, regions, "compile")

    def _check_events(
        self, path: Path, scenario: str, counter: EventLog, context: dict[str, Any], regions: Sequence[str], what: str
    ) -> GoldenOutcome:
        events = "syncs" if what == "sync" else "compilation events"
        failure = SyncBudgetExceeded if what == "sync" else CompileBudgetExceeded
        edited = stale_note(getattr(counter, "stale_sources", []))  # a sync counter's: its loop edited mid-run
        if self.update:
            if edited:  # counts read against the wrong lines: never written as a golden
                raise failure(f"scenario {scenario!r}: {edited}; {self._shown(path)} left as it was")
            counts = {region: 0 for region in regions} | counter.counts_by_region()
            records, sites = counter.site_records(), counter.site_keys_by_region()
            lines, callers = lines_by_key(records), callers_by_line(records)
            write_budget(path, counts, sites, _budget_context(context), lines, callers=callers)
            return GoldenOutcome("updated", f"wrote {self._shown(path)}")
        try:
            budget = SyncBudget.load(path)
        except GoldenFileError as error:
            raise failure(f"{error}; create it with {_update()}") from None
        report: BudgetReport = check_budget(counter, budget, what=what)
        if not report.ok:
            raise failure(f"scenario {scenario!r}: {report.format()}" + (f"\n{edited}" if edited else ""))
        if edited:
            self.notes.append(f"scenario {scenario!r}: {edited}")
        if report.under:
            note = f"scenario {scenario!r}: {report.format()}"
            self.notes.append(note)
            return GoldenOutcome("passed", note.splitlines()[-1].strip())
        return GoldenOutcome("passed", f"{counter.total} {events} within budget")

    def check_trajectory(self, scenario: str, trajectory: Trajectory) -> GoldenOutcome:
        """Compare with the golden for this determinism context; skip with the reason when there is none."""
        context = trajectory.context or capture_context()
        folder = self.trajectory_dir(scenario)
        path = folder / f"{context_key(context)}.json"
        values_path = path.with_name(path.stem + VALUES_FILE_SUFFIX)
        if self.update:
            trajectory.context = dict(context)
            trajectory.save(path)
            if trajectory.values:  # kept for a base recorded just now (`--against`): the check can say how big
                save_values(values_path, trajectory.values, dict(trajectory.checkpoints))
            return GoldenOutcome("updated", f"wrote {self._shown(path)}")
        if not path.exists():
            return self.no_golden("trajectory", scenario, self._missing_reason(folder, context))
        golden = Trajectory.load(path)
        if values_path.exists() and trajectory.values is not None:
            golden.values = load_values(values_path)
        report = compare_trajectories(golden, trajectory, source=str(path))
        report.raise_if_diverged()
        return GoldenOutcome("passed", f"{len(trajectory)} checkpoints bitwise equal")

    def check_payloads(
        self,
        scenario: str,
        events: Iterable[Mapping[str, Any]],
        context: dict[str, Any],
        *,
        exclude: Sequence[str] = DEFAULT_EXCLUDED,
    ) -> GoldenOutcome:
        """Compare every event's payload digests with the golden for `context`; skip with the reason when there is none.

        Digests and the `exclude` patterns (ids, timestamps, wall-clock fields) are those of
        `tripwire.telemetry.payloads`; a difference raises `PayloadDivergence` naming the first differing event, its
        type and the field.
        """
        recorded = payload_trajectory(events, context, exclude=exclude)
        folder = self.payloads_dir(scenario)
        path = folder / f"{context_key(context)}.json"
        if self.update:
            recorded.save(path)
            return GoldenOutcome("updated", f"wrote {self._shown(path)}")
        if not path.exists():
            return self.no_golden("telemetry payload", scenario, self._missing_reason(folder, context, "payload"))
        check_payloads(Trajectory.load(path), recorded, source=self._shown(path))
        return GoldenOutcome("passed", f"{len(recorded)} events, every payload field bitwise equal")

    def check_clock(
        self,
        scenario: str,
        events: Iterable[Mapping[str, Any]],
        wall_s: float,
        fields: Sequence[str],
        *,
        band: float = DEFAULT_BAND,
    ) -> GoldenOutcome:
        """The wall-clock fields `fields` select (durations, rates) against the run's `wall_s`
        (`tripwire.telemetry.clock`): a duration that outlasts the run fails with or without a golden (and is never
        written into one), and a field whose scale moved by more than `band` either way fails against the golden.
        Not keyed by determinism context: a field's unit does not depend on the machine's numerics."""
        found = clock_fields(events, wall_s, fields)
        path = self.clock_path(scenario)
        problems = outlasting(found, wall_s)
        if problems:
            raise ClockUnitChanged(f"scenario {scenario!r}: " + "; ".join(problems))
        if self.update:
            write_text(path, json.dumps(clock_golden(found, wall_s, band), indent=2, sort_keys=True) + "\n")
            return GoldenOutcome("updated", f"wrote {self._shown(path)}")
        if not path.exists():
            return self.no_golden("telemetry clock", scenario, f"no clock golden {self._shown(path)}: {_update()}")
        golden = read_golden_json(path, f"clock golden does not exist ({_update()})")
        if not isinstance(golden, Mapping) or not isinstance(golden.get("fields"), Mapping):
            raise GoldenFileError(f"{self._shown(path)}: not a clock golden (no 'fields' object): {_update()}")
        problems = clock_differences(golden, found, wall_s)
        if problems:
            raise ClockUnitChanged(f"scenario {scenario!r} ({self._shown(path)}): " + "; ".join(problems))
        within = f"x/{golden.get('band', band):g}"
        return GoldenOutcome("passed", f"{len(found)} wall-clock fields within {within} of their scale")

    def no_golden(self, check: str, scenario: str, reason: str) -> GoldenOutcome:
        """A `skipped` outcome with `reason`; with `require`, a one-line `NoGoldenApplies` failure instead."""
        if self.require:
            raise NoGoldenApplies(
                f"{check} golden for {scenario!r} cannot be checked on this machine ({reason}); under CI a skipped "
                f"check is a failure: compare base and head here: {against_command()}"
            )
        return GoldenOutcome("skipped", reason)

    def _missing_reason(self, folder: Path, context: dict[str, Any], kind: str = "trajectory") -> str:
        """Why no golden applies here: the settings that differ from each recorded context."""
        others = sorted(folder.glob("*.json")) if folder.is_dir() else []
        if not others:
            return f"no {kind} golden in {folder}: record one with {_update()}"
        reasons = []
        for other in others:
            recorded = Trajectory.load(other).context
            reasons.append(f"{other.name} differs in " + "; ".join(mismatches(recorded, context) or ["<nothing?>"]))
        return "determinism context has no golden here (" + " | ".join(reasons) + ")"


def _budget_context(context: dict[str, Any]) -> dict[str, Any]:
    """The part of the context recorded in a budget file (counts do not depend on thread count or ISA)."""
    return {key: context[key] for key in ("device", "torch") if key in context}
