"""`benchmarks/recording_instructions.py` reads callgrind's counts of each side and takes the loop's iterations alone.

Running the loop under valgrind takes minutes, so these tests give it callgrind's own dump format (the header lines
a dump starts with) and check what it makes of them: each side's count found by its dump's trigger, the ratio of
the long run's extra iterations, and a clear one-line stop where a side or valgrind is missing.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "recording_instructions.py"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("recording_instructions", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["recording_instructions"] = module
    spec.loader.exec_module(module)
    return module


def _dump(folder: Path, name: str, trigger: str, totals: int) -> None:
    header = "# callgrind format\nversion: 1\ncreator: callgrind-3.19.0\npid: 7\ncmd: python\npart: 1\n\n"
    header += f"desc: I1 cache: \ndesc: Timerange: Basic block 0 - 1\ndesc: Trigger: {trigger}\n\n"
    header += f"positions: line\nevents: Ir\nsummary: {totals}\ntotals: {totals}\n\nfl=(1) x.c\nfn=(1) f\n0 {totals}\n"
    (folder / name).write_text(header, encoding="utf-8")


def test_each_side_is_read_from_its_dump_and_the_iterations_are_taken_alone(tmp_path: Path) -> None:
    module = _module()
    _dump(tmp_path, "callgrind.out.7.1", "dump short-plain", 1_000)
    _dump(tmp_path, "callgrind.out.7.2", "dump short-recorded", 2_500)
    _dump(tmp_path, "callgrind.out.7.3", "dump long-plain", 4_000)
    _dump(tmp_path, "callgrind.out.7.4", "dump long-recorded", 7_000)
    _dump(tmp_path, "callgrind.out.7", "Program termination", 99_999)  # the count at exit: not a side
    sides = module.counted(tmp_path)
    assert sides == {"short-plain": 1_000, "short-recorded": 2_500, "long-plain": 4_000, "long-recorded": 7_000}
    figures = module.summary(sides)
    assert figures["loop_plain"] == 3_000 and figures["loop_recorded"] == 4_500
    assert figures["loop_ratio"] == pytest.approx(1.5)
    assert figures["loop_added"] == 1_500
    assert figures["start_and_end"] == pytest.approx(1_500 - 500)  # the short run's one third of the iterations


def test_a_side_without_a_dump_stops_with_a_line_naming_it(tmp_path: Path) -> None:
    module = _module()
    _dump(tmp_path, "callgrind.out.7.1", "dump short-plain", 1_000)
    with pytest.raises(SystemExit, match="no count for short-recorded, long-plain, long-recorded"):
        module.counted(tmp_path)


def test_a_long_run_no_longer_than_the_short_one_is_refused() -> None:
    module = _module()
    same = {"short-plain": 5, "short-recorded": 9, "long-plain": 5, "long-recorded": 9}
    with pytest.raises(SystemExit, match="did not run longer"):
        module.summary(same)


def test_without_valgrind_it_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = _module()
    monkeypatch.setattr(module.shutil, "which", lambda _name: None)
    with pytest.raises(SystemExit, match="apt install valgrind"):
        module.measure("cleanrl", tmp_path)
