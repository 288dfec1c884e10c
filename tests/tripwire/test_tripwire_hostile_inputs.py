"""tripwire's own inputs, fed as a hostile or careless user would: each ends in one line naming the file or the
argument, runs no code it reads, and destroys nothing.

Result folders, budgets and value stores come from CI caches and other machines; `--range` reaches git. Each case
below failed with a traceback, a hang or a destroyed file before it was bounded.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
from pathlib import Path

import pytest
import torch

from tripwire.bitwise.values import load_values, save_values
from tripwire.common.errors import GoldenFileError
from tripwire.history.commits import HistoryError, list_commits
from tripwire.history.runner import Runner, WalkSettings
from tripwire.outside.commands import compare_main, run_main
from tripwire.outside.result import Result, SyncSummary
from tripwire.sync.budget import SyncBudget

SCENARIO = Path(__file__).parent / "loops" / "sb3_script_scenario.py"


def saved(folder: Path, scenario: str = "s") -> Path:
    Result(scenario, "ok", syncs=SyncSummary(declared=["r"])).save(folder)
    return folder


def one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text and "Traceback" not in text, text
    return text


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (
        ["init", "-q", "-b", "main"],
        ["config", "user.email", "t@example.invalid"],
        ["config", "user.name", "t"],
    ):
        subprocess.run(["git", "-C", str(repo), *args], check=True)
    for index in range(2):
        (repo / "a.py").write_text(f"x = {index}\n")
        subprocess.run(["git", "-C", str(repo), "add", "a.py"], check=True)
        subprocess.run(["git", "-C", str(repo), "commit", "-qm", f"c{index}"], check=True)
    return repo


@pytest.mark.parametrize(
    "span",
    [
        "--output={victim}..HEAD",
        "HEAD~1..--output={victim}",
        "--output={victim}..--all",
        "-q..HEAD",
        "HEAD~1..HEAD\n--output={victim}",
    ],
)
def test_a_range_can_never_reach_git_as_an_option(repo: Path, tmp_path: Path, span: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    with pytest.raises(HistoryError) as caught:
        list_commits(repo, span.format(victim=victim))
    assert "is not a commit" in one_line(caught.value)
    assert victim.read_text() == "keep me\n"  # never truncated by `git --output`


def test_paths_cannot_reach_git_as_an_option(repo: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    with pytest.raises(HistoryError, match="no commit up to"):
        list_commits(repo, "HEAD~1..HEAD", [f"--output={victim}"])
    assert victim.read_text() == "keep me\n"


@pytest.mark.parametrize(
    ("field", "value"),
    [("seconds", "abc"), ("calls", 5), ("calls", {"t": "many"}), ("syncs", []), ("notes", 3), ("telemetry", [1])],
)
def test_a_result_field_of_the_wrong_type_is_one_line(tmp_path: Path, field: str, value: object) -> None:
    folder = saved(tmp_path / "r")
    data = json.loads((folder / "result.json").read_text())
    data[field] = value
    (folder / "result.json").write_text(json.dumps(data))
    with pytest.raises(GoldenFileError) as caught:
        Result.load(folder)
    assert one_line(caught.value).startswith(f"{folder / 'result.json'}: ")


def test_deep_json_a_file_for_a_folder_and_a_fifo_are_one_line(tmp_path: Path) -> None:
    deep = saved(tmp_path / "deep")
    (deep / "result.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(GoldenFileError, match="nested too deeply"):
        Result.load(deep)
    (tmp_path / "file").write_text("x")
    with pytest.raises(GoldenFileError, match="a file, not a result folder"):
        Result.load(tmp_path / "file")
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "result.json")  # reading it would block forever
    with pytest.raises(GoldenFileError, match="not a regular file"):
        Result.load(fifo)


def test_a_damaged_or_malicious_values_file_is_one_line_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Exploit:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (f"touch {marker}",))

    for name, content in [("random", os.urandom(2000)), ("pickle", pickle.dumps(Exploit())), ("empty", b"")]:
        path = tmp_path / f"{name}.pt"
        path.write_bytes(content)
        with pytest.raises(GoldenFileError) as caught:
            load_values(path)
        assert one_line(caught.value).startswith(f"{path}: ")
    assert not marker.exists()


def test_a_damaged_tensor_in_the_store_is_mended_by_recording_again(tmp_path: Path) -> None:
    store = tmp_path / "store"
    values = {"c": {"w": torch.arange(6.0)}}
    save_values(tmp_path / "a.pt", values, {"c": {"w": "ab" * 32}}, store)
    [tensor_file] = list(store.rglob("*.pt"))
    tensor_file.write_bytes(b"damaged")
    save_values(tmp_path / "b.pt", values, {"c": {"w": "ab" * 32}}, store)
    assert torch.equal(load_values(tmp_path / "b.pt")["c"]["w"], torch.arange(6.0))


def test_budget_sites_that_are_not_objects_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "budget.json"
    path.write_text(json.dumps({"regions": {"r": 3}, "sites": {"r": 5}}))
    with pytest.raises(GoldenFileError) as caught:
        SyncBudget.load(path)
    assert one_line(caught.value) == f"{path}: 'sites' must map region names to {{site: count}}"


def test_compare_refuses_results_of_two_scenarios(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = saved(tmp_path / "a", "cleanrl-ppo"), saved(tmp_path / "b", "sb3-ppo")
    assert compare_main([str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "compare two results of one scenario" in err and err.count("\n") == 1


def test_run_refuses_a_file_as_out_before_running(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "notes.txt"
    out.write_text("mine\n")
    code = run_main([str(SCENARIO), "--root", str(tmp_path), "--out", str(out), "--cpu-pin", "native"])
    assert code == 2 and out.read_text() == "mine\n"
    assert capsys.readouterr().err.startswith(f"error: --out {out} is a file, not a result folder")


def test_a_cached_result_of_the_wrong_type_is_recorded_again_not_trusted(repo: Path, tmp_path: Path) -> None:
    runner = Runner(WalkSettings(repo, SCENARIO, tmp_path / "out"))
    [commit] = list_commits(repo, "HEAD~1..HEAD")[1:]
    folder = saved(runner.folder(commit))
    assert runner.cached(commit) is not None
    data = json.loads((folder / "result.json").read_text())
    data["seconds"] = {"not": "a number"}
    (folder / "result.json").write_text(json.dumps(data))
    assert runner.cached(commit) is None  # the walk runs this commit again


def test_a_damaged_events_file_from_the_loop_is_a_crash_result_not_a_lost_one(tmp_path: Path) -> None:
    from tripwire.outside.record import record
    from tripwire.scenario import Scenario

    for damage in (b'{"event_type": "A"}\n{"event_ty', b"\xff\xfe binary\n"):
        (tmp_path / "loop.py").write_text(f"open('events.jsonl', 'wb').write({damage!r})\n")
        result = record(Scenario(name="s", script="loop.py", events="events.jsonl"), tmp_path)
        assert result.status == "crash" and result.cause.startswith("the loop's events file is damaged: ")
        assert "\n" not in result.cause
        result.save(tmp_path / "out")  # the result is kept
        assert Result.load(tmp_path / "out").status == "crash"


@pytest.mark.parametrize(
    ("declaration", "message"),
    [
        ('Scenario(name="s", script="loop.py", argv="--steps 3")', "argv must be a list of strings, got '--steps 3'"),
        ('Scenario(name="s", script=5)', "scenario 's': script must be a path (a string), got 5"),
        (
            'Scenario(name="s", script="loop.py", checkpoints=[Checkpoint("m:f", capture="return")])',
            "Checkpoint: capture must be a non-empty list of names, got 'return'",
        ),
        ('Scenario(name="s", script="loop.py", iteration=Iteration("m:f", every=0))', "Iteration: every must be a"),
        ('Scenario(name="s", script="loop.py", regions=["m:f"])', "regions must be a list of Region, got ['m:f']"),
        ('Scenario(name="s", script="loop.py", threads="2")', "threads must be a whole number of at least 1"),
    ],
)
def test_a_scenario_field_of_the_wrong_type_is_one_line_naming_it_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], declaration: str, message: str
) -> None:
    """A bare string where a list belongs was read a character at a time; a count of 0 divided by zero mid-run."""
    scenario = tmp_path / "scenario.py"
    scenario.write_text(f"from tripwire.scenario import *\n\nscenario = {declaration}\n")
    (tmp_path / "loop.py").write_text("raise SystemExit('the loop must not run')\n")
    assert run_main([str(scenario), "--root", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "out").exists()
