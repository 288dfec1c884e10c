"""Fuzzing tripwire's own files: result folders and sync budgets, mutated anywhere, load and compare or refuse in one
line; never a traceback. 2,000 inputs (1,000 each), from a real result and a real budget; and 1,000 scenarios whose
fields (and their Regions, Checkpoints, ...) hold values of any type, refused in one line naming the field.

Each input is a valid file with one part replaced by arbitrary JSON (a value of another type, a deep structure, a
huge number, a stray string): what a CI cache, a hand edit or another tool's output hands tripwire. The contract:
`Result.load` and `SyncBudget.load` either return or raise `GoldenFileError` naming the file, and what they return
compares and checks without raising.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tripwire.common.errors import GoldenFileError
from tripwire.outside.compare import compare_results
from tripwire.outside.result import Result, SyncSummary
from tripwire.scenario import Adapter, Checkpoint, EventCall, Iteration, Region, Scenario, ScenarioError
from tripwire.sync import hot_path
from tripwire.sync.budget import SyncBudget, budget_payload, check_budget
from tripwire.sync.counter import SyncCounter
from tripwire.sync.sites import callers_by_line, group_records, lines_by_key

T = TypeVar("T")
FUZZ = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

SPECIAL = st.sampled_from([float("inf"), float("-inf"), float("nan"), 1e308, -(2**70), 2**64, -1, 0, "", "ok"])
JSON = st.recursive(
    SPECIAL | st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


def _loop(counter: SyncCounter) -> None:
    values = torch.arange(6.0)
    for _ in range(3):
        with hot_path("step"):
            values.sum().item()
        counter.mark_iteration()
        values.tolist()


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, dict[str, Any], dict[str, Any]]:
    with SyncCounter() as counter:
        _loop(counter)
    records = group_records(counter.events)
    _setup, iterations, _tail = counter.segments()
    summary = SyncSummary(records, [{"step": 1, "<outside>": 1}] * len(iterations), {}, {}, ["step"])
    result = Result("fuzz", "ok", syncs=summary, compile=summary, calls={"m:f": 3}, notes=["n"])
    folder = result.save(tmp_path_factory.mktemp("seed") / "result")
    document = json.loads((folder / "result.json").read_text())
    budget = budget_payload(
        summary.counts_by_region(), summary.site_keys_by_region(), {"iterations": 3}, lines_by_key(records),
        {"step": 1}, callers_by_line(records), None,
    )  # fmt: skip
    return Result.load(folder), document, budget


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON document a value can be replaced, the document itself included."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


def _replaced(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    copy = json.loads(json.dumps(document))
    holder = copy
    for part in path[:-1]:
        holder = holder[part]
    holder[path[-1]] = value
    return copy


def _mutated(data: Any, document: Any) -> Any:
    """`document` with one place, drawn, replaced by arbitrary JSON, drawn."""
    return _replaced(document, data.draw(st.sampled_from(_paths(document))), data.draw(JSON))


def _loaded_or_refused(load: Callable[[Path], T], path: Path) -> T | None:
    """`load(path)`, or None when it refused the file as the contract says: one line naming the file."""
    try:
        return load(path)
    except GoldenFileError as error:
        assert "\n" not in str(error) and str(path) in str(error)
        return None


@FUZZ
@given(data=st.data())
def test_a_mutated_result_loads_and_compares_or_is_refused_in_one_line(
    seeds: tuple[Result, dict[str, Any], dict[str, Any]], tmp_path_factory: pytest.TempPathFactory, data: Any
) -> None:
    base, document, _ = seeds
    folder = tmp_path_factory.mktemp("mutated")
    (folder / "result.json").write_text(json.dumps(_mutated(data, document)))
    loaded = _loaded_or_refused(Result.load, folder)
    if loaded is None:
        return
    compare_results(base, loaded).format()
    compare_results(loaded, loaded).format()
    loaded.summary()


@pytest.mark.parametrize(
    "telemetry",
    [
        {"schema": "0"},
        {"schema": 1.5},
        {"schema": {"STEP": ["f"]}},
        {"schema": {"STEP": {"data.x": 3}}},
        {"by_type": {"STEP": "1"}},
        {"by_type": [1]},
        {"by_round": {"0": 3}},
        {"by_env": {"run": {"STEP": 1.5}}},
        {"sequence_round_0": "STEP"},
        {"sequence_round_0": [1]},
        {"total": "3"},
        "counts",
    ],
)
def test_a_result_whose_telemetry_has_another_shape_is_refused_in_one_line(
    seeds: tuple[Result, dict[str, Any], dict[str, Any]], tmp_path: Path, telemetry: Any
) -> None:
    """Found by this fuzzer (2026-12-07): `"telemetry": {"schema": "0"}` loaded, and comparing it raised a `TypeError`
    in the schema's diff. Every part `compare` reads is checked as the result loads."""
    _, document, _ = seeds
    (tmp_path / "result.json").write_text(json.dumps({**document, "telemetry": telemetry}))
    assert _loaded_or_refused(Result.load, tmp_path) is None


def test_telemetry_of_the_shape_a_run_writes_loads_and_compares(
    seeds: tuple[Result, dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    base, document, _ = seeds
    telemetry = {
        "total": 2,
        "by_type": {"STEP": 2},
        "by_round": {"0": {"STEP": 2}},
        "by_env": {"run": {"STEP": 2}},
        "sequence_round_0": ["STEP", "STEP"],
        "schema": {"STEP": {"data.x": "float"}},
    }
    (tmp_path / "result.json").write_text(json.dumps({**document, "telemetry": telemetry}))
    loaded = Result.load(tmp_path)
    assert loaded.telemetry == telemetry
    assert compare_results(loaded, loaded).verdict("telemetry").status == "same"
    compare_results(base, loaded).format()


@pytest.mark.parametrize("commit", [float("inf"), 5, ["abc"], {"sha": "abc"}])
def test_a_result_whose_source_holds_no_text_is_refused_in_one_line(
    seeds: tuple[Result, dict[str, Any], dict[str, Any]], tmp_path: Path, commit: Any
) -> None:
    """Found by this fuzzer run unseeded: `"source": {"commit": Infinity}` loaded, and comparing it raised a
    `TypeError` from the label (`commit[:12]`)."""
    _, document, _ = seeds
    (tmp_path / "result.json").write_text(json.dumps({**document, "source": {"a\nb": commit, "commit": commit}}))
    assert _loaded_or_refused(Result.load, tmp_path) is None  # one line, though a key holds a line break


@pytest.mark.parametrize("context", [[[float("inf"), float("inf")], [None, None]], [["torch", "2.14"]], "cpu", 5])
def test_a_result_whose_context_is_no_object_is_refused_in_one_line(
    seeds: tuple[Result, dict[str, Any], dict[str, Any]], tmp_path: Path, context: Any
) -> None:
    """Found by this fuzzer on the CI run of 7a2bb4c: a context mutated into a list of pairs loaded (`dict()` of it),
    with a number and None as keys, and comparing it raised a `TypeError` from sorting the keys."""
    _, document, _ = seeds
    (tmp_path / "result.json").write_text(json.dumps({**document, "context": context}))
    assert _loaded_or_refused(Result.load, tmp_path) is None
    for field in ("setup", "tail"):  # the sync summary's regions, read the same way
        syncs = {**document["syncs"], field: context}
        (tmp_path / "result.json").write_text(json.dumps({**document, "syncs": syncs}))
        assert _loaded_or_refused(Result.load, tmp_path) is None


@FUZZ
@given(data=st.data())
def test_a_mutated_budget_loads_and_checks_or_is_refused_in_one_line(
    seeds: tuple[Result, dict[str, Any], dict[str, Any]], tmp_path_factory: pytest.TempPathFactory, data: Any
) -> None:
    base, _, budget = seeds
    file = tmp_path_factory.mktemp("budget") / "budget.json"
    file.write_text(json.dumps(_mutated(data, budget)))
    loaded = _loaded_or_refused(SyncBudget.load, file)
    if loaded is None:
        return
    check_budget(base.syncs, loaded).format()
    check_budget(base.compile, loaded, what="compile").format()  # type: ignore[arg-type]


# Scenario files: every field of Scenario and its parts given a value of any type. --------------------------------

HOSTILE_VALUE = JSON | st.sampled_from([print, object(), b"bytes", ("a", 1), "start", "return", "m:f"])
PARTS: dict[str, Any] = {
    "regions": (Region, {"target": "m:f", "name": "r"}),
    "checkpoints": (Checkpoint, {"target": "m:f"}),
    "event_calls": (EventCall, {"target": "m:f", "label": "tag"}),
    "adapters": (Adapter, {}),
}
FIELDS = ["name", "script", "module", "call", "argv", "paths", "iteration", "events", "round_end", "exclude"]
FIELDS += ["threads", "deterministic", "keep_values", "cwd", *PARTS]


def _part(data: Any, kind: type, valid: dict[str, Any]) -> Any:
    """One part (a Region, a Checkpoint, ...) with one of its fields hostile; ScenarioError escapes as it would
    from a scenario file."""
    names = [f.name for f in kind.__dataclass_fields__.values()]  # type: ignore[attr-defined]
    field = data.draw(st.sampled_from(names))
    return kind(**{**valid, field: data.draw(HOSTILE_VALUE)})


@FUZZ
@given(data=st.data())
def test_a_scenario_with_any_field_of_any_type_is_refused_in_one_line_naming_it_or_holds_its_types(data: Any) -> None:
    arguments: dict[str, Any] = {"name": "fuzz", "script": "loop.py"}
    try:
        for name in data.draw(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=3, unique=True)):
            if name in PARTS and data.draw(st.booleans()):
                kind, valid = PARTS[name]
                arguments[name] = [_part(data, kind, valid)]
            elif name == "iteration" and data.draw(st.booleans()):
                arguments[name] = _part(data, Iteration, {"target": "m:f"})
            else:
                arguments[name] = data.draw(HOSTILE_VALUE)
        scenario = Scenario(**arguments)
    except ScenarioError as error:
        assert "\n" not in str(error)
        return
    # Accepted: every field holds what the recorder reads (no str where a list belongs, no count below 1).
    assert isinstance(scenario.name, str) and scenario.name
    assert all(isinstance(item, str) for item in (*scenario.argv, *scenario.paths, *scenario.exclude))
    assert not isinstance(scenario.argv, str) and not isinstance(scenario.exclude, str)
    assert isinstance(scenario.threads, int) and scenario.threads >= 1 and isinstance(scenario.keep_values, bool)
    assert scenario.iteration is None or (scenario.iteration.every >= 1 and scenario.iteration.at in ("start", "end"))
    for checkpoint in scenario.checkpoints:
        assert checkpoint.every >= 1 and not isinstance(checkpoint.capture, str)
