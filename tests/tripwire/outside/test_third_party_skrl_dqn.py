"""skrl 2.0.0's CartPole DQN example as published (`examples/skrl/dqn_scenario.py`), skrl installed from PyPI: seeded
with `--seed 42`, and still three recordings in eleven differed, because no gymnasium space it samples is seeded and
gymnasium makes their generators from OS entropy (docs/tripwire.md, "A NumPy generator made from OS entropy").

Which class of run a recording falls in follows the entropy the OS gave, so the tests give each run its own fixed
entropy (NumPy's `randbits`, which tripwire's watch wraps): entropy 1 and 2 take other random actions.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy.random.bit_generator as bit_generator
import pytest
from published_loops import checkout, ran

from tripwire.outside.compare import compare_results
from tripwire.outside.record import record
from tripwire.outside.result import Result
from tripwire.scenario import Scenario

pytest.importorskip("skrl", reason="skrl is a test dependency (pyproject.toml's test extra)")

HERE = Path(__file__).parents[1]
SCRIPT = HERE / "third_party" / "skrl" / "torch_gymnasium_cartpole_dqn.py"
_spec = importlib.util.spec_from_file_location("skrl_dqn_scenario", HERE.parents[1] / "examples/skrl/dqn_scenario.py")
assert _spec is not None and _spec.loader is not None
EXAMPLE = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(EXAMPLE)
SITE = ("torch_gymnasium_cartpole_dqn.py:72 via skrl/models/torch/base.py", 2)  # the models' `init_state_dict`


def _with_entropy(scenario: Scenario, folder: Path, entropy: int, monkeypatch: pytest.MonkeyPatch) -> Result:
    """A recording of the published example in which the OS's entropy is `entropy`."""
    with monkeypatch.context() as patched:
        patched.setattr(bit_generator, "randbits", lambda bits: entropy)
        result = ran(record(dataclasses.replace(scenario, script=SCRIPT.name), folder))
    # skrl's logger writes to the stream it found at import (pytest's capture, closed after the test)
    for handler in logging.getLogger("skrl").handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(sys.__stderr__)
    return result


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield checkout(tmp_path_factory.mktemp("skrl-dqn") / "tree", SCRIPT)


def test_two_runs_of_the_published_example_differ_and_compare_names_the_unseeded_spaces(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _with_entropy(EXAMPLE.scenario, tree, 1, monkeypatch)
    second = _with_entropy(EXAMPLE.scenario, tree, 2, monkeypatch)
    assert first.entropy == second.entropy == [SITE]
    assert not first.unseeded and first.seed == second.seed == 42  # torch seeded alike: not what differs
    comparison = compare_results(first, second)
    trajectory = comparison.verdict("trajectory")
    assert trajectory.status == "differs" and "#1 of 7 'DQN.update#1'" in trajectory.summary, trajectory.summary
    assert trajectory.summary.endswith("; NumPy generators from OS entropy")
    assert any(SITE[0] in line for line in trajectory.details)
    assert comparison.verdict("telemetry").summary.endswith("; NumPy generators from OS entropy")


def test_with_the_spaces_seeded_the_same_two_entropies_compare_identical(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _with_entropy(EXAMPLE.seeded, tree, 1, monkeypatch)
    second = _with_entropy(EXAMPLE.seeded, tree, 2, monkeypatch)
    comparison = compare_results(first, second)
    assert comparison.ok, comparison.format()
    assert first.entropy == [SITE]  # still made, before the agent seeds its spaces: never drawn from after that
