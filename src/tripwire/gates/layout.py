"""Where each line of a Python source sits: the first line of the statement it belongs to, and its function.

The changed-line gate judges a changed line by its statement (the continuation line of a call is that call), and
names it by its enclosing function (`Outer.method`); an exclusion's `where` names functions the same way.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

__all__ = ["Layout", "layout"]


@dataclass(frozen=True)
class Layout:
    """Per source line of one file: the first line of the statement it belongs to, and its enclosing function."""

    statement: dict[int, int]
    function: dict[int, str]


def _start(node: ast.AST) -> int:
    """The first line of a statement or clause (a `case` starts at its pattern)."""
    if isinstance(node, ast.match_case):
        return node.pattern.lineno
    return int(getattr(node, "lineno", 0))


def layout(source: str) -> Layout:
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
    return Layout(statement, function)
