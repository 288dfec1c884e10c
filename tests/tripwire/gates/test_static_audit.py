"""The static sync audit: what it counts, per function, and how a budget check fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from tripwire.common.errors import GoldenFileError
from tripwire.gates.static_audit import (
    StaticSyncExceeded,
    audit,
    check,
    check_against,
    load_budget,
    reachable_modules,
    write_budget,
)

EVERY_KIND = """
import torch


def pull(t, stream, event):
    a = t.item()
    b = t.cpu()
    c = t.tolist()
    d = t.numpy()
    torch.cuda.synchronize()
    stream.synchronize()
    event.synchronize()
    stream.wait_stream(torch.cuda.current_stream())
    stream.wait_event(event)
    e = t.to("cuda")
    f = t.to(device=t.device)
    g = t.cuda()
    h = t.to("cpu")
    torch.accelerator.synchronize()
    return a, b, c, d, e, f, g, h
"""

NOT_SYNCS = """
import torch


def convert(t, other):
    a = t.to(torch.float32)
    b = t.to(dtype=torch.long)
    c = t.to(other.dtype)
    d = t.to("cuda", non_blocking=True)
    e = t.cuda(non_blocking=True)
    f = t.to(memory_format=torch.channels_last)
    return a, b, c, d, e, f
"""

GPU_ONLY = """
import torch


class Engine:
    def train_pass(self, x):
        y = x * 2
        if x.is_cuda:
            torch.cuda.synchronize()
        return y
"""

NESTED = """
def outer(t):
    def inner():
        return t.item()
    return inner()
"""


def write(tmp_path: Path, source: str, name: str = "hot.py") -> str:
    (tmp_path / name).write_text(source, encoding="utf-8")
    return name


def counts(tmp_path: Path, source: str) -> dict[str, int]:
    name = write(tmp_path, source)
    return dict(audit([name], tmp_path).counts[name])


def test_every_sync_kind_is_counted_in_its_function(tmp_path: Path) -> None:
    assert counts(tmp_path, EVERY_KIND) == {
        "pull [item]": 1,
        "pull [cpu]": 1,
        "pull [tolist]": 1,
        "pull [numpy]": 1,
        "pull [cuda_synchronize]": 1,
        "pull [accelerator_synchronize]": 1,
        "pull [stream_synchronize]": 1,
        "pull [event_synchronize]": 1,
        "pull [wait_stream]": 1,
        "pull [wait_event]": 1,
        "pull [to_device]": 3,
        "pull [to_cpu]": 1,
    }


def test_every_kind_the_audit_names_is_a_kind_of_the_registry(tmp_path: Path) -> None:
    """The audit speaks the counter's language: a budget key and a static key name a call alike."""
    from tripwire.sync import kinds

    named = {key.rsplit(" [", 1)[1].rstrip("]") for key in counts(tmp_path, EVERY_KIND)}
    assert named <= set(kinds.KINDS)
    assert {row.name for row in kinds.KINDS.values() if row.seen_by != kinds.COUNTER} <= named


def test_dtype_only_memory_format_and_non_blocking_moves_are_not_counted(tmp_path: Path) -> None:
    assert counts(tmp_path, NOT_SYNCS) == {}


def test_a_synchronize_behind_is_cuda_is_found_on_a_cpu_machine(tmp_path: Path) -> None:
    assert counts(tmp_path, GPU_ONLY) == {"Engine.train_pass [cuda_synchronize]": 1}


def test_a_nested_function_gets_its_qualified_name(tmp_path: Path) -> None:
    assert counts(tmp_path, NESTED) == {"outer.<locals>.inner [item]": 1}


def test_moving_a_call_within_its_function_keeps_the_check_passing(tmp_path: Path) -> None:
    name = write(tmp_path, GPU_ONLY)
    budget = tmp_path / "budget.json"
    check_against([name], budget, tmp_path, update=True)
    before = budget.read_bytes()
    write(tmp_path, GPU_ONLY.replace("        y = x * 2\n", "        y = x * 2\n        z = y + 1\n\n"))
    _, report = check_against([name], budget, tmp_path)
    assert report.ok
    check_against([name], budget, tmp_path, update=True)
    assert budget.read_bytes() == before


def test_a_new_gpu_only_sync_fails_naming_the_new_site_first(tmp_path: Path) -> None:
    name = write(tmp_path, GPU_ONLY.replace("        if x.is_cuda:\n            torch.cuda.synchronize()\n", ""))
    budget = tmp_path / "budget.json"
    check_against([name], budget, tmp_path, update=True)
    write(tmp_path, GPU_ONLY + "\n\ndef helper(t):\n    return t.item()\n")
    with pytest.raises(StaticSyncExceeded) as failure:
        check_against([name], budget, tmp_path)
    lines = str(failure.value).splitlines()
    assert lines[0] == "static sync audit over budget in 2 function(s):"
    assert lines[1].strip() == "NEW hot.py:9 in Engine.train_pass [cuda_synchronize] 0 -> 1"
    assert lines[2].strip() == "NEW hot.py:14 in helper [item] 0 -> 1"


def test_a_known_site_that_grows_is_reported_with_both_counts(tmp_path: Path) -> None:
    name = write(tmp_path, NESTED)
    sites = audit([name], tmp_path)
    budget = {name: {"outer.<locals>.inner [item]": 1}}
    assert check(sites, budget).ok
    write(tmp_path, NESTED.replace("return t.item()", "return t.item() + t.item()"))
    report = check(audit([name], tmp_path), budget)
    assert report.over == ("hot.py:4,4 in outer.<locals>.inner [item] 1 -> 2",)


def test_a_renamed_audited_module_fails(tmp_path: Path) -> None:
    name = write(tmp_path, NESTED)
    report = check(audit([name], tmp_path), {name: {}, "gone.py": {"f [item]": 1}})
    assert not report.ok and "gone.py: audited module is gone or no longer reached" in report.format()


def test_a_malformed_budget_is_one_line_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "budget.json"
    path.write_text('{"sites": []}', encoding="utf-8")
    with pytest.raises(GoldenFileError, match=r"budget\.json: not a static sync budget"):
        load_budget(path)


def test_the_budget_file_is_sorted_json_without_line_numbers(tmp_path: Path) -> None:
    name = write(tmp_path, EVERY_KIND)
    path = write_budget(tmp_path / "budget.json", audit([name], tmp_path))
    text = path.read_text(encoding="utf-8")
    assert '"pull [cpu]": 1' in text and ":5" not in text and text.endswith("}\n")


def make_package(src: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = src / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


LOOP = {
    "app/__init__.py": "",
    "app/loop.py": "from app.engine import step\nfrom . import policy\n\ndef run():\n    import app.lazy\n",
    "app/engine.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from app import typing_only\n",
    "app/policy.py": "from app.buffers import rollout\n",
    "app/buffers/__init__.py": "",
    "app/buffers/rollout.py": "import torch\nimport other.pkg\n",
    "app/lazy.py": "",
    "app/typing_only.py": "",
    "app/unused.py": "",
    "other/__init__.py": "",
    "other/pkg.py": "",
}


def test_the_audited_modules_are_every_module_the_entry_reaches(tmp_path: Path) -> None:
    make_package(tmp_path / "src", LOOP)
    assert reachable_modules(["app.loop"], tmp_path / "src", tmp_path) == tuple(
        f"src/app/{name}"
        for name in (
            "__init__.py",
            "buffers/__init__.py",  # the package of a module reached through `from app.buffers import rollout`
            "buffers/rollout.py",
            "engine.py",
            "lazy.py",  # imported inside a function: it still runs in the loop
            "loop.py",
            "policy.py",  # a relative import
        )
    )  # not typing_only.py (TYPE_CHECKING), unused.py, torch, nor another top-level package
    with pytest.raises(GoldenFileError, match=r"loop entry 'app.missing' is not a module under .*: fix the entry"):
        reachable_modules(["app.missing"], tmp_path / "src")


def test_a_module_that_joins_the_loop_is_audited_without_being_listed(tmp_path: Path) -> None:
    make_package(tmp_path / "src", LOOP)
    budget = {
        name: dict(c) for name, c in audit(reachable_modules(["app.loop"], tmp_path / "src"), tmp_path).counts.items()
    }
    # a refactor moves the buffer's host copy into a new module the policy now imports
    make_package(tmp_path / "src", {"app/policy.py": "from app.buffers import rollout, staging\n"})
    make_package(tmp_path / "src", {"app/buffers/staging.py": STAGING})
    report = check(audit(reachable_modules(["app.loop"], tmp_path / "src"), tmp_path), budget)
    assert report.over == ("NEW src/app/buffers/staging.py:6 in Staging.pull [to_cpu] 0 -> 1",)


STAGING = """import torch


class Staging:
    def pull(self, t):
        return t.to(torch.device("cpu"))
"""


ENGINE = """
import torch


def gather_rows(values):
    rows = values.cpu()
    return rows.tolist()


def run(values):
    return gather_rows(values)
"""
# `gather_rows` moved verbatim to rows.py and re-exported from engine.py (a step of the refactor plans)
ENGINE_AFTER_MOVE = """
import torch

from rows import gather_rows  # moved


def run(values):
    return gather_rows(values)
"""
ROWS = """
def gather_rows(values):
    rows = values.cpu()
    return rows.tolist()
"""


def recorded_engine(tmp_path: Path) -> tuple[Path, Path]:
    """engine.py (ENGINE) written and its static budget recorded: (the module, the budget file)."""
    engine = write(tmp_path, ENGINE, "engine.py")
    budget = tmp_path / "budget.json"
    check_against([engine], budget, tmp_path, update=True)
    return engine, budget


def test_a_function_moved_verbatim_to_another_module_passes_as_moved(tmp_path: Path) -> None:
    engine, budget = recorded_engine(tmp_path)
    write(tmp_path, ENGINE_AFTER_MOVE, "engine.py")
    rows = write(tmp_path, ROWS, "rows.py")
    _, report = check_against([engine, rows], budget, tmp_path)
    assert report.ok and report.format() == "static sync audit within budget (2 call(s) moved)"
    assert report.moved == (
        "rows.py in gather_rows [cpu] `rows = values.cpu()` (moved from engine.py in gather_rows [cpu])",
        "rows.py in gather_rows [tolist] `return rows.tolist()` (moved from engine.py in gather_rows [tolist])",
    )


def test_a_module_gone_after_every_call_moved_out_passes(tmp_path: Path) -> None:
    _, budget = recorded_engine(tmp_path)
    rows = write(tmp_path, ROWS + "\n\ndef run(values):\n    return gather_rows(values)\n", "rows.py")
    _, report = check_against([rows], budget, tmp_path)  # engine.py no longer audited: it went away
    assert report.ok, report.format()


def test_a_moved_function_whose_call_changed_is_a_change(tmp_path: Path) -> None:
    engine, budget = recorded_engine(tmp_path)
    write(tmp_path, ENGINE_AFTER_MOVE, "engine.py")
    rows = write(tmp_path, ROWS.replace("values.cpu()", "values.detach().cpu()"), "rows.py")
    with pytest.raises(StaticSyncExceeded) as failure:
        check_against([engine, rows], budget, tmp_path)
    text = str(failure.value)
    assert "NEW rows.py:3 in gather_rows [cpu] 0 -> 1" in text  # the changed line is new ...
    assert "MOVED rows.py in gather_rows [tolist] `return rows.tolist()`" in text  # ... the unchanged one moved


def test_a_renamed_function_is_a_move_not_a_new_site(tmp_path: Path) -> None:
    engine, budget = recorded_engine(tmp_path)
    write(tmp_path, ENGINE.replace("gather_rows", "_rows_of"), "engine.py")  # renamed, its one caller updated
    _, report = check_against([engine], budget, tmp_path)
    assert report.ok, report.format()
    assert report.moved == (
        "engine.py in _rows_of [cpu] `rows = values.cpu()` (moved from engine.py in gather_rows [cpu])",
        "engine.py in _rows_of [tolist] `return rows.tolist()` (moved from engine.py in gather_rows [tolist])",
    )


def test_a_function_renamed_and_moved_to_another_file_at_once_is_a_change(tmp_path: Path) -> None:
    engine, budget = recorded_engine(tmp_path)
    write(tmp_path, ENGINE_AFTER_MOVE.replace("gather_rows", "_rows_of"), "engine.py")
    rows = write(tmp_path, ROWS.replace("gather_rows", "_rows_of"), "rows.py")
    with pytest.raises(StaticSyncExceeded) as failure:
        check_against([engine, rows], budget, tmp_path)
    assert "NEW rows.py:3 in _rows_of [cpu] 0 -> 1" in str(failure.value)


def test_a_budget_without_recorded_lines_still_checks_counts(tmp_path: Path) -> None:
    engine = write(tmp_path, ENGINE, "engine.py")
    sites = audit([engine], tmp_path)
    assert check(sites, {engine: {"gather_rows [cpu]": 1, "gather_rows [tolist]": 1}}).ok
