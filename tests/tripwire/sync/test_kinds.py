"""One vocabulary of kinds: every kind tripwire names is a row of `tripwire.sync.kinds`, named through it, and the
docs' table is the registry's."""

from __future__ import annotations

import ast
from pathlib import Path

from tripwire.sync import kinds

ROOT = Path(__file__).resolve().parents[3]
TRIPWIRE = ROOT / "src" / "tripwire"
DOC = ROOT / "docs" / "tripwire.md"
# Calls whose first argument is a kind: a literal there is a kind named outside the registry
KIND_TAKING = {"deliver", "sync_kind", "record_sync", "call_counted", "counted_stand_in", "event_at", "CompileNote"}


def _kind_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """String literals that name a kind: the first argument of a kind-taking call, and any literal that only a kind
    could be (`to_cpu`, `timer_sync`, `implicit:...`)."""
    unmistakable = {name for name in kinds.KINDS if "_" in name}
    found = []
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            first = node.args[0] if node.args else None
            if name in KIND_TAKING and isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.append((node.lineno, first.value))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            value = node.value
            if value in unmistakable or any(value.startswith(prefix) and value != prefix for prefix in kinds.PREFIXES):
                found.append((node.lineno, value))
    return sorted(set(found))


def test_no_kind_is_spelled_outside_the_registry() -> None:
    """Adding a kind is one row in `kinds.py`: everywhere else names it by its constant."""
    spelled = []
    for path in sorted(TRIPWIRE.rglob("*.py")):
        if path.name == "kinds.py" or "build" in path.relative_to(TRIPWIRE).parts:
            continue
        for line, value in _kind_literals(ast.parse(path.read_text(encoding="utf-8"))):
            spelled.append(f"{path.relative_to(ROOT)}:{line} {value!r}")
    assert spelled == []


def test_the_check_finds_a_kind_spelled_as_a_string() -> None:
    source = 'from tripwire.sync import sync_kind\nwith sync_kind("timer_sync"):\n    pass\nx = "collective:barrier"\n'
    assert _kind_literals(ast.parse(source)) == [(2, "timer_sync"), (4, "collective:barrier")]


def test_every_constant_is_a_known_kind() -> None:
    constants = {name: value for name, value in vars(kinds).items() if name.isupper() and isinstance(value, str)}
    constants = {name: value for name, value in constants.items() if name not in {"COUNTER", "STATIC", "BOTH"}}
    unknown = {name: value for name, value in constants.items() if not kinds.is_known(value)}
    assert unknown == {}
    assert set(kinds.KINDS) <= set(constants.values()), "every row has a constant to name it by"


def test_every_kind_says_what_it_means_and_whether_it_stalls_a_gpu() -> None:
    assert kinds.describe("to_device").startswith("`.to(device)`")
    assert kinds.stalls_gpu("to_device") and kinds.stalls_gpu("implicit:nonzero")
    assert not kinds.stalls_gpu("to_cpu_nonblocking") and not kinds.stalls_gpu("compile:graph_break")
    assert not kinds.is_known("synchronize") and kinds.describe("synchronize") == ""
    assert all(row.meaning and "\n" not in row.meaning for row in kinds.KINDS.values())


def test_the_docs_table_is_the_registry() -> None:
    text = DOC.read_text(encoding="utf-8")
    table = text.split("<!-- kinds:begin -->\n", 1)[1].split("\n<!-- kinds:end -->", 1)[0]
    assert table == kinds.markdown_table(), "regenerate it: python -m tripwire.sync.kinds"
