"""Whose fault a crash is: a crash in the loop's own code stays the loop's; one in tripwire's own code is a `fault`,
named at tripwire's frame, with a line saying the loop may be fine, and `run` exits 3. A call the loop made that
fails inside a stand-in (torch's own error for the loop's arguments) stays the loop's, with the stand-in named."""

from __future__ import annotations

from pathlib import Path

import pytest

import tripwire.sync.explicit
from tripwire.outside.blame import blame
from tripwire.outside.commands import FAULT_EXIT
from tripwire.outside.record import record
from tripwire.outside.result import Result
from tripwire.scenario import Region, Scenario
from tripwire.sync.state import _TRIPWIRE_DIR

LOOP = """
import sys

import torch


def step(w, how):
    if how == "raises":
        raise ValueError("the loop's own bug")
    if how == "two-element item":
        return w.item()  # torch refuses: a tensor of 2 elements
    return w.to(torch.device("cpu")).sum().item()


if __name__ == "__main__":
    step(torch.ones(2), sys.argv[1])
"""


def _scenario(how: str) -> Scenario:
    return Scenario(name="blame", script="loop.py", argv=[how], regions=[Region("__main__:step", "step")])


def _recorded(tmp_path: Path, how: str) -> Result:
    (tmp_path / "loop.py").write_text(LOOP)
    return record(_scenario(how), tmp_path)


def _tripwire_function(source: str, name: str) -> object:
    """A function whose frames are tripwire's (compiled under a file name in tripwire's folder): a fault injected
    into tripwire's own code, not into the test."""
    namespace: dict[str, object] = {}
    exec(compile(source, _TRIPWIRE_DIR + "sync/injected_fault.py", "exec"), namespace)
    return namespace[name]


BROKEN_TO_KIND = "def to_kind(args, kwargs):\n    raise KeyError('a hook that broke')\n"


def test_a_crash_in_the_loops_code_is_the_loops(tmp_path: Path) -> None:
    result = _recorded(tmp_path, "raises")
    assert result.status == "crash" and result.cause == "ValueError: the loop's own bug (loop.py:9)"
    assert not any("stand-in" in note for note in result.notes)


def test_torchs_own_error_for_the_loops_call_stays_the_loops_and_names_the_stand_in(tmp_path: Path) -> None:
    result = _recorded(tmp_path, "two-element item")
    assert result.status == "crash" and result.cause.startswith("RuntimeError: a Tensor with 2 elements")
    assert result.cause.endswith("(loop.py:11)")
    assert any("went through tripwire's stand-in at tripwire/sync/watched.py:" in note for note in result.notes)


def test_a_fault_in_tripwires_code_is_tripwires(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tripwire.sync.explicit, "to_kind", _tripwire_function(BROKEN_TO_KIND, "to_kind"))
    result = _recorded(tmp_path, "moves")
    assert result.status == "fault"
    assert result.cause.startswith("tripwire failed inside tripwire/sync/injected_fault.py:2 in to_kind: KeyError")
    assert "the loop may be fine: run it without tripwire" in result.cause


def test_run_exits_with_its_own_code_on_tripwires_fault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tripwire.__main__ import main

    (tmp_path / "loop.py").write_text(LOOP)
    scenario = tmp_path / "scenario.py"
    scenario.write_text(
        "from tripwire.scenario import Region, Scenario\n"
        "scenario = Scenario(name='blame', script='loop.py', argv=['moves'], regions=[Region('__main__:step', 's')])\n"
    )
    monkeypatch.setattr(tripwire.sync.explicit, "to_kind", _tripwire_function(BROKEN_TO_KIND, "to_kind"))
    code = main(["run", str(scenario), "--root", str(tmp_path), "--out", str(tmp_path / "out"), "--cpu-pin", "native"])
    assert code == FAULT_EXIT == 3
    assert Result.load(tmp_path / "out").status == "fault"


def test_blame_reads_tripwires_own_frames_and_passes_through_a_stand_in() -> None:
    raising = _tripwire_function("def hook():\n    raise OSError('inside tripwire')\n", "hook")
    try:
        raising()  # type: ignore[operator]
    except OSError as error:
        assert blame(error).whose == "tripwire"
        assert blame(error).frame == "tripwire/sync/injected_fault.py:2 in hook"
    try:
        raise ValueError("the loop's")
    except ValueError as error:
        assert blame(error).whose == "loop"
