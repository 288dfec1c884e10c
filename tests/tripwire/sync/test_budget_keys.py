"""Sync budgets key call sites by file, function and kind: edits inside a function do not churn them."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch
from loop_modules import load

from tripwire.common.errors import SyncBudgetExceeded
from tripwire.gates.goldens import GoldenStore
from tripwire.sync import hot_path
from tripwire.sync.budget import SyncBudget, check_budget, site_key
from tripwire.sync.counter import SyncCounter

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # the loop's tensors are on its device

ORIGINAL = """
def step(t):
    return t.sum().item()
"""

MOVED = """
def step(t):
    # the sync moved two lines down, still in step(), its line unchanged

    return t.sum().item()
"""

EDITED = """
def step(t):
    total = t.sum()
    # the sync moved two lines down, still in step(), and its line was rewritten
    return total.item()
"""

NEW_FUNCTION = """
def step(t):
    return t.sum().item() + helper(t)


def helper(t):
    return t.max().item()
"""

NEW_KIND = """
def step(t):
    return t.sum().item() + len(t.tolist())
"""


def run(module: ModuleType) -> SyncCounter:
    with SyncCounter() as counter, hot_path("epoch_transfer"):
        module.step(torch.arange(4.0, device=DEVICE))
    return counter


def record(tmp_path: Path, source: str) -> GoldenStore:
    GoldenStore(tmp_path / "baselines", update=True).check_sync_budget("s", run(load(tmp_path, source)), {})
    return GoldenStore(tmp_path / "baselines")


def test_site_keys_drop_the_line_and_keep_file_function_and_kind() -> None:
    assert site_key("src/engine.py:120", "Engine.train_pass", "item") == "src/engine.py::Engine.train_pass [item]"


def test_moving_a_sync_within_its_function_keeps_the_budget_and_its_file(tmp_path: Path) -> None:
    store = record(tmp_path, ORIGINAL)
    budget_file = tmp_path / "baselines" / "sync_budgets" / "s.json"
    before = budget_file.read_bytes()
    moved = run(load(tmp_path, MOVED))
    assert store.check_sync_budget("s", moved, {}).status == "passed"
    report = check_budget(moved, SyncBudget.load(budget_file))
    assert report.ok and not report.over
    GoldenStore(tmp_path / "baselines", update=True).check_sync_budget("s", moved, {})
    assert budget_file.read_bytes() == before  # regenerating after the move changes nothing


def test_rewriting_a_syncing_line_passes_and_changes_only_its_recorded_text(tmp_path: Path) -> None:
    store = record(tmp_path, ORIGINAL)
    budget_file = tmp_path / "baselines" / "sync_budgets" / "s.json"
    before = SyncBudget.load(budget_file)
    edited = run(load(tmp_path, EDITED))
    assert store.check_sync_budget("s", edited, {}).status == "passed"
    GoldenStore(tmp_path / "baselines", update=True).check_sync_budget("s", edited, {})
    after = SyncBudget.load(budget_file)
    assert (after.regions, after.sites) == (before.regions, before.sites)
    [key] = after.lines["epoch_transfer"]
    assert after.lines["epoch_transfer"][key] == {"return total.item()": 1}
    assert before.lines["epoch_transfer"][key] == {"return t.sum().item()": 1}


def test_a_sync_in_a_new_function_fails_and_is_listed_first_with_its_line(tmp_path: Path) -> None:
    store = record(tmp_path, ORIGINAL)
    with pytest.raises(SyncBudgetExceeded) as failure:
        store.check_sync_budget("s", run(load(tmp_path, NEW_FUNCTION)), {})
    lines = str(failure.value).splitlines()
    assert "region 'epoch_transfer': 2 syncs, budget 1 (+1)" in lines[1]
    assert lines[2].strip().startswith("NEW ") and "loop.py:7 in helper  ×1  [item×1]" in lines[2]
    assert "`return t.max().item()`" in lines[2]  # the new line, quoted
    # step's line was edited (`+ helper(t)`), not added: it is the old site, not NEW
    assert not lines[3].strip().startswith("NEW") and "in step" in lines[3]


def test_a_new_kind_in_a_known_function_is_new(tmp_path: Path) -> None:
    store = record(tmp_path, ORIGINAL)
    with pytest.raises(SyncBudgetExceeded) as failure:
        store.check_sync_budget("s", run(load(tmp_path, NEW_KIND)), {})
    message = str(failure.value)
    new_lines = [line for line in message.splitlines() if line.strip().startswith("NEW ")]
    assert len(new_lines) == 1 and "[tolist×1]" in new_lines[0], message


def test_an_old_file_line_budget_still_loads_and_matches_by_file(tmp_path: Path) -> None:
    counter = run(load(tmp_path, NEW_FUNCTION))
    (file,) = {site.rsplit(":", 1)[0] for site in counter.sites("epoch_transfer")}
    old = SyncBudget.from_dict({"regions": {"epoch_transfer": 1}, "sites": {"epoch_transfer": {f"{file}:3": 1}}})
    report = check_budget(counter, old)
    assert not report.ok
    message = report.format()
    assert "NEW" not in message and "old-format budget keyed by file:line" in message


def test_a_stored_site_naming_torchs_dispatch_wrapper_reads_as_the_same_site_now() -> None:
    """Syncs counted inside `inference_mode` were recorded as made inside `torch/_compile.py`'s `_disable_dynamo`
    wrapper, which torch put around the counter's dispatch mode: machinery, not torch code behind the sync. Read
    back, such a site is the site recorded now (no `via`), so `compare` does not report it as gone and new; real
    torch code behind a sync, and a compilation event's reason, are kept."""
    from tripwire.sync.sites import SiteRecord

    def stored(kind: str, via: str) -> SiteRecord:
        data = {"region": "r", "file": "loop.py", "line": 7, "function": "step", "kind": kind, "via": via}
        return SiteRecord.from_json({**data, "text": "t[t > 1].sum()", "count": 1})

    wrapper = "torch/_compile.py:_disable_dynamo.<locals>.inner"
    assert stored("implicit:index(mask)", wrapper) == stored("implicit:index(mask)", "")
    assert stored("implicit:index(mask)", wrapper).identity == "t[t > 1].sum()"
    real = "torch/optim/optimizer.py:_get_value"
    assert stored("item", real).via == real
    assert stored("compile:graph_break", "torch/_compile.py: a reason").via == "torch/_compile.py: a reason"


def test_a_project_reached_through_a_link_keys_its_sites_as_the_checkout_does(tmp_path: Path) -> None:
    """A home folder linked to another disk: `PYTHONPATH` names the link, the working directory is resolved. Each
    run must key the sites as the checkout itself does (`src/pkg/mod.py`, not `pkg/mod.py`), or a budget written on
    one machine fails on the other."""
    import os
    import subprocess
    import sys

    project = tmp_path / "disk" / "proj"
    (project / "src" / "pkg").mkdir(parents=True)
    (project / "src" / "pkg" / "mod.py").write_text("def f(t):\n    return t.sum().item()\n", encoding="utf-8")
    (tmp_path / "home").symlink_to(tmp_path / "disk")
    code = (
        "import torch, pkg.mod\nfrom tripwire.sync.counter import SyncCounter\n"
        "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
        "with SyncCounter() as counter:\n    pkg.mod.f(torch.ones(2, device=device))\n"
        "print(*counter.site_keys_by_region()['<outside>'])"
    )
    keys = []
    for base in (tmp_path / "disk", tmp_path / "home"):  # the checkout, then the same through the link
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(base / "proj" / "src"), *sys.path[1:]])}
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=base / "proj", env=env, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr[-2000:]
        keys.append(done.stdout.strip())
    assert keys == ["src/pkg/mod.py::f [item]"] * 2
