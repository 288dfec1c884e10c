"""Sync accounting on someone else's trainer: portable call sites, and the torch code behind a hidden sync named."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch

from tripwire.sync import hot_path
from tripwire.sync.budget import SyncBudget, check_budget
from tripwire.sync.counter import SyncCounter

pytestmark = pytest.mark.usefixtures("explicit_hooks")  # stand-ins and the function mode alike

TRAINER = """
import torch


def step(opt, param):
    param.sum().backward()
    torch.nn.utils.clip_grad_norm_([param], 1.0, error_if_nonfinite=True)  # torch reads the norm
    opt.step()  # Adam reads its step counters, kept in host memory: no wait
    return torch.ones(2, device=param.device).sum().item()  # the trainer's own read
"""


@pytest.fixture
def foreign_trainer(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> object:
    outside = tmp_path_factory.mktemp("elsewhere")  # not under the working directory
    (outside / "foreign_ppo.py").write_text(TRAINER, encoding="utf-8")
    monkeypatch.syspath_prepend(str(outside))
    sys.modules.pop("foreign_ppo", None)
    return importlib.import_module("foreign_ppo")


def test_sites_outside_the_working_directory_are_named_as_imported_and_hidden_syncs_name_torch(
    foreign_trainer: object,
) -> None:
    param = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.Adam([param], foreach=False)
    with SyncCounter() as counter, hot_path("update"):
        foreign_trainer.step(opt, param)  # type: ignore[attr-defined]

    sites = {event.site: event for event in counter.events}
    assert set(sites) == {"foreign_ppo.py:7", "foreign_ppo.py:9"}  # not an absolute path of this machine
    assert sites["foreign_ppo.py:7"].via == "torch/nn/utils/clip_grad.py:_get_total_norm"
    assert sites["foreign_ppo.py:9"].via == ""  # the trainer's own .item(): nothing inside torch to name
    assert "(inside torch: torch/nn/utils/clip_grad.py:_get_total_norm)" in counter.format()

    report = check_budget(counter, SyncBudget(regions={"update": 1}))  # one row per line, each named apart
    rows = [line.strip() for line in report.format().splitlines() if line.strip().startswith("NEW ")]
    assert rows == [
        "NEW foreign_ppo.py:7 in step  ×1  [bool×1]  `torch.nn.utils.clip_grad_norm_([param], 1.0,"
        " error_if_nonfinite=True)  # torch reads the norm`"
        "  (inside torch: torch/nn/utils/clip_grad.py:_get_total_norm)",
        "NEW foreign_ppo.py:9 in step  ×1  [item×1]  `return torch.ones(2, device=param.device).sum().item()  # the"
        " trainer's own read`",
    ]  # the trainer's own .item() is not labelled as torch's


def test_a_sync_on_the_users_own_line_under_the_working_directory_stays_relative(tmp_path: Path) -> None:
    with SyncCounter() as counter, hot_path("r"):
        torch.ones(1, device=torch.device("cuda" if torch.cuda.is_available() else "cpu")).item()
    [event] = counter.events
    assert event.site.startswith("tests/tripwire/sync/test_sync_foreign_code.py:") and event.via == ""
