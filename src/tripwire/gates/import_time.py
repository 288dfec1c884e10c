"""Statements that run when their module is imported, and what proves a scenario used what they define.

Coverage marks every module-level statement as run as soon as the module is imported: a constant, a `def` line with
its defaults and decorators, a class body's attributes. A change there read "seen" though no scenario used it (a
default changed in a function no scenario calls, a constant only an unrun path reads). The changed-line gate
(`tripwire.gates.exercised`) asks this module instead:

- a `def` (its decorators, its defaults) is used when a statement of its body ran;
- a `class` line (its bases, its decorators) is used when a statement of any of its methods ran, or its name is used
  as below;
- a name bound at module level or in a class body (`X = ...`, `x: int = 5`, `X += ...`) is used when a statement
  that ran inside a function, in any measured file, names it (as a name, an attribute, or a string: `getattr`);
- any other statement (an import, a call at import, an `if` at module level) is used when it ran, as before.

What a used import-time statement reads is used in turn (`CONFIG = Config(**DEFAULTS)` with CONFIG read at run time
uses DEFAULTS; a `def` that was called uses its defaults' names).

Inside a function a statement runs when its function does: nothing changes there. Loads without torch.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from tripwire.gates.layout import layout

__all__ = ["ImportTime", "import_time_statements", "names_used_at_run_time"]


@dataclass(frozen=True)
class ImportTime:
    """A statement that runs at import: how its use is proven (`body` lines, or `names`)."""

    line: int  # the statement's first line
    what: str  # for the message: "def scale", "class Config", "RATE"
    body: frozenset[int] = frozenset()  # a def's body statements, or a class's methods' (first lines)
    names: frozenset[str] = frozenset()  # names whose run-time use proves it used
    reads: frozenset[str] = frozenset()  # the names it reads itself (a value, defaults, decorators, bases)

    def used(self, ran: set[int], used_names: set[str]) -> bool:
        return bool(self.body & ran) or bool(self.names & used_names)

    def why(self) -> str:
        """Why a run that imported it never used it, for the changed-line gate's message."""
        if self.what.startswith("def "):
            return f"runs at import only: {self.what[4:]} was never called"
        if self.what.startswith("class "):
            return f"runs at import only: no method of {self.what} ran and no code that ran names it"
        return f"runs at import only: no code that ran inside a function names {self.what}"


def _targets(node: ast.stmt) -> list[str]:
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        targets = [node.target]
    names = []
    for target in targets:
        for item in ast.walk(target):
            if isinstance(item, ast.Name):
                names.append(item.id)
    return names


def _body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> set[int]:
    return {statement.lineno for item in node.body for statement in ast.walk(item) if isinstance(statement, ast.stmt)}


def _read(nodes: list[ast.AST]) -> frozenset[str]:
    """Every name and attribute the expressions `nodes` read."""
    found = set()
    for node in nodes:
        for item in ast.walk(node):
            if isinstance(item, ast.Name):
                found.add(item.id)
            elif isinstance(item, ast.Attribute):
                found.add(item.attr)
    return frozenset(found)


def _entries(body: list[ast.stmt]) -> Iterator[ImportTime]:
    """The import-time statements of a module's or a class's body (nested classes included, never function bodies)."""
    for node in body:  # keyed by the statement's own line: `layout` maps its decorators' lines there
        first = node.lineno
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
            reads = _read([*arguments, *node.decorator_list])
            yield ImportTime(first, f"def {node.name}", body=frozenset(_body_lines(node)), reads=reads)
        elif isinstance(node, ast.ClassDef):
            methods = [item for item in node.body if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)]
            lines = set().union(*(_body_lines(method) for method in methods)) if methods else set()
            reads = _read([*node.bases, *node.decorator_list])
            yield ImportTime(first, f"class {node.name}", frozenset(lines), frozenset({node.name}), reads)
            yield from _entries(node.body)
        elif _targets(node):
            names = _targets(node)
            value = getattr(node, "value", None)
            yield ImportTime(
                node.lineno, ", ".join(names), names=frozenset(names), reads=_read([value] if value else [])
            )


def import_time_statements(source: str) -> dict[int, ImportTime]:
    """{first line: entry} of every statement of `source` that runs at import and defines something (module
    docstring); a class with no method is proven used by its name."""
    return {entry.line: entry for entry in _entries(ast.parse(source).body)}


def names_used_at_run_time(sources: Mapping[str, str], ran: Mapping[str, set[int]]) -> set[str]:
    """Every name, attribute and string that a statement which ran inside a function names, over `sources`
    (root-relative file -> text; `ran`: the lines coverage saw run, per file)."""
    used: set[str] = set()
    for name, source in sources.items():
        lines = ran.get(name, set())
        if not lines:
            continue
        tree = ast.parse(source)
        places = layout(source)
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for item in function.body:
                for node in ast.walk(item):
                    line = getattr(node, "lineno", None)
                    if line is None or places.statement.get(line, line) not in lines:
                        continue
                    if isinstance(node, ast.Name):
                        used.add(node.id)
                    elif isinstance(node, ast.Attribute):
                        used.add(node.attr)
                    elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                        used.add(node.value)
    # What a used import-time statement reads is used too: `DEFAULTS` read by `CONFIG = Config(**DEFAULTS)` when
    # CONFIG is, a default read by a `def` whose body ran. To a fixed point, over every file that ran.
    entries = [
        (entry, ran.get(name, set()))
        for name, source in sources.items()
        for entry in import_time_statements(source).values()
    ]
    grown = True
    while grown:
        grown = False
        for entry, lines in entries:
            if entry.reads - used and entry.used(lines, used):
                used |= entry.reads
                grown = True
    return used
