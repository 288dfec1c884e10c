"""Each commit compared with the one before: a cell per check, and the kind of step the commit is.

A commit is compared with the nearest earlier commit that ran to the end (the one before, unless that one crashed
or did not apply), so a crash and its fix show the net change across them. A step is, in this order of precedence:

- `crash`, `error` (the scenario could not run: a target the tree lacks) or `n/a` (the scenario does not apply);
- `value change`, `structure`, `low-bit drift, amplified` or `low-bit drift`: the trajectory differs
  (`tripwire.bitwise.magnitude` states the rule);
- `syncs`: host syncs appeared, grew, shrank or went away;
- `compile`: torch.compile broke the graph, recompiled, fell back to eager or compiled more or less elsewhere;
- `instruments`: the two runs marked a different number of iterations or called an instrumented target a
  different number of times, so one saw less of the loop (`tripwire.outside.compare`);
- `telemetry`: event counts, order, schema or payload values differ;
- `bitwise refactor`: nothing differs.

Every kind found is listed (`Row.kinds`); the first one names the step.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import tripwire
from tripwire.history.commits import Commit
from tripwire.outside.compare import DIFFERS, Verdict, compare_payloads_verdict, compare_results, compare_trajectory
from tripwire.outside.result import Result

CHECKS = ("run", "trajectory", "syncs", "compile", "telemetry", "payloads")
BITWISE = "bitwise refactor"
PRECEDENCE = (
    "fault",
    "crash",
    "error",
    "n/a",
    "value change",
    "structure",
    "low-bit drift, amplified",
    "low-bit drift",
    "syncs",
    "compile",
    "instruments",
    "telemetry",
)


@dataclass(frozen=True)
class Cell:
    """One check of one commit: its kind (`identical`, `low-bit drift`, `syncs`, `crash`, ...) and what it says."""

    kind: str
    text: str
    details: tuple[str, ...] = ()


@dataclass
class Row:
    """One commit of the walk, compared with `against` (the sha of the earlier commit it was compared with)."""

    commit: Commit
    status: str
    cells: dict[str, Cell]
    against: str = ""
    seconds: float = 0.0
    kinds: list[str] = field(default_factory=list)
    between: int = 0  # commits between `against` and this one that the walk did not run: their changes count here
    reused_from: str = ""  # the commit whose result stands for this one (`tripwire.history.reuse`), when not run
    merged: list[str] = field(default_factory=list)  # the side-branch commits a merge brings in (a first-parent walk)

    @property
    def compared(self) -> str:
        """`vs 1a2b3c4d` or `vs 1a2b3c4d, +3 commits not run`: what this row's cells compare with."""
        if not self.against:
            return ""
        between = f", +{self.between} commit{'s' if self.between != 1 else ''} not run" if self.between else ""
        if self.merged:
            shown = ", ".join(sha[:8] for sha in self.merged[:3]) + (", ..." if len(self.merged) > 3 else "")
            between += (
                f", merging {len(self.merged)} side-branch commit{'s' if len(self.merged) != 1 else ''} ({shown})"
            )
        return f"vs {self.against[:8]}{between}"

    @property
    def step(self) -> str:
        """What kind of step this commit is (see the module docstring); `base` for the first commit."""
        if not self.against and self.status == "ok":
            return "base"
        return self.kinds[0] if self.kinds else BITWISE


def _trajectory_kind(verdict: Verdict) -> str:
    return {"checkpoints": "structure", "values": "value change"}.get(verdict.kind, verdict.kind)


def _cells(comparison_verdicts: Sequence[Verdict]) -> dict[str, Cell]:
    cells = {check: Cell("-", "") for check in CHECKS}
    for verdict in comparison_verdicts:
        if verdict.check not in CHECKS:
            continue
        if verdict.status != DIFFERS:
            cells[verdict.check] = Cell("identical" if verdict.status == "same" else "-", verdict.summary)
            continue
        kind = {
            "trajectory": _trajectory_kind(verdict),
            "syncs": "syncs",
            "compile": "compile",
            "run": "instruments",
        }.get(verdict.check, "telemetry")
        cells[verdict.check] = Cell(kind, verdict.summary, verdict.details)
    return cells


def classify(commit: Commit, result: Result, against: Result | None, against_sha: str = "") -> Row:
    """The row of `commit`: its result compared with `against` (None for the first commit of the walk)."""
    if not result.ok:
        cell = Cell(result.status if result.status != "crash" else "crash", f"{result.status}: {result.cause}")
        cells = {"run": cell} | {check: Cell("-", "") for check in CHECKS[1:]}
        return Row(commit, result.status, cells, against_sha, kinds=[result.status])
    if against is None:
        cells = {"run": Cell("base", "ok")} | {check: Cell("base", "") for check in CHECKS[1:]}
        return Row(commit, "ok", cells)
    comparison = compare_results(against, result)
    verdicts = list(comparison.verdicts)
    measured: dict[str, Verdict] = {}
    if has_values(against) and has_values(result):
        if comparison.verdict("trajectory").status == DIFFERS:
            measured["trajectory"] = measured_verdict(
                against, result, "trajectory", lambda: compare_trajectory(with_values(against), with_values(result))
            )
        if comparison.verdict("payloads").status == DIFFERS:
            measured["payloads"] = measured_verdict(
                against,
                result,
                "payloads",
                lambda: compare_payloads_verdict(with_values(against), with_values(result)),
            )
    verdicts = [measured.get(verdict.check, verdict) for verdict in verdicts]
    cells = _cells(verdicts)
    if cells["run"].kind != "instruments":
        cells["run"] = Cell("ok", "ok")
    found = {cell.kind for cell in cells.values()}
    kinds = [kind for kind in PRECEDENCE if kind in found]
    return Row(commit, "ok", cells, against_sha, kinds=kinds)


# the files a measured comparison reads, and tripwire's code that computes it: what its cached verdict depends on
_COMPARED_FILES = ("result.json", "trajectory.json", "payloads.json")
_COMPARING_CODE = ("bitwise/magnitude.py", "bitwise/trajectory.py", "outside/compare.py", "telemetry/payloads.py")


@functools.cache
def _comparing_code() -> bytes:
    root = Path(tripwire.__file__).parent
    digest = hashlib.sha256(tripwire.__version__.encode())
    for name in _COMPARING_CODE:
        digest.update(name.encode() + b"\0" + (root / name).read_bytes())
    return digest.digest()


@functools.lru_cache(maxsize=512)
def _files_digest(folder: str) -> bytes:
    digest = hashlib.sha256()
    for name in _COMPARED_FILES:
        path = Path(folder) / name
        digest.update(name.encode() + b"\0" + (path.read_bytes() if path.exists() else b"<none>"))
    return digest.digest()


def measured_verdict(against: Result, result: Result, check: str, compute: Callable[[], Verdict]) -> Verdict:
    """A measured comparison (`compute`: both sides' values read, every differing tensor measured), cached beside
    `result` under a key of both results' files and the comparing code, so a walk over cached results measures
    nothing twice. A cached verdict that cannot be read is measured again."""
    if against.folder is None or result.folder is None:
        return compute()
    key = hashlib.sha256(
        _comparing_code() + _files_digest(str(against.folder)) + _files_digest(str(result.folder)) + check.encode()
    ).hexdigest()[:24]
    path = result.folder / "compared" / f"{key}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Verdict(data["check"], data["status"], data["summary"], tuple(data["details"]), data["kind"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    verdict = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    partial.write_text(json.dumps(dataclasses.asdict(verdict)), encoding="utf-8")
    partial.replace(path)
    return verdict


def has_values(result: Result) -> bool:
    return result.folder is not None and (result.folder / "values.pt").exists()


def with_values(result: Result) -> Result:
    """The result again, with its kept values (a few recent ones are held: bisection reloads its base often)."""
    assert result.folder is not None
    return _load_with_values(str(result.folder))


@functools.lru_cache(maxsize=4)
def _load_with_values(folder: str) -> Result:
    return Result.load(folder, values=True)


def walk_rows(commits: Sequence[Commit], results: Mapping[str, Result], seconds: Mapping[str, float]) -> list[Row]:
    """Every commit's row, each compared with the nearest earlier commit that ran to the end."""
    rows: list[Row] = []
    last_ok: tuple[Commit, Result] | None = None
    for commit in commits:
        result = results[commit.sha]
        against, sha = (last_ok[1], last_ok[0].sha) if last_ok is not None else (None, "")
        row = classify(commit, result, against, sha)
        row.seconds = seconds.get(commit.sha, 0.0)
        row.reused_from = str(result.source.get("reused_from", ""))
        if result.ok and rows and rows[-1].status != "ok" and last_ok is not None:
            row.cells["run"] = Cell("fixed", f"ok again (compared with {last_ok[0].short}, the last commit that ran)")
        rows.append(row)
        if result.ok:
            last_ok = (commit, result)
    return rows
