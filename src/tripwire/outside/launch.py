"""Run someone else's loop as it is: a script as `__main__`, a module as `python -m` would, or a function.

A script-style loop (`if __name__ == "__main__":` with the loop inline) runs unedited. Its source is read, parsed
and compiled under its own file name, so line numbers, tracebacks and sync call sites are the file's own. The one
addition is in the compiled tree, never on disk: after each top-level statement (also inside a top-level `if`,
`try` or `with`, never inside a loop or a definition) a call to `__tripwire_bind__()` lets the instrumentation bind
targets the script has just defined (`__main__:Agent.get_value`). The script's folder is put first on `sys.path`,
as `python script.py` does; nothing of tripwire's own folders is.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tripwire.scenario import ScenarioError

BIND_NAME = "__tripwire_bind__"


class _InsertBinds(ast.NodeTransformer):
    """Insert `__tripwire_bind__()` after each top-level statement (see the module docstring)."""

    def visit_Module(self, node: ast.Module) -> ast.Module:
        node.body = self._body(node.body)
        return node

    def _body(self, body: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for index, statement in enumerate(body):
            if isinstance(statement, ast.If):
                statement.body, statement.orelse = self._body(statement.body), self._body(statement.orelse)
            elif isinstance(statement, ast.Try):
                statement.body = self._body(statement.body)
                statement.orelse, statement.finalbody = self._body(statement.orelse), self._body(statement.finalbody)
            elif isinstance(statement, (ast.With, ast.AsyncWith)):
                statement.body = self._body(statement.body)
            out.append(statement)
            if _keeps_first_place(statement, index):
                continue
            call = ast.Expr(ast.Call(ast.Name(BIND_NAME, ast.Load()), [], []))
            out.append(ast.copy_location(call, statement))
        return out


def _keeps_first_place(statement: ast.stmt, index: int) -> bool:
    """A `from __future__` import, or the module docstring, must not be followed by a call."""
    if isinstance(statement, ast.ImportFrom) and statement.module == "__future__":
        return True
    return index == 0 and isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)


def compile_with_binds(path: Path) -> types.CodeType:
    """The script's code object, compiled under its own file name with the bind calls inserted."""
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source, filename=str(path))
    except (OSError, UnicodeDecodeError) as error:
        raise ScenarioError(f"{path}: cannot read the script ({error})") from None
    tree = ast.fix_missing_locations(_InsertBinds().visit(tree))
    return compile(tree, str(path), "exec")


def run_main(
    path: Path,
    argv: Sequence[str],
    bind: Callable[[dict[str, Any]], None],
    *,
    module_name: str = "",
) -> None:
    """Run `path` as `__main__` with `sys.argv = [path, *argv]`; `bind(namespace)` is called after each top-level
    statement. `module_name` (for `python -m` style) sets `__spec__` and `__package__` as runpy would."""
    code = compile_with_binds(path)
    main = types.ModuleType("__main__")
    namespace = main.__dict__
    namespace.update({"__file__": str(path), "__builtins__": __builtins__, "__spec__": None, "__package__": None})
    if module_name:
        spec = importlib.util.find_spec(module_name)
        namespace.update({"__spec__": spec, "__package__": module_name.rpartition(".")[0]})
    namespace[BIND_NAME] = _Binder(bind, namespace)
    saved = sys.modules.get("__main__"), list(sys.argv), list(sys.path)
    sys.modules["__main__"] = main
    sys.argv = [str(path), *argv]
    if not module_name:
        sys.path.insert(0, str(path.parent))
    try:
        exec(code, namespace)
    finally:
        previous, sys.argv, sys.path[:] = saved
        if previous is not None:
            sys.modules["__main__"] = previous


class _Binder:
    """`__tripwire_bind__()`: hands the script's namespace to the instrumentation."""

    def __init__(self, bind: Callable[[dict[str, Any]], None], namespace: dict[str, Any]) -> None:
        self._bind = bind
        self._namespace = namespace

    def __call__(self) -> None:
        self._bind(self._namespace)


def module_path(module_name: str) -> Path:
    """The source file `python -m module_name` would run (a package's `__main__.py`)."""
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError) as error:
        raise ScenarioError(f"module {module_name!r} cannot be found ({error})") from None
    if spec is None or spec.origin is None:
        raise ScenarioError(f"module {module_name!r} cannot be found on the tree's paths")
    if spec.submodule_search_locations:  # a package: python -m runs its __main__
        return module_path(f"{module_name}.__main__")
    return Path(spec.origin)
