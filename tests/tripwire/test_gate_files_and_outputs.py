"""Values files and stores of the right format but the wrong structure, result files behind a link loop or holding a
huge integer, and output paths that cannot be written: each ends in one line naming the file (exit 2), before any
work where it is an output, and loses nothing.

Before these checks: `compare` ended in `AttributeError: 'list' object has no attribute 'items'` or `'str' object has
no attribute 'shape'`, read a store entry from `/etc`, and `run --out afile/x`, `--values-store FILE`,
`history --out afile/x` and `budget write` to a folder, under a file or to `/proc/nope` ended in tracebacks, the
first three after the run, so the recorded result was lost.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import torch

from tripwire.bitwise.trajectory import TrajectoryRecorder
from tripwire.bitwise.values import FORMAT, LEGACY_FORMAT, load_values, save_values
from tripwire.common.errors import GoldenFileError
from tripwire.history import cli as history_cli
from tripwire.outside.commands import budget_main, compare_main, run_main
from tripwire.outside.result import Result, SyncSummary
from tripwire.sync.budget import write_budget

DIGEST = "ab" * 32


def one_line_error(err: str, *needles: str) -> None:
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


def values_file(path: Path, data: dict[str, Any]) -> Path:
    torch.save(data, path)
    return path


def recorded(tmp_path: Path, name: str, scale: float, store: Path | None = None) -> Path:
    """A result folder whose trajectory kept its values (in `store` when given)."""
    recorder = TrajectoryRecorder(keep_values=True)
    recorder.record("step", {"w": torch.arange(4.0) * scale})
    folder = tmp_path / name
    Result("s", "ok", syncs=SyncSummary(declared=["r"]), trajectory=recorder.trajectory, values=recorder.values).save(
        folder, values_store=store
    )
    return folder


STRUCTURES: dict[str, tuple[dict[str, Any], str]] = {
    "checkpoints a list": ({"format": FORMAT, "checkpoints": [], "tensors": {}}, "checkpoints is a list"),
    "tensors a list": ({"format": FORMAT, "checkpoints": {}, "tensors": [torch.zeros(1)]}, "tensors is a list"),
    "a legacy str tensor": ({"format": LEGACY_FORMAT, "checkpoints": {"c": {"w": "x"}}}, "holds a str, not a tensor"),
    "a dict for a tensor": ({"format": FORMAT, "checkpoints": {}, "tensors": {"k": {"a": 1}}}, "holds a dict"),
    "a key of no tensor": ({"format": FORMAT, "checkpoints": {"c": {"w": "k"}}, "tensors": {}}, "names no tensor"),
    "a key of another type": ({"format": FORMAT, "checkpoints": {"c": {"w": 5}}, "tensors": {}}, "keyed by a int"),
    "a meta tensor": ({"format": FORMAT, "checkpoints": {}, "tensors": {"k": torch.empty(2, device="meta")}}, "meta"),
    "a store of a list": ({"format": FORMAT, "checkpoints": {}, "tensors": {}, "store": [1]}, "store is a list"),
    "a store key to /etc": (
        {"format": FORMAT, "checkpoints": {"c": {"w": "/etc/passwd"}}, "tensors": {}, "store": "s"},
        "is not a digest",
    ),
    "a store key climbing out": (
        {"format": FORMAT, "checkpoints": {"c": {"w": "../../x"}}, "tensors": {}, "store": "s"},
        "is not a digest",
    ),
}


@pytest.mark.parametrize("kind", list(STRUCTURES))
def test_a_values_file_of_the_wrong_structure_is_one_line(tmp_path: Path, kind: str) -> None:
    data, needle = STRUCTURES[kind]
    path = values_file(tmp_path / "values.pt", data)
    with pytest.raises(GoldenFileError) as caught:
        load_values(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and "\n" not in message and needle in message, message


@pytest.mark.parametrize("entry", ["fifo", "folder", "link out", "missing"])
def test_a_store_entry_that_is_no_regular_file_inside_the_store_is_one_line(tmp_path: Path, entry: str) -> None:
    store = tmp_path / "store"
    save_values(tmp_path / "v.pt", {"c": {"w": torch.ones(2)}}, {"c": {"w": DIGEST}}, store)
    target = store / DIGEST[:2] / f"{DIGEST}.pt"
    target.unlink()
    if entry == "fifo":
        os.mkfifo(target)
    elif entry == "folder":
        target.mkdir()
    elif entry == "link out":
        target.symlink_to(tmp_path / "v.pt")
    with pytest.raises(GoldenFileError) as caught:
        load_values(tmp_path / "v.pt")
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'v.pt'}: ") and "\n" not in message, message


def test_a_store_tensor_that_is_no_tensor_ends_compare_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    a, b = recorded(tmp_path, "a", 1.0, store), recorded(tmp_path, "b", 2.0, store)
    [entry] = [path for path in store.rglob("*.pt") if torch.equal(torch.load(path), torch.arange(4.0) * 2.0)]
    torch.save({"not": "a tensor"}, entry)  # read lazily, when the comparison measures the difference
    assert compare_main([str(a), str(b)]) == 2
    one_line_error(capsys.readouterr().err, str(entry), "not a tensor")


def test_a_result_file_behind_a_link_loop_or_with_a_huge_integer_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = recorded(tmp_path, "a", 1.0)
    loop = tmp_path / "loop"
    loop.mkdir()
    (loop / "result.json").symlink_to(loop / "result.json")
    assert compare_main([str(a), str(loop)]) == 2
    one_line_error(capsys.readouterr().err, "Too many levels of symbolic links")
    huge = recorded(tmp_path, "huge", 1.0)
    data = json.loads((huge / "result.json").read_text())
    (huge / "result.json").write_text(json.dumps(data).replace('"seconds": 0.0', '"seconds": ' + "9" * 5000))
    assert compare_main([str(a), str(huge)]) == 2
    one_line_error(capsys.readouterr().err, "holds a number Python will not read")


@pytest.fixture
def loop_tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A scenario whose loop leaves a marker when it runs: a refusal before any work leaves none."""
    (tmp_path / "loop.py").write_text("open('ran', 'w').write('yes')\n")
    scenario = tmp_path / "scenario.py"
    scenario.write_text("from tripwire.scenario import Scenario\n\nscenario = Scenario(name='s', script='loop.py')\n")
    (tmp_path / "afile").write_text("mine\n")
    return tmp_path, scenario, tmp_path / "ran"


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [
        ("--out", "afile/x", "afile on the way is a file, not a folder"),
        ("--out", "afile", "is a file, not a result folder"),
        ("--out", "/proc/nope/out", "cannot be written"),
        ("--values-store", "afile", "--values-store"),
        ("--values-store", "afile/store", "afile on the way is a file"),
    ],
)
def test_run_refuses_an_output_path_it_cannot_write_before_running(
    loop_tree: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], flag: str, value: str, needle: str
) -> None:
    root, scenario, marker = loop_tree
    target = value if value.startswith("/") else str(root / value)
    argv = [str(scenario), "--root", str(root), "--out", str(root / "out"), "--cpu-pin", "native", flag, target]
    assert run_main(argv) == 2
    one_line_error(capsys.readouterr().err, flag, needle)
    assert not marker.exists() and (root / "afile").read_text() == "mine\n"


def test_history_refuses_an_out_under_a_file_before_walking(
    loop_tree: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root, scenario, _ = loop_tree
    argv = ["--repo", str(root), "--range", "A..B", "--scenario", str(scenario), "--out", str(root / "afile" / "h")]
    assert history_cli.main(argv) == 2
    one_line_error(capsys.readouterr().err, "--out", "afile on the way is a file")


@pytest.mark.parametrize(
    ("target", "needle"),
    [
        ("folder", "is a folder: pass a file path"),
        ("afile/budget.json", "on the way is a file, not a folder"),
        ("/proc/nope", "cannot be written"),
        ("x" * 300, "File name too long"),
    ],
)
def test_a_budget_written_where_it_cannot_be_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str, needle: str
) -> None:
    result = recorded(tmp_path, "r", 1.0)
    (tmp_path / "folder").mkdir()
    (tmp_path / "afile").write_text("mine\n")
    before = sorted(path.name for path in tmp_path.rglob("*"))
    path = target if target.startswith("/") else str(tmp_path / target)
    assert budget_main(["write", str(result), path]) == 2
    one_line_error(capsys.readouterr().err, "budget file")
    assert sorted(path.name for path in tmp_path.rglob("*")) == before


def test_a_budget_is_written_whole_where_it_can_be(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The control: a writable path gets the budget, and no temporary file stays beside it."""
    result = recorded(tmp_path, "r", 1.0)
    assert budget_main(["write", str(result), str(tmp_path / "b" / "budget.json")]) == 0
    assert json.loads((tmp_path / "b" / "budget.json").read_text())["regions"] == {"r": 0}
    assert [path.name for path in (tmp_path / "b").iterdir()] == ["budget.json"]
    assert budget_main(["check", str(result), str(tmp_path / "b" / "budget.json")]) == 0


def test_a_rewritten_golden_keeps_its_mode_and_a_new_one_takes_the_umasks(tmp_path: Path) -> None:
    """Goldens are written whole through a temporary file, which is private (0600): renamed over a golden it gave the
    file that mode (a `tripwire budget write` made every budget 0600). A new file takes the umask's mode, a rewritten
    one keeps its own; the trajectory and both budget goldens are written this way, never in place."""
    result = recorded(tmp_path, "r", 1.0)
    budget = tmp_path / "budget.json"
    assert budget_main(["write", str(result), str(budget)]) == 0
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(budget.stat().st_mode) == 0o666 & ~umask
    budget.chmod(0o640)
    write_budget(budget, {"r": 1})
    assert stat.S_IMODE(budget.stat().st_mode) == 0o640 and json.loads(budget.read_text())["regions"] == {"r": 1}
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.endswith(".tmp")) == []
