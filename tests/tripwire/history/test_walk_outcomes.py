"""What a walk says about itself: a walk in which no commit ran exits non-zero, a merge row of a `--first-parent`
walk counts and names the side-branch commits it brings in, and a plain `--bisect` says when `--bisect all` would find
more change points (esper-lite's walk named 231a1373 and never said that `all` finds 71069ae4)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from synthetic_repo import BASE, build, git, init, write_scenario

BROKEN = """from tripwire.scenario import Scenario

scenario = Scenario(name="broken", call="train:no_such_function")
"""


def history(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tripwire", "history", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=900, check=False)


def test_a_walk_in_which_no_commit_ran_exits_one_in_one_line(tmp_path: Path) -> None:
    shas = build(tmp_path / "repo")[:3]
    (tmp_path / "broken.py").write_text(BROKEN, encoding="utf-8")
    args = ["--repo", str(tmp_path / "repo"), "--range", f"{shas[0]}..{shas[2]}", "--scenario", "broken.py"]
    done = history(tmp_path, *args, "--out", str(tmp_path / "out"))
    assert done.returncode == 1, done.stdout[-1500:]
    line = done.stderr.strip().splitlines()[-1]  # after the progress lines
    assert line.startswith("error: no commit of the walk ran the scenario to the end (3 error)")
    assert (tmp_path / "out" / "history.json").is_file()  # the report is still written


def test_a_merge_row_counts_and_names_the_commits_it_brings_in(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    init(repo)
    (repo / "train.py").write_text(BASE, encoding="utf-8")
    git(repo, "add", "train.py")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "side")
    for step in (1, 2):
        (repo / f"notes{step}.txt").write_text(f"side {step}\n", encoding="utf-8")
        git(repo, "add", f"notes{step}.txt")
        git(repo, "commit", "-q", "-m", f"side {step}")
    side = [git(repo, "rev-parse", "HEAD~1"), git(repo, "rev-parse", "HEAD")]
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    merge = git(repo, "rev-parse", "HEAD")
    scenario = write_scenario(tmp_path / "scenarios")
    args = ["--repo", str(repo), "--range", f"{base}..{merge}", "--scenario", str(scenario), "--first-parent"]
    done = history(tmp_path, *args, "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads((tmp_path / "out" / "history.json").read_text())["rows"]
    assert len(rows) == 2 and rows[1]["commit"] == merge
    assert rows[1]["merged"] == [side[1], side[0]]
    assert f"merging 2 side-branch commits ({side[1][:8]}, {side[0][:8]})" in done.stdout


def test_a_plain_bisect_says_when_bisect_all_finds_more(tmp_path: Path) -> None:
    shas = build(tmp_path / "repo")
    scenario = write_scenario(tmp_path / "scenarios")
    args = ["--repo", str(tmp_path / "repo"), "--range", f"{shas[1]}..{shas[3]}", "--scenario", str(scenario)]
    done = history(tmp_path, *args, "--out", str(tmp_path / "out"), "--bisect")
    assert done.returncode == 0, done.stderr[-2000:]
    # shas[2] regroups a sum (drift), shas[3] changes the learning rate: the trajectory changed again after its first
    note = next(line for line in done.stdout.splitlines() if line.startswith("note:"))
    assert f"trajectory (first at {shas[2][:8]})" in note and note.endswith("--bisect all finds every change point")
