"""A loop edited on disk while it runs: tripwire reads a loop's lines from its file (where a copy goes, which name a
line reads, each site's text), and a file edited after the loop imported it holds lines that are not the code that
runs. Deleting an unused import above the loop moved every line up one, and a device read was read as the copy's
(missed); a site's text named another line. Now a code object is checked against its file's lines once a recording
(`state.code_matches_source`): a mismatch is named in the counter and the result, no spelling is read from that code,
and no golden is written from the recording."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
import torch

from tripwire.common.errors import SyncBudgetExceeded
from tripwire.gates.goldens import GoldenStore
from tripwire.sync import hot_path
from tripwire.sync.counter import SyncCounter
from tripwire.sync.state import code_matches_source, stale_note

LOOP = """import torch
import math  # unused, deleted while the loop runs


def step(x):
    h = x.cpu()
    x.tolist()
    h.tolist()


@staticmethod
def decorated(x):
    return x
"""


def recorded(step: object, x: torch.Tensor) -> SyncCounter:
    with SyncCounter() as counter, hot_path("step"):
        step(x)  # type: ignore[operator]
    return counter


def test_a_loop_edited_after_it_was_imported_is_named_and_not_misread(tmp_path: Path) -> None:
    path = tmp_path / "edited_loop.py"
    path.write_text(LOOP, encoding="utf-8")
    loop = runpy.run_path(str(path))
    # built before the counter: the device's; requiring a gradient, its `.cpu()` on a CPU run is itself, which the
    # kept-copy rule reads by the names its lines spell (a tensor that needs none gets a copy of its own)
    x = torch.arange(3.0, requires_grad=True)

    as_written = recorded(loop["step"], x)
    assert as_written.counts_by_kind("step") == {"cpu": 1, "tolist": 1}  # `h.tolist()` reads the kept copy
    assert as_written.stale_sources == []
    assert {event.text for event in as_written.events} == {"h = x.cpu()", "x.tolist()"}

    path.write_text(LOOP.replace("import math  # unused, deleted while the loop runs\n", ""), encoding="utf-8")
    edited = recorded(loop["step"], x)
    # no spelling read: the copy's read counts as a plain CPU run's, and the device read is not missed
    assert edited.counts_by_kind("step") == {"cpu": 1, "tolist": 2}
    assert [Path(name).name for name in edited.stale_sources] == [path.name]
    assert {event.text for event in edited.events} == {""}  # no other line's text shown as a site's
    note = stale_note(edited.stale_sources)
    assert "changed on disk after the loop imported it" in note and "record again" in note

    with pytest.raises(SyncBudgetExceeded, match="changed on disk"):
        GoldenStore(tmp_path / "baselines", update=True).check_sync_budget("s", edited, {})
    assert not (tmp_path / "baselines" / "sync_budgets" / "s.json").exists()  # nothing written

    path.write_text(LOOP, encoding="utf-8")  # put back: the next recording reads it again, and trusts it
    restored = recorded(loop["step"], x)
    assert restored.counts_by_kind("step") == {"cpu": 1, "tolist": 1}
    assert restored.stale_sources == []


def test_code_matches_its_own_file_whatever_its_shape(tmp_path: Path) -> None:
    """No false alarm on code that is its file's: decorated functions, classes, lambdas, comprehensions."""
    path = tmp_path / "shapes.py"
    path.write_text(
        LOOP
        + "\n\nclass Holder:\n    @property\n    def value(self):\n        return [i for i in range(2)]\n\n\n"
        + "square = lambda v: v * v\n",
        encoding="utf-8",
    )
    loop = runpy.run_path(str(path))
    codes = [
        loop["step"].__code__,
        loop["decorated"].__func__.__code__,
        loop["Holder"].value.fget.__code__,
        loop["square"].__code__,
    ]
    codes += [const for const in codes[2].co_consts if hasattr(const, "co_positions")]  # 3.11's comprehension
    codes.append(codes[0].replace(co_name="torch_dynamo_resume_in_step_at_7"))  # made from it, named by no `def`
    with SyncCounter():
        assert all(code_matches_source(code) for code in codes)
    path.write_text("# a line added at the top\n" + path.read_text(encoding="utf-8"), encoding="utf-8")
    with SyncCounter():
        assert not code_matches_source(codes[0])  # its `def` moved
        assert not code_matches_source(codes[1])  # its decorator's line is another's now
