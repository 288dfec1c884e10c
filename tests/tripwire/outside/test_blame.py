"""Whose fault a crash is: a crash in the loop's own code stays the loop's; one in tripwire's own code is a `fault`,
named at tripwire's frame, with a line saying the loop may be fine, and `run` exits 3. A call the loop made that
fails inside a stand-in (torch's own error for the loop's arguments) stays the loop's, with the stand-in named."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

import tripwire.sync.explicit
from tripwire.outside.blame import blame
from tripwire.outside.children import ChildWatch
from tripwire.outside.commands import FAULT_EXIT
from tripwire.outside.record import record
from tripwire.outside.result import Result
from tripwire.scenario import Region, Scenario
from tripwire.sync.counter import SyncCounter
from tripwire.sync.state import _TRIPWIRE_DIR

LOOP = """
import sys

import torch


def step(w, how):
    if how == "raises":
        raise ValueError("the loop's own bug")
    if how == "two-element item":
        return w.item()  # torch refuses: a tensor of 2 elements
    if how == "cat of two ranks":
        return torch.cat([w, w[None]])  # torch refuses: 1 and 2 dimensions
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


def test_torchs_error_for_a_function_the_counter_stands_in_for_stays_the_loops(tmp_path: Path) -> None:
    """`torch.cat` goes through the stand-in and the counter's handler: torch's refusal stays the loop's (it was
    reported as tripwire's fault, exit 3)."""
    result = _recorded(tmp_path, "cat of two ranks")
    assert result.status == "crash" and result.cause.startswith("RuntimeError: Tensors must have same number of dim")
    assert result.cause.endswith("(loop.py:13)")


# A loop's calls that torch (or the standard library) refuses, one through each of tripwire's ways into a call: the
# function stand-ins and the counter's handler, a watched method's, a counted method's, a place-keeping one's, a
# swapped function (`torch.cuda.synchronize`), a patched collective, the implicit kernels, and the child watch.
REFUSED = {
    "torch.cat": lambda: torch.cat([torch.ones(2), torch.ones(2, 2)]),
    "torch.stack": lambda: torch.stack(5),  # type: ignore[arg-type]
    "torch.tensor": lambda: torch.tensor([[1], [1, 2]]),
    "torch.zeros": lambda: torch.zeros("a"),  # type: ignore[call-overload]
    "torch.from_numpy": lambda: torch.from_numpy("x"),  # type: ignore[arg-type]
    ".to(5 arguments)": lambda: torch.ones(2).to(torch.ones(3), 1, 2, 3, 4),  # type: ignore[call-overload]
    ".to(no such device)": lambda: torch.ones(2).to("nonsense"),
    ".copy_": lambda: torch.ones(2).copy_(torch.ones(3)),
    ".item": lambda: torch.ones(2).item(),
    "bool()": lambda: bool(torch.ones(2)),
    ".view of a host tensor": lambda: torch.tensor([1.0, 2.0]).view(-1, 7),
    "masked_select": lambda: torch.ones(2).masked_select(torch.ones(3, dtype=torch.bool)),
    "torch.cuda.synchronize": lambda: torch.cuda.synchronize("cpu"),
    "all_reduce": lambda: torch.distributed.all_reduce(torch.ones(2)),
    "subprocess": lambda: subprocess.run(["/nonexistent/tripwire-test-program"], check=False),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_call_torch_refuses_stays_the_loops_whichever_way_tripwire_is_in_it(name: str, tmp_path: Path) -> None:
    """Every line of tripwire's between the loop and what it called passes the error on (`# pass-through`), and a
    device name torch does not know is torch's to refuse, not the classifier's: none is blamed on tripwire."""
    with ChildWatch(tmp_path), SyncCounter(), pytest.raises(Exception) as raised:
        REFUSED[name]()
    assert blame(raised.value).whose in ("loop", "through"), blame(raised.value)


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
