"""Per-line budgets are budgets, and a move is not a change.

A region whose total is unchanged but which gained a sync line fails, naming the new line and the one that went
away (a `.cpu()` and a `.tolist()` of the device tensor that became one `.tolist()` while a `float(t)` for a
progress display came in: on a GPU that is a second device-to-host copy). A function moved verbatim to another
module, re-exported where it was, passes: its lines are MOVED, not NEW. What moved and changed is a change.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tripwire.common.errors import SyncBudgetExceeded
from tripwire.gates.goldens import GoldenStore
from tripwire.sync import hot_path
from tripwire.sync.counter import SyncCounter

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # the loop's tensors are on its device

BASE = {
    "loop.py": """
from helpers import report


def step(t):
    values = t.cpu(), t.tolist()
    report(t)
    return values
""",
    "helpers.py": """
def report(t):
    return t.sum().item()
""",
}

# The pair became one `.tolist()`, and a `float(t)` for a progress display came in: the total holds (2 syncs).
SWAPPED = {
    **BASE,
    "loop.py": BASE["loop.py"].replace(
        "    values = t.cpu(), t.tolist()\n", "    values = t.tolist()\n    shown = float(t.sum())\n"
    ),
}

# `report` moved verbatim to a new module, re-exported from helpers.py (the refactor plans' step).
MOVED = {
    **BASE,
    "helpers.py": "from reporting import report  # moved\n",
    "reporting.py": BASE["helpers.py"],
}

# `report` renamed, its one caller updated (`checkpoint_schema._values` -> `_value_problem` in issue 57): the line is
# unchanged, in the same file, under another function's name.
RENAMED = {
    "loop.py": BASE["loop.py"].replace("report", "summarize"),
    "helpers.py": BASE["helpers.py"].replace("def report", "def summarize"),
}

# Renamed and moved to another file at once: two edits, and a change.
RENAMED_AND_MOVED = {
    "loop.py": RENAMED["loop.py"].replace("from helpers", "from reporting"),
    "reporting.py": RENAMED["helpers.py"],
}

# Moved and changed: the moved function's line is not the same line any more.
MOVED_AND_CHANGED = {**MOVED, "reporting.py": BASE["helpers.py"].replace("t.sum().item()", "t.mean().item()")}


def run(folder: Path, files: dict[str, str]) -> SyncCounter:
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.py"):
        stale.unlink()
    for name, source in files.items():
        (folder / name).write_text(source, encoding="utf-8")
    import importlib
    import sys

    sys.path.insert(0, str(folder))
    try:
        for name in ("loop", "helpers", "reporting"):
            sys.modules.pop(name, None)
        loop = importlib.import_module("loop")
        with SyncCounter(root=folder) as counter, hot_path("epoch"):
            loop.step(torch.arange(3.0, device=DEVICE))
    finally:
        sys.path.remove(str(folder))
        for name in ("loop", "helpers", "reporting"):
            sys.modules.pop(name, None)
    return counter


@pytest.fixture
def store(tmp_path: Path) -> GoldenStore:
    GoldenStore(tmp_path / "baselines", update=True).check_sync_budget("s", run(tmp_path / "tree", BASE), {})
    return GoldenStore(tmp_path / "baselines")


def test_the_recorded_tree_passes(store: GoldenStore, tmp_path: Path) -> None:
    assert store.check_sync_budget("s", run(tmp_path / "tree", BASE), {}).status == "passed"


def test_a_new_sync_paid_for_by_one_that_went_away_fails_naming_both(store: GoldenStore, tmp_path: Path) -> None:
    counter = run(tmp_path / "tree", SWAPPED)
    assert counter.counts_by_region() == {"epoch": 3}  # as many syncs as the budget
    with pytest.raises(SyncBudgetExceeded) as raised:
        store.check_sync_budget("s", counter, {})
    text = str(raised.value)
    assert "region 'epoch': 3 syncs, within its budget of 3, but 1 line(s) the budget never saw" in text
    assert "NEW loop.py:7 in step  ×1  [float×1]  `shown = float(t.sum())`" in text
    assert "GONE loop.py in step  ×0 (was 1)  [cpu×1]  `values = t.cpu(), t.tolist()`" in text
    assert "NEW loop.py:6" not in text  # the `.tolist()` line is the old one, edited: not new


def test_a_verbatim_move_with_a_re_export_passes(store: GoldenStore, tmp_path: Path) -> None:
    counter = run(tmp_path / "tree", MOVED)
    assert store.check_sync_budget("s", counter, {}).status == "passed"


def test_a_move_that_also_changed_the_line_is_a_change(store: GoldenStore, tmp_path: Path) -> None:
    with pytest.raises(SyncBudgetExceeded) as raised:
        store.check_sync_budget("s", run(tmp_path / "tree", MOVED_AND_CHANGED), {})
    text = str(raised.value)
    assert "NEW reporting.py:3 in report  ×1  [item×1]  `return t.mean().item()`" in text
    assert "GONE helpers.py in report  ×0 (was 1)  [item×1]  `return t.sum().item()`" in text


def test_a_renamed_function_is_a_move_not_a_new_line(store: GoldenStore, tmp_path: Path) -> None:
    counter = run(tmp_path / "tree", RENAMED)
    assert counter.counts_by_region() == {"epoch": 3}
    assert store.check_sync_budget("s", counter, {}).status == "passed"


def test_a_function_renamed_and_moved_to_another_file_at_once_is_a_change(store: GoldenStore, tmp_path: Path) -> None:
    with pytest.raises(SyncBudgetExceeded) as raised:
        store.check_sync_budget("s", run(tmp_path / "tree", RENAMED_AND_MOVED), {})
    assert "NEW reporting.py:3 in summarize  ×1  [item×1]  `return t.sum().item()`" in str(raised.value)
