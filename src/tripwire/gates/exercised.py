"""What the gate's scenarios ran: changed lines no scenario executed fail the gate (`python -m tripwire exercised`).

A green gate must not mean "nothing looked": a change in code the scenarios never execute (a preset no scenario
runs, a CLI path) passes every behaviour check because nothing ran it. The gate runs its scenarios under coverage.py
(the project's `[tool.coverage.run]`; `patch = ["subprocess"]` follows the ranks and runs the scenarios start), then:

- with a base (`--against REF`): every line the change adds or edits under `--under` (`git diff REF`, plus files git
  does not track yet) that is part of an executable statement must have run, or the gate fails naming each unseen
  line (file:line, its function, the line) and how to cover it. A statement that runs when its module is imported (a
  constant, a `def` line with its defaults, a class attribute) ran for every scenario that imported it: it counts as
  seen only when what it defines was used by code that ran (`tripwire.gates.import_time`). Lines that only moved (a
  block removed in one place and added in another, `MOVED_BLOCK`) are no change. A changed line is judged by the
  statement it belongs to (the continuation line of a call is that call), so comments, blank lines and docstrings
  are never "unseen". An explicit exclusion list (TOML, `[[unexercised]]` entries of `where = "path::function"` or
  `where = "path"`, and/or `pattern`, a regular expression the statement's first line matches, each with a non-empty
  `reason`) names code that no scenario can run; an entry whose `where` names nothing in the tree is an error, so
  the list does not outlive the code it excuses (`tripwire.gates.exclusions`).
- without a base: a report, never a failure: the share of each named module's statements the scenarios ran and the
  functions they never entered (`coverage_rows`).

Every input is checked before use (`tripwire.gates.coverage_data`): damaged coverage data, a measured path that
climbs out of the tree, a `--modules` or exclusion file that is a folder, a FIFO, a device or not UTF-8 is one line
naming it; `--against` reaches git only as a ref (`tripwire.common.git`). Loads without torch; coverage.py is
imported when a data file is read (tripwire's `coverage` extra).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from tripwire.common.errors import TripwireError
from tripwire.common.files import input_file, shown
from tripwire.common.git import check_ref, git_output, git_run
from tripwire.gates.coverage_data import ExercisedError, coverage_of, executed_lines, source_text, statements
from tripwire.gates.exclusions import Exclusion, load_exclusions
from tripwire.gates.import_time import import_time_statements, names_used_at_run_time
from tripwire.gates.layout import layout

__all__ = [
    "CoverageRow",
    "Exclusion",
    "ExercisedError",
    "ExercisedReport",
    "Unseen",
    "changed_lines",
    "check_changed_lines",
    "coverage_rows",
    "executed_lines",
    "fields_at_default",
    "load_exclusions",
]


@dataclass(frozen=True)
class Unseen:
    """One changed line of an executable statement that no scenario ran."""

    file: str
    line: int
    function: str
    text: str
    why: str = ""  # a statement that ran at import only: what nothing that ran used

    def format(self) -> str:
        why = f"  ({self.why})" if self.why else ""
        return f"{self.file}:{self.line} in {self.function or '<module>'}  `{self.text}`{why}"


@dataclass(frozen=True)
class ExercisedReport:
    """Outcome of `check_changed_lines`."""

    base: str
    changed: int  # changed lines that belong to executable statements
    unseen: tuple[Unseen, ...]
    excused: tuple[tuple[Unseen, Exclusion], ...] = ()
    exclusions_file: str = ""

    @property
    def ok(self) -> bool:
        return not self.unseen

    def format(self) -> str:
        head = f"changed lines against {self.base}: {self.changed} executable"
        if self.ok:
            excused = f", {len(self.excused)} excused by the exclusion list" if self.excused else ""
            return f"{head}, every one run by a scenario{excused}"
        lines = [f"{head}, {len(self.unseen)} never run by any scenario (a green gate would not have looked):"]
        lines += [f"  UNSEEN {unseen.format()}" for unseen in self.unseen]
        lines += [f"  excused {unseen.format()}  ({exclusion.reason})" for unseen, exclusion in self.excused]
        where = self.exclusions_file or "the exclusion list"
        lines.append(
            "  cover them: add a scenario (or a guardrail check) that runs them, or, when no scenario can, an entry "
            f'in {where}: [[unexercised]] where = "<file>::<function>", reason = "<why no scenario runs it>"'
        )
        return "\n".join(lines)


@dataclass(frozen=True)
class CoverageRow:
    """One module's share of statements the scenarios ran, and the functions they never entered."""

    file: str
    statements: int
    run: int
    never_entered: tuple[str, ...] = field(default_factory=tuple)

    @property
    def percent(self) -> float:
        return 100.0 * self.run / self.statements if self.statements else 100.0


_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


@dataclass
class _Hunk:
    """The lines one diff hunk (or a file git does not track yet) adds, and the lines it removes."""

    file: str
    added: list[tuple[int, str]] = field(default_factory=list)  # (line number in the new file, text)
    removed: list[str] = field(default_factory=list)


# A moved block: at least this many consecutive lines, removed in one place and added in another, the same text
# once stripped of indentation (a method moved out of its class is dedented). Shorter runs are edits: a lone
# `return None` that went and came is not told from a rewrite by its text.
MOVED_BLOCK = 3


def _commit(root: Path, base: str) -> str:
    """The sha `base` (the `--against` ref) names; a ref git could read as an option, or one naming no commit,
    is a one-line ExercisedError."""
    check_ref(base, "--against", ExercisedError)
    done = git_run(root, "rev-parse", "--verify", "-q", operands=(f"{base}^{{commit}}",))
    if done.returncode:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        why = f" ({said[-1]})" if said else ""
        raise ExercisedError(f"--against {base!r} names no commit in {root}{why}: pass a branch, tag or sha there")
    return done.stdout.decode("ascii", "replace").strip()


def _hunks(root: Path, base: str, under: Sequence[str]) -> list[_Hunk]:
    sha = _commit(root, base)
    options = ("-U0", "--no-color", "--no-ext-diff", "--no-renames")
    diff = git_output(root, "diff", *options, operands=(sha,), paths=under, error=ExercisedError)
    hunks: list[_Hunk] = []
    current = ""
    number = 0
    for line in diff.splitlines():
        if line.startswith("+++ "):
            name = line[4:]
            current = name[2:] if name.startswith("b/") else ""  # "/dev/null": the file was deleted
            continue
        if line.startswith("--- "):
            continue
        match = _HUNK.match(line)
        if match:
            hunks.append(_Hunk(current))
            number = int(match.group(1))
        elif hunks and line.startswith("+"):
            hunks[-1].added.append((number, line[1:]))
            number += 1
        elif hunks and line.startswith("-"):
            hunks[-1].removed.append(line[1:])
    untracked = git_output(root, "ls-files", "--others", "--exclude-standard", paths=under, error=ExercisedError)
    for name in untracked.splitlines():
        if name.endswith(".py"):
            text = source_text(root, name, "new file").splitlines()
            hunks.append(_Hunk(name, list(enumerate(text, 1))))
    return hunks


def _moved(hunks: Sequence[_Hunk]) -> set[tuple[str, int]]:
    """(file, line) of the added lines that belong to a block removed elsewhere in the change (`MOVED_BLOCK`)."""
    removed = [[text.strip() for text in hunk.removed] for hunk in hunks if hunk.removed]
    moved: set[tuple[str, int]] = set()
    for hunk in hunks:
        added = [text.strip() for _, text in hunk.added]
        for old in removed:
            matcher = difflib.SequenceMatcher(None, added, old, autojunk=False)
            for block in matcher.get_matching_blocks():
                lines = added[block.a : block.a + block.size]
                if block.size >= MOVED_BLOCK and sum(1 for text in lines if text) >= MOVED_BLOCK - 1:
                    moved.update((hunk.file, hunk.added[i][0]) for i in range(block.a, block.a + block.size))
    return moved


def changed_lines(root: Path, base: str, under: Sequence[str]) -> dict[str, set[int]]:
    """Lines added or edited since `base` in the working tree, per `.py` file under `under` (root-relative paths);
    files git does not track yet count as wholly added. Lines that only moved (a block of `MOVED_BLOCK` or more
    lines removed in one place and added in another, indentation aside) are not changes."""
    hunks = _hunks(root, base, under)
    moved = _moved(hunks)
    changed: dict[str, set[int]] = {}
    for hunk in hunks:
        if hunk.file.endswith(".py"):
            lines = {number for number, _ in hunk.added if (hunk.file, number) not in moved}
            changed.setdefault(hunk.file, set()).update(lines)
    return {name: lines for name, lines in changed.items() if lines}


def check_changed_lines(
    root: Path,
    base: str,
    data_file: Path,
    under: Sequence[str],
    exclusions: Sequence[Exclusion] = (),
    exclusions_file: str = "",
) -> ExercisedReport:
    """Every changed line of an executable statement under `under` must have run (module docstring)."""
    cov = coverage_of(data_file)
    ran = executed_lines(data_file, root)
    unseen: list[Unseen] = []
    excused: list[tuple[Unseen, Exclusion]] = []
    executable = 0
    used: set[str] | None = None  # the names run-time code used, read once when first needed
    for name, lines in sorted(changed_lines(root, base, under).items()):
        source = source_text(root, name, "changed file")
        lines_of = layout(source)
        executable_lines = statements(cov, root, name, "changed file")
        at_import = import_time_statements(source)
        text = source.splitlines()
        seen_statements: set[int] = set()
        for line in sorted(lines):
            first = lines_of.statement.get(line)
            if first is None or first not in executable_lines or first in seen_statements:
                continue  # a comment, a blank line, a docstring, or a statement already judged
            seen_statements.add(first)
            executable += 1
            why = ""
            if first in ran.get(name, set()):
                entry = at_import.get(first)
                if entry is None:
                    continue
                if used is None:
                    used = names_used_at_run_time({file: source_text(root, file, "run file") for file in ran}, ran)
                if entry.used(ran.get(name, set()), used):
                    continue
                why = entry.why()
            row = Unseen(
                name, line, lines_of.function.get(line, ""), text[line - 1].strip() if line <= len(text) else "", why
            )
            statement = text[first - 1].strip() if first <= len(text) else ""
            exclusion = next((e for e in exclusions if e.covers(name, row.function, statement)), None)
            (excused.append((row, exclusion)) if exclusion is not None else unseen.append(row))
    return ExercisedReport(base, executable, tuple(unseen), tuple(excused), exclusions_file)


def coverage_rows(data_file: Path, root: Path, files: Iterable[str]) -> list[CoverageRow]:
    """For each root-relative file: statements, how many the scenarios ran, and the functions they never entered."""
    cov = coverage_of(data_file)
    ran = executed_lines(data_file, root)
    rows = []
    for name in sorted(set(files)):
        source = source_text(root, name, "--modules")
        lines = statements(cov, root, name, "--modules")
        run = lines & ran.get(name, set())
        lines_of = layout(source)
        never = []
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
                body = {stmt.lineno for stmt in node.body} & lines
                if body and not body & run:
                    never.append(lines_of.function.get(node.lineno, node.name))
        rows.append(CoverageRow(name, len(lines), len(run), tuple(sorted(never))))
    return rows


def fields_at_default(default: Mapping[str, Any], used: Iterable[Mapping[str, Any]]) -> list[str]:
    """The fields of a configuration that every run used at its default value (what no run exercised)."""
    configs = list(used)
    return sorted(name for name, value in default.items() if all(config.get(name) == value for config in configs))


def format_rows(rows: Sequence[CoverageRow], title: str, shown: int | None = None) -> str:
    """The no-base report: the total, then the modules not fully run (least run first, the first `shown` of them),
    each with the functions no scenario entered."""
    statements, run = sum(row.statements for row in rows), sum(row.run for row in rows)
    share = 100.0 * run / statements if statements else 100.0
    partial = sorted((row for row in rows if row.run < row.statements), key=lambda row: (row.percent, row.file))
    lines = [f"{title}: {run}/{statements} statements run by the scenarios ({share:.0f} %)"]
    for row in partial[:shown]:
        never = f"; never entered: {', '.join(row.never_entered)}" if row.never_entered else ""
        lines.append(f"  {row.percent:5.1f} %  {row.file} ({row.run}/{row.statements}){never}")
    if shown is not None and len(partial) > shown:
        more = len(partial) - shown
        lines.append(f"  ... {more} more modules not fully run (python -m tripwire exercised lists all)")
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    """argparse whose usage error is one line (exit 2), as every tripwire command's."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {shown(message)} (see --help)\n")


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m tripwire exercised`: the changed-line check (`--against REF`) or the coverage report."""
    parser = _Parser(prog="python -m tripwire exercised", description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="coverage.py data file of the scenario run")
    parser.add_argument("--against", metavar="REF", help="fail on changed lines since REF that no scenario ran")
    parser.add_argument("--under", nargs="+", default=["src"], help="folders whose changes count (default: src)")
    parser.add_argument("--exclusions", type=Path, help="the reviewed exclusion list (TOML, [[unexercised]])")
    parser.add_argument("--modules", nargs="*", default=[], help="files the no-base report lists (default: all)")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the repository root (default: here)")
    args = parser.parse_args(argv)
    root = Path(os.path.realpath(args.root))
    try:
        if not root.is_dir():
            raise ExercisedError(f"--root {shown(args.root)} is not a folder: pass the repository root")
        if args.against is not None:
            if args.exclusions is not None:  # named on purpose: it must be there, not be skipped as absent
                input_file(args.exclusions, "--exclusions", ExercisedError, "pass the TOML exclusion list")
            exclusions = load_exclusions(args.exclusions, root) if args.exclusions else []
            listed = shown(args.exclusions) if args.exclusions else ""
            report = check_changed_lines(root, args.against, args.data, args.under, exclusions, listed)
            print(report.format())
            return 0 if report.ok else 1
        files = args.modules or [
            name for name in executed_lines(args.data, root) if any(name.startswith(f"{u}/") for u in args.under)
        ]
        print(format_rows(coverage_rows(args.data, root, files), "scenario coverage"))
        return 0
    except TripwireError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
