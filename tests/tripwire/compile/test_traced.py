"""TracedLines: the lines dynamo traced into a graph count as run for coverage.py (and so for the changed-line gate).

coverage.py alone marks a compiled function's body unrun after its first capture; with `TracedLines` and
`add_to_coverage` every line of it, an inlined callee's too, is measured as run; dynamo's hook is put back after,
also after an error."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import coverage
import pytest
import torch

from tripwire.compile.traced import TracedLines, add_to_coverage

LOOP = """import torch


def scale(x):
    doubled = x * 2
    if doubled.dtype == torch.float32:
        doubled = doubled + 1
    return doubled


def step(x):
    return scale(x).sum()
"""


def _module(folder: Path, name: str) -> object:
    path = folder / f"{name}.py"
    path.write_text(LOOP, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


BODY = {5, 6, 7, 8, 12}  # the lines that compute: both bodies, the callee inlined


def _measured(tmp_path: Path, name: str, traced: bool) -> set[int]:
    """Lines coverage.py measures in a module whose `step` runs only compiled (first call captures, both replay)."""
    folder = tmp_path / name
    folder.mkdir()
    module = _module(folder, name)
    compiled = torch.compile(module.step, backend="eager")  # type: ignore[attr-defined]
    measure = coverage.Coverage(data_file=str(tmp_path / f".coverage-{name}"), config_file=False, source=[str(folder)])
    measure.start()
    try:
        with TracedLines() as lines:
            for _ in range(2):
                compiled(torch.ones(3))
        if traced:
            assert add_to_coverage(lines.lines, folder) >= len(BODY)
    finally:
        measure.stop()
    return set(measure.get_data().lines(str(folder / f"{name}.py")) or ())


@pytest.mark.filterwarnings("ignore:No data was collected")  # the plain case: coverage.py saw none of the module
def test_lines_only_dynamo_ran_are_measured_as_run(tmp_path: Path) -> None:
    torch._dynamo.reset()
    assert not _measured(tmp_path, "plainloop", traced=False) >= BODY  # the hazard: coverage.py alone misses them
    torch._dynamo.reset()
    assert _measured(tmp_path, "tracedloop", traced=True) >= BODY


def test_dynamos_hook_is_put_back_also_after_an_error() -> None:
    from torch._guards import TracingContext

    before = TracingContext.__dict__["set_current_loc"]
    with pytest.raises(RuntimeError, match="loop failed"), TracedLines(), TracedLines():
        assert TracingContext.__dict__["set_current_loc"] is not before
        raise RuntimeError("loop failed")
    assert TracingContext.__dict__["set_current_loc"] is before


def test_lines_of_files_outside_the_root_or_gone_are_not_added(tmp_path: Path) -> None:
    assert add_to_coverage({str(tmp_path / "gone.py"): {1, 2}}, tmp_path) == 0
    assert add_to_coverage({torch.__file__: {1}}, tmp_path) == 0
