"""What the gate's scenarios ran: changed lines no scenario executed fail the gate (`python -m tripwire exercised`).

A green gate must not mean "nothing looked": a change in code the scenarios never execute (a preset no scenario
runs, a CLI path) passes every behaviour check because nothing ran it. The gate runs its scenarios under coverage.py
(the project's `[tool.coverage.run]`; `patch = ["subprocess"]` follows the ranks and runs the scenarios start), then:

- with a base (`--against REF`): every line the change adds or edits under `--under` (`git diff REF`, plus files git
  does not track yet) that is part of an executable statement must have run, or the gate fails naming each unseen
  line (file:line, its function, the line) and how to cover it. Lines that only moved (a block removed in one place
  and added in another, `MOVED_BLOCK`) are no change. A changed line is judged by the statement it
  belongs to (the continuation line of a call is that call), so comments, blank lines and docstrings are never
  "unseen". An explicit exclusion list (TOML, `[[unexercised]]` entries of `where = "path::function"` or
  `where = "path"`, and/or `pattern`, a regular expression the statement's first line matches, each with a
  non-empty `reason`) names code that no scenario can run; an entry whose `where` names nothing in the tree is an
  error, so the list does not outlive the code it excuses.
- without a base: a report, never a failure: the share of each named module's statements the scenarios ran and the
  functions they never entered (`coverage_rows`).

Loads without torch; coverage.py is imported when a data file is read (tripwire's `coverage` extra).
"""

from __future__ import annotations

import ast
import difflib
import re
import sys
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tripwire.common.errors import TripwireError
from tripwire.common.git import check_ref, git_output, git_run

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


class ExercisedError(TripwireError):
    """The inputs of the changed-line check are unusable (no coverage data, a bad exclusion list, git refused)."""


@dataclass(frozen=True)
class Unseen:
    """One changed line of an executable statement that no scenario ran."""

    file: str
    line: int
    function: str
    text: str

    def format(self) -> str:
        return f"{self.file}:{self.line} in {self.function or '<module>'}  `{self.text}`"


@dataclass(frozen=True)
class Exclusion:
    """A reviewed entry of the exclusion list: code no scenario runs, and why."""

    where: str  # "path::qualname" (a function or class, and what it contains), "path" (a module), "" (anywhere)
    reason: str
    pattern: str = ""  # a regular expression the statement's first line must match (`^raise `), "" for any

    def covers(self, file: str, function: str, statement: str) -> bool:
        path, _, name = self.where.partition("::")
        if path and path != file:
            return False
        if name and function != name and not function.startswith(f"{name}."):
            return False
        return not self.pattern or re.search(self.pattern, statement) is not None


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
            text = (root / name).read_text(encoding="utf-8", errors="replace").splitlines()
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


def _coverage(data_file: Path) -> Any:
    try:
        import coverage
    except ImportError as error:  # pragma: no cover - the extra is part of the test environment
        raise ExercisedError("coverage.py is not installed: pip install 'tripwire-gate[coverage]'") from error
    if not data_file.exists():
        raise ExercisedError(
            f"no coverage data at {data_file}: run the scenarios under coverage first (coverage run -m pytest ...)"
        )
    cov = coverage.Coverage(data_file=str(data_file))
    cov.load()
    return cov


def executed_lines(data_file: Path, root: Path) -> dict[str, set[int]]:
    """Lines coverage.py saw run, per file under `root` (root-relative; copies of the tree elsewhere are ignored)."""
    data = _coverage(data_file).get_data()
    prefix = str(root.resolve()) + "/"
    return {
        name[len(prefix) :]: set(data.lines(name) or ()) for name in data.measured_files() if name.startswith(prefix)
    }


@dataclass(frozen=True)
class _Layout:
    """Per source line of one file: the first line of the statement it belongs to, and its enclosing function."""

    statement: dict[int, int]
    function: dict[int, str]


def _start(node: ast.AST) -> int:
    """The first line of a statement or clause (a `case` starts at its pattern)."""
    if isinstance(node, ast.match_case):
        return node.pattern.lineno
    return int(getattr(node, "lineno", 0))


def _layout(source: str) -> _Layout:
    tree = ast.parse(source)
    statement: dict[int, int] = {}
    function: dict[int, str] = {}

    def visit(node: ast.AST, qualname: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ExceptHandler, ast.match_case)):  # a clause: its header, then its body
                body_start = child.body[0].lineno if child.body else None
                header = child.lineno if isinstance(child, ast.ExceptHandler) else child.pattern.lineno
                for line in range(header, (body_start or header + 1)):
                    statement[line] = header
                visit(child, qualname)
                continue
            if not isinstance(child, ast.stmt):
                continue
            inner = qualname
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = f"{qualname}.{child.name}" if qualname else child.name
            end = child.end_lineno or child.lineno
            first = min([child.lineno, *(d.lineno for d in getattr(child, "decorator_list", ()))])
            for line in range(first, end + 1):
                function[line] = inner
            clauses = [getattr(child, name, None) for name in ("body", "orelse", "finalbody", "handlers", "cases")]
            starts = [_start(items[0]) for items in clauses if isinstance(items, list) and items]
            header_end = min(starts) - 1 if starts else end
            for line in range(first, max(header_end, child.lineno) + 1):
                statement[line] = child.lineno  # a compound statement's header; its body is visited below
            visit(child, inner)

    visit(tree, "")
    return _Layout(statement, function)


def check_changed_lines(
    root: Path,
    base: str,
    data_file: Path,
    under: Sequence[str],
    exclusions: Sequence[Exclusion] = (),
    exclusions_file: str = "",
) -> ExercisedReport:
    """Every changed line of an executable statement under `under` must have run (module docstring)."""
    cov = _coverage(data_file)
    ran = executed_lines(data_file, root)
    unseen: list[Unseen] = []
    excused: list[tuple[Unseen, Exclusion]] = []
    executable = 0
    for name, lines in sorted(changed_lines(root, base, under).items()):
        path = root / name
        source = path.read_text(encoding="utf-8", errors="replace")
        try:
            layout = _layout(source)
        except SyntaxError as error:
            raise ExercisedError(
                f"{name}:{error.lineno}: cannot be parsed ({error.msg}); fix the syntax first"
            ) from error
        statements = set(cov.analysis2(str(path))[1])
        text = source.splitlines()
        seen_statements: set[int] = set()
        for line in sorted(lines):
            first = layout.statement.get(line)
            if first is None or first not in statements or first in seen_statements:
                continue  # a comment, a blank line, a docstring, or a statement already judged
            seen_statements.add(first)
            executable += 1
            if first in ran.get(name, set()):
                continue
            row = Unseen(name, line, layout.function.get(line, ""), text[line - 1].strip() if line <= len(text) else "")
            statement = text[first - 1].strip() if first <= len(text) else ""
            exclusion = next((e for e in exclusions if e.covers(name, row.function, statement)), None)
            (excused.append((row, exclusion)) if exclusion is not None else unseen.append(row))
    return ExercisedReport(base, executable, tuple(unseen), tuple(excused), exclusions_file)


def load_exclusions(path: Path, root: Path) -> list[Exclusion]:
    """The reviewed exclusion list; a malformed entry, or one that names nothing in the tree, raises naming it."""
    if not path.exists():
        return []
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise ExercisedError(f"{path}: not valid TOML ({error}); fix the file") from error
    entries = data.get("unexercised", [])
    if not isinstance(entries, list):
        raise ExercisedError(
            f"{path}: `unexercised` must be a list of tables ([[unexercised]] where = ..., reason = ...)"
        )
    out = []
    for index, item in enumerate(entries, 1):
        entry: Mapping[str, Any] = item if isinstance(item, Mapping) else {}
        where, reason, pattern = entry.get("where", ""), entry.get("reason"), entry.get("pattern", "")
        named = isinstance(where, str) and isinstance(pattern, str) and bool(where or pattern)
        known = not set(entry) - {"where", "reason", "pattern"}
        if not named or not known or not isinstance(reason, str) or not reason.strip():
            needs = "needs `where` (file::function) or `pattern` (a regular expression), and a non-empty `reason`"
            raise ExercisedError(f"{path}: entry {index} {needs}")
        try:
            re.compile(pattern)
        except re.error as error:
            raise ExercisedError(
                f"{path}: entry {index}: `pattern` {pattern!r} is no regular expression ({error})"
            ) from None
        exclusion = Exclusion(where, reason.strip(), pattern)
        if where:
            _check_names_something(path, root, exclusion)
        out.append(exclusion)
    return out


def _check_names_something(path: Path, root: Path, exclusion: Exclusion) -> None:
    file, _, name = exclusion.where.partition("::")
    target = root / file
    if not target.is_file():
        raise ExercisedError(f"{path}: {exclusion.where!r} names no file of the tree (moved? update or drop the entry)")
    if name and name not in set(_layout(target.read_text(encoding="utf-8")).function.values()):
        raise ExercisedError(f"{path}: {exclusion.where!r} names no function in {file} (renamed? update the entry)")


def coverage_rows(data_file: Path, root: Path, files: Iterable[str]) -> list[CoverageRow]:
    """For each root-relative file: statements, how many the scenarios ran, and the functions they never entered."""
    cov = _coverage(data_file)
    ran = executed_lines(data_file, root)
    rows = []
    for name in sorted(set(files)):
        path = root / name
        statements = set(cov.analysis2(str(path))[1])
        run = statements & ran.get(name, set())
        source = path.read_text(encoding="utf-8")
        layout = _layout(source)
        never = []
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
                body = {stmt.lineno for stmt in node.body} & statements
                if body and not body & run:
                    never.append(layout.function.get(node.lineno, node.name))
        rows.append(CoverageRow(name, len(statements), len(run), tuple(sorted(never))))
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


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m tripwire exercised`: the changed-line check (`--against REF`) or the coverage report."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tripwire exercised", description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="coverage.py data file of the scenario run")
    parser.add_argument("--against", metavar="REF", help="fail on changed lines since REF that no scenario ran")
    parser.add_argument("--under", nargs="+", default=["src"], help="folders whose changes count (default: src)")
    parser.add_argument("--exclusions", type=Path, help="the reviewed exclusion list (TOML, [[unexercised]])")
    parser.add_argument("--modules", nargs="*", default=[], help="files the no-base report lists (default: all)")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the repository root (default: here)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    try:
        if args.against:
            exclusions = load_exclusions(args.exclusions, root) if args.exclusions else []
            shown = str(args.exclusions) if args.exclusions else ""
            report = check_changed_lines(root, args.against, args.data, args.under, exclusions, shown)
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
