"""skrl 2.0.0's Pendulum PPO example as published, recorded from outside with the scenario docs/tripwire.md documents
(`examples/skrl/ppo_scenario.py`), skrl itself installed from PyPI as its users run it.

What running it found, each a test here:

- its KL-adaptive scheduler calls `torch.tensor(kl_divergences, device=self.device)` on one 0-d tensor a mini-batch:
  a GPU run reads each to the host before the upload. The counter counted the upload alone (20 syncs at that line,
  where a GPU run waits 660 times);
- the checkpoint's `exclude` leaves the tensorboard writer out, and the note of what a capture left out still named
  its locks and threads, the noise that hides a field left out by mistake.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from published_loops import checkout, ran

from tripwire.outside.compare import compare_results
from tripwire.outside.record import record
from tripwire.outside.result import Result
from tripwire.scenario import Scenario, load_scenario

pytest.importorskip("skrl", reason="skrl is a test dependency (pyproject.toml's test extra)")

HERE = Path(__file__).parents[1]
SCRIPT = HERE / "third_party" / "skrl" / "torch_gymnasium_pendulum_ppo.py"
SCENARIO: Scenario = dataclasses.replace(
    load_scenario(HERE.parents[1] / "examples" / "skrl" / "ppo_scenario.py"), script=SCRIPT.name
)
KL_LINE = "kl = torch.tensor(kl_divergences, device=self.device).mean()"
VALUE_LOSS = ("cfg.value_loss_scale = 0.5", "cfg.value_loss_scale = 0.25")


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Result]:
    yield ran(record(SCENARIO, checkout(tmp_path_factory.mktemp("skrl") / "base", SCRIPT)))
    # skrl's logger writes to the stream it found at import (pytest's capture, closed after the test), and each
    # trainer logs from an `atexit` hook it registers: to the process's own stderr at pytest's exit
    for handler in logging.getLogger("skrl").handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(sys.__stderr__)


def test_the_kl_schedulers_reads_are_counted_one_a_scalar(base: Result) -> None:
    at_kl = {(record.region, record.kind): record.count for record in base.syncs.records if record.text == KL_LINE}
    # 2 updates x 10 epochs, each reading its 32 mini-batches' KL values and uploading them once
    assert at_kl == {("update", "float"): 640, ("update", "tensor_to_device"): 20}


def test_two_runs_compare_identical_with_the_writer_left_out_without_a_note(base: Result, tmp_path: Path) -> None:
    again = ran(record(SCENARIO, checkout(tmp_path / "again", SCRIPT)))
    comparison = compare_results(base, again)
    assert comparison.ok, comparison.format()
    assert base.trajectory is not None and len(base.trajectory) == 2
    left_out = [note for note in base.notes if "left out" in note and "capture 'self'" in note]
    assert left_out and "writer" not in left_out[0], left_out
    assert "cfg.observation_preprocessor (type)" in left_out[0]  # what the exclude does not name is still said


def test_a_changed_value_loss_is_a_value_change_at_the_first_update(base: Result, tmp_path: Path) -> None:
    changed = ran(record(SCENARIO, checkout(tmp_path / "changed", SCRIPT, VALUE_LOSS)))
    verdict = compare_results(base, changed).verdict("trajectory")
    assert verdict.status == "differs"
    assert "#1 of 2 'PPO.update#1'" in verdict.summary, verdict.summary
