"""`python -m tripwire history` on a synthetic history: each commit's kind named, each first commit bisected.

The repository (synthetic_repo.py) is built in the test's temporary folder: a pure refactor, a regrouped sum, a
real value change, an added sync, a telemetry change, a crash and its fix, and a rename the scenario's adapter
absorbs. The walk runs each commit in its own worktree and process, as a user's walk would, from a working folder
that holds a `random.py` and a `bisect.py` that raise on import.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from synthetic_repo import STEPS, build, write_scenario

SLOW_ENTRY = """import time


def slow_train(tree):
    time.sleep(3.0)
    import train

    return train.train()


"""


def history(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tripwire", "history", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=900, check=False)


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("history")
    shas = build(root / "repo")
    scenario = write_scenario(root / "scenarios")
    span = f"{shas[0]}..{shas[-1]}"
    args = ["--repo", str(root / "repo"), "--range", span, "--scenario", str(scenario), "--out", str(root / "out")]
    done = history(root / "scenarios", *args, "--jobs", "2")  # the working folder shadows random and bisect
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((root / "out" / "history.json").read_text())
    return {"root": root, "shas": shas, "span": span, "args": args, "report": report, "stdout": done.stdout}


def test_the_walk_names_each_commits_kind(walk: dict[str, Any]) -> None:
    rows = walk["report"]["rows"]
    assert [row["commit"] for row in rows] == walk["shas"]
    assert [row["step"] for row in rows] == [kind for _, kind, _ in STEPS]


def test_each_difference_says_where_what_kind_and_how_big(walk: dict[str, Any]) -> None:
    cells = {row["subject"].split(":")[0]: row["cells"] for row in walk["report"]["rows"]}
    assert "ULP" in cells["perf"]["trajectory"]["text"] and cells["perf"]["trajectory"]["kind"] == "low-bit drift"
    assert cells["tune"]["trajectory"]["kind"] == "value change"
    assert "NEW" in cells["feat"]["syncs"]["text"] and "`if loss.item() > 1e6:`" in cells["feat"]["syncs"]["text"]
    assert "train.py:27 in train" in cells["feat"]["syncs"]["text"]
    assert cells["telemetry"]["telemetry"]["text"] == "schema of STEP: field data.step added"
    assert cells["wip"]["run"]["text"] == "crash: NameError: name 'optimiser' is not defined (train.py:24)"
    fixed = next(row for row in walk["report"]["rows"] if row["subject"].startswith("fix"))
    assert fixed["compared_with"] == walk["shas"][5]  # the last commit that ran, not the crash
    assert cells["fix"]["run"]["kind"] == "fixed"


def test_the_report_comes_as_markdown_json_and_a_picture(walk: dict[str, Any]) -> None:
    out = walk["root"] / "out"
    table = (out / "history.md").read_text()
    assert "| commit | subject | step | compared with | trajectory | syncs | compile | telemetry | payloads |" in table
    assert (out / "history.png").stat().st_size > 1000 and (out / "history.svg").exists()
    # every commit ran but the fix, whose tree is the one before the crash again: that commit's result stands for it
    assert walk["report"]["ran"] == len(walk["shas"]) - 1 and walk["report"]["reused"] == 1
    assert [row["reused_from"] for row in walk["report"]["rows"]][7] == walk["shas"][5]


def test_a_second_walk_is_free(walk: dict[str, Any]) -> None:
    done = history(walk["root"], *walk["args"])
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((walk["root"] / "out" / "history.json").read_text())
    assert report["ran"] == 0 and report["seconds"] < 10
    assert [row["step"] for row in report["rows"]] == [row["step"] for row in walk["report"]["rows"]]
    # the cost of the walk that recorded the results is kept, not replaced by this one's
    assert report["recorded_seconds"] == walk["report"]["recorded_seconds"] > report["seconds"]
    assert f"Recording these {len(walk['shas'])} results took " in (walk["root"] / "out" / "history.md").read_text()
    # measured comparisons are cached beside the results, and the picture is not drawn again
    measured = list((walk["root"] / "out" / "results").glob("*/*/compared/*.json"))
    assert len(measured) >= 2  # the drift and the value change, at least
    assert "recording them took" in done.stdout


def test_bisection_finds_the_first_commit_of_each_kind_of_change(walk: dict[str, Any]) -> None:
    done = history(walk["root"], *walk["args"], "--bisect")
    assert done.returncode == 0, done.stderr[-2000:]
    found = {f["check"]: f for f in json.loads((walk["root"] / "out" / "bisect.json").read_text())["bisection"]}
    subjects = {check: finding["subject"].split(":")[0] for check, finding in found.items()}
    assert subjects == {
        "trajectory": "perf",  # the first difference of any kind: the regrouped sum's drift
        "trajectory (value change)": "tune",
        "syncs": "feat",
        "telemetry": "telemetry",
        "payloads": "perf",  # the drift reaches the logged loss values
    }
    # 7 commits between A and B: two probes a round (--jobs 2) cut the range in three, so two rounds at most
    assert all(1 <= finding["rounds"] <= 2 and finding["steps"] <= 2 * finding["rounds"] for finding in found.values())


def test_bisection_finds_where_a_run_first_crashed(walk: dict[str, Any]) -> None:
    shas = walk["shas"]
    args = [*walk["args"]]
    args[args.index(walk["span"])] = f"{shas[0]}..{shas[6]}"  # B is the crash
    done = history(walk["root"], *args, "--bisect")
    assert done.returncode == 0, done.stderr[-2000:]
    [finding] = [f for f in json.loads((walk["root"] / "out" / "bisect.json").read_text())["bisection"]]
    assert (finding["check"], finding["first"]) == ("run", shas[6])
    assert "NameError" in finding["summary"]


def test_without_the_adapter_the_renamed_target_is_a_scenario_error(walk: dict[str, Any]) -> None:
    shas, root = walk["shas"], walk["root"]
    scenario = write_scenario(root / "scenarios", adapter=False)
    args = ["--repo", str(root / "repo"), "--range", f"{shas[7]}..{shas[8]}", "--scenario", str(scenario)]
    done = history(root, *args, "--out", str(root / "out-no-adapter"))
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads((root / "out-no-adapter" / "history.json").read_text())["rows"]
    assert rows[1]["step"] == "error"
    assert "train:make_model" in rows[1]["cells"]["run"]["text"]


def test_a_range_that_is_not_older_to_newer_is_a_one_line_usage_error(walk: dict[str, Any]) -> None:
    shas, root = walk["shas"], walk["root"]
    base = ["--repo", str(root / "repo"), "--scenario", walk["args"][5], "--out", str(root / "empty")]
    for span, problem in [
        (f"{shas[-1]}..{shas[-1]}", "A and B are the same commit"),
        (f"{shas[-1]}..{shas[0]}", "is not an ancestor of"),
    ]:
        done = history(root, *base, "--range", span)
        assert done.returncode == 2 and done.stdout == "", done.stderr
        assert done.stderr.startswith(f"error: --range {span}: ") and problem in done.stderr
        assert done.stderr.count("\n") == 1


def test_a_scenario_that_cannot_load_is_a_one_line_error_before_the_walk(walk: dict[str, Any]) -> None:
    root = walk["root"]
    broken = root / "broken" / "broken_scenario.py"
    broken.parent.mkdir()
    broken.write_text("from tripwire.scenario import Scenario\n\nscenario = Scenario(name='x', call='train:train'\n")
    args = ["--repo", str(root / "repo"), "--range", walk["span"], "--scenario", str(broken)]
    done = history(root, *args, "--out", str(root / "out-broken"))
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.startswith(f"error: {broken}: the scenario file raised SyntaxError: ")
    assert done.stderr.count("\n") == 1
    assert not (root / "out-broken").exists()  # nothing ran


def test_paths_that_no_commit_touches_are_refused(walk: dict[str, Any]) -> None:
    root = walk["root"]
    done = history(root, *walk["args"], "--paths", "trian.py")
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.startswith("error: --paths trian.py: no commit up to ") and done.stderr.count("\n") == 1


def test_each_row_names_what_it_was_compared_with_and_the_commits_it_skipped(
    walk: dict[str, Any], tmp_path: Path
) -> None:
    """With `--paths`, a comments-only commit after an unlisted value change carries that change: the row says so."""
    shas = walk["shas"]
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", str(walk["root"] / "repo"), str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "-b", "side", shas[2]], check=True)
    train = (repo / "train.py").read_text()
    (repo / "train.py").write_text(train.replace("lr=0.1)", "lr=0.12)"))
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", "tune: lr 0.12"], check=True)
    (repo / "notes.md").write_text("# notes\n")
    subprocess.run(["git", "-C", str(repo), "add", "notes.md"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "docs: notes only"], check=True)
    args = ["--repo", str(repo), "--range", f"{shas[2]}..side", "--scenario", walk["args"][5]]
    done = history(tmp_path, *args, "--out", str(tmp_path / "out"), "--paths", "notes.md")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads((tmp_path / "out" / "history.json").read_text())["rows"]
    assert [row["subject"] for row in rows] == ["perf: sum the features in two halves", "docs: notes only"]
    last = rows[-1]
    assert (last["step"], last["compared_with"], last["commits_between"]) == ("value change", shas[2], 1)
    assert f"docs: notes only  (vs {shas[2][:8]}, +1 commit not run)" in done.stdout
    assert f"| {shas[2][:8]}, +1 commit not run |" in (tmp_path / "out" / "history.md").read_text()


def test_bisect_all_finds_every_change_point_each_with_its_own_kind(walk: dict[str, Any]) -> None:
    done = history(walk["root"], *walk["args"], "--bisect", "all")
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads((walk["root"] / "out" / "bisect.json").read_text())["bisection"]
    points = [(finding["check"], finding["subject"].split(":")[0]) for finding in found]
    assert points == [
        ("trajectory (low-bit drift)", "perf"),  # the first: a regrouped sum
        ("trajectory (value change)", "tune"),  # the next, measured against its own predecessor
        ("syncs (new sync)", "feat"),
        ("telemetry (events)", "telemetry"),
        ("payloads (low-bit drift)", "perf"),
        ("payloads (value change)", "tune"),
        ("payloads (field)", "telemetry"),
    ]
    assert "trajectory (low-bit drift) change: " in done.stdout


def test_ctrl_c_ends_in_one_line_and_the_next_walk_resumes(walk: dict[str, Any], tmp_path: Path) -> None:
    import signal
    import time

    # the same walk, each commit made to take 3 s: the SIGINT below must reach a running commit, however fast
    slow = tmp_path / "slow_scenario.py"
    text = Path(walk["args"][5]).read_text()
    slow.write_text(SLOW_ENTRY + text.replace('call="train:train"', "call=slow_train"))
    args = [*walk["args"][:-2], "--out", str(tmp_path / "out")]
    args[args.index(walk["args"][5])] = str(slow)
    command = [sys.executable, "-m", "tripwire", "history", *args]
    process = subprocess.Popen(
        [*command, "--jobs", "1"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A shell that starts a job in the background (`nox -s tests &`) hands it SIGINT ignored, which every child
        # inherits and Python then keeps ignoring: give the walk the default disposition a terminal would.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert process.stderr is not None
    seen = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        seen.append(line)
        if line.startswith("[2/"):
            break
    time.sleep(1.0)  # the third commit's worker is running
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("interrupted: ") and "run the same command again to resume" in last
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "out" / "history.json").read_text())
    kept = sum(1 for line in seen if line.startswith("["))
    # what finished before Ctrl-C was kept, nothing else (the fix's result is the commit's before the crash)
    assert report["ran"] + report["reused"] == len(walk["shas"]) - kept and report["reused"] == 1
    assert [row["step"] for row in report["rows"]] == [kind for _, kind, _ in STEPS]  # no killed worker's crash


def test_the_fork_server_records_what_a_fresh_process_records(walk: dict[str, Any], tmp_path: Path) -> None:
    """The walk above ran every commit in a fork server's child; one commit run again in a fresh process (the
    fallback) records the same digests, syncs and events."""
    from tripwire.history.commits import list_commits
    from tripwire.history.runner import Runner, WalkSettings

    shas = walk["shas"]
    commits = list_commits(walk["root"] / "repo", f"{shas[3]}..{shas[4]}")
    settings = WalkSettings(walk["root"] / "repo", Path(walk["args"][5]), tmp_path / "fresh", fork_server=False)
    runner = Runner(settings)
    try:
        fresh = runner.result(commits[1])
    finally:
        runner.close()
    forked = walk["root"] / "out" / "results"
    [folder] = [path for path in forked.glob(f"*/{shas[4]}") if path.is_dir()]
    assert fresh.folder is not None
    assert (fresh.folder / "trajectory.json").read_bytes() == (folder / "trajectory.json").read_bytes()
    assert (fresh.folder / "payloads.json").read_bytes() == (folder / "payloads.json").read_bytes()
    recorded = {
        key: value for key, value in json.loads((folder / "result.json").read_text()).items() if key != "seconds"
    }
    again = {
        key: value for key, value in json.loads((fresh.folder / "result.json").read_text()).items() if key != "seconds"
    }
    recorded["source"].pop("root"), again["source"].pop("root")  # two worktree folders
    assert again == recorded
