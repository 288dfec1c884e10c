"""A walk reuses a result only for a commit that changed nothing the run read, and names the classification a walk
that runs every commit names.

The repository (reuse_repo.py) changes a README and a file nothing imports (reused), a module the loop imports and a
data file it opens (run), adds a package beside an imported module (run: the folder listing is part of what was
read), and has the loop start a process (never reused from). The closure recorder itself is tested on its own below.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from reuse_repo import SCENARIO, STEPS, build

from tripwire.common.closure import Closure
from tripwire.history.reuse import Reuse
from tripwire.scenario import Tree


def walk(root: Path, out: str, *extra: str) -> dict[str, Any]:
    shas = json.loads((root / "shas.json").read_text())
    command = [sys.executable, "-m", "tripwire", "history", "--repo", str(root / "repo")]
    command += ["--range", f"{shas[0]}..{shas[-1]}", "--scenario", str(root / "scenario.py"), "--out", str(root / out)]
    done = subprocess.run([*command, *extra], cwd=root, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return {"report": json.loads((root / out / "history.json").read_text()), "stdout": done.stdout}


@pytest.fixture(scope="module")
def walks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("reuse")
    shas = build(root / "repo")
    (root / "shas.json").write_text(json.dumps(shas))
    (root / "scenario.py").write_text(SCENARIO)
    return {
        "root": root,
        "shas": shas,
        "reused": walk(root, "out", "--jobs", "2"),
        "plain": walk(root, "out-plain", "--jobs", "2", "--no-reuse"),
    }


def test_only_commits_that_changed_nothing_the_run_read_are_reused(walks: dict[str, Any]) -> None:
    shas, rows = walks["shas"], walks["reused"]["report"]["rows"]
    expected = [shas[source] if source is not None else "" for _, _, source, _ in STEPS]
    assert [row["reused_from"] for row in rows] == expected
    assert walks["reused"]["report"]["reused"] == sum(1 for source in expected if source)
    assert walks["reused"]["report"]["ran"] == len(shas) - walks["reused"]["report"]["reused"]
    assert "(result of " in (walks["root"] / "out" / "history.md").read_text()


def test_the_walk_names_what_a_walk_that_runs_every_commit_names(walks: dict[str, Any]) -> None:
    reused = [row["step"] for row in walks["reused"]["report"]["rows"]]
    plain = [row["step"] for row in walks["plain"]["report"]["rows"]]
    assert reused == plain == [kind for _, _, _, kind in STEPS]
    assert walks["plain"]["report"]["reused"] == 0


def test_a_reused_result_is_the_result_running_the_commit_records(walks: dict[str, Any]) -> None:
    root, shas = walks["root"], walks["shas"]
    for index, (_, _, source, _) in enumerate(STEPS):
        if source is None:
            continue
        [reused] = (root / "out" / "results").glob(f"*/{shas[index]}")
        [ran] = (root / "out-plain" / "results").glob(f"*/{shas[index]}")
        assert (reused / "trajectory.json").read_bytes() == (ran / "trajectory.json").read_bytes()
        data = json.loads((reused / "result.json").read_text())
        assert data["source"]["commit"] == shas[index] and data["source"]["reused_from"] == shas[source]
        assert not (reused / "closure.json").exists()  # a copy teaches nothing new


def test_the_closure_names_what_was_read_and_why_a_run_is_not_reused(walks: dict[str, Any]) -> None:
    root, shas = walks["root"], walks["shas"]
    [base] = (root / "out" / "results").glob(f"*/{shas[0]}")
    closure = json.loads((base / "closure.json").read_text())
    assert {"train.py", "helpers.py", "scale.txt"} <= set(closure["files"])
    assert "README.md" not in closure["files"] and "tools/unused.py" not in closure["files"]
    assert "." in closure["dirs"] and closure["open"] == []
    [spawn] = (root / "out" / "results").glob(f"*/{shas[7]}")
    assert "another process (subprocess.Popen)" in json.loads((spawn / "closure.json").read_text())["open"][0]


def test_without_folder_listings_the_shadowing_package_would_be_reused(walks: dict[str, Any]) -> None:
    """The hazard the listings guard against: drop them from the base's closure, and the commit that adds a
    `helpers` package (a value change) would take the previous commit's result."""
    root, shas = walks["root"], walks["shas"]
    [data] = (root / "out" / "results").glob(f"*/{shas[4]}")
    closure = json.loads((data / "closure.json").read_text())
    reuse = Reuse(root / "repo")
    reuse.learn(shas[4], data / "closure.json")
    assert reuse.find(shas[5]) is None
    blind = root / "blind.json"
    blind.write_text(json.dumps({**closure, "dirs": []}))
    reuse = Reuse(root / "repo")
    reuse.learn(shas[4], blind)
    assert reuse.find(shas[5]) == shas[4]


def test_a_second_walk_reuses_nothing_new_and_runs_nothing(walks: dict[str, Any]) -> None:
    again = walk(walks["root"], "out", "--jobs", "2")["report"]
    assert again["ran"] == 0 and again["reused"] == 0
    assert [row["reused_from"] for row in again["rows"]] == [
        row["reused_from"] for row in walks["reused"]["report"]["rows"]
    ]


def test_the_recorder_sees_opens_bytecode_listings_and_the_scenarios_questions(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "pkg" / "__pycache__").mkdir(parents=True)
    (tree / "data.txt").write_text("1")
    (tree / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"")
    outside = tmp_path / "outside.txt"
    outside.write_text("x")
    with Closure(tree) as closure:
        (tree / "data.txt").read_text()
        outside.read_text()
        open(tree / "pkg" / "__pycache__" / "mod.cpython-311.pyc", "rb").close()
        os.listdir(tree / "pkg")
        Tree(tree).has("missing/file.py")
    assert closure.files == {"data.txt", "pkg/mod.py"}
    assert closure.dirs == {"pkg"} and closure.exists == {"missing/file.py"} and closure.open == []
    with Closure(tree) as closure:
        assert Tree(tree, "abc").commit == "abc"
        subprocess.run(["true"], check=True)
    assert len(closure.open) == 2 and "Tree.commit" in closure.open[0]
    (tree / "late.txt").write_text("y")  # nothing is recorded outside a closure
    (tree / "late.txt").read_text()
    assert "late.txt" not in closure.files


def test_a_pooled_worktree_holds_exactly_the_next_commits_files(walks: dict[str, Any], tmp_path: Path) -> None:
    """A worktree goes back to the pool after a commit; whatever that run wrote, changed or left there is gone when
    the next commit checks itself out in it."""
    from tripwire.common.git import git_output as git
    from tripwire.history.commits import Commit, Worktrees

    shas, repo = walks["shas"], walks["root"] / "repo"
    trees = Worktrees(repo, tmp_path / "trees")
    try:
        tree = trees.add(Commit(shas[3], ""))
        (tree / "helpers.py").write_text("broken = True\n")  # a run that rewrote a tracked file
        (tree / "__pycache__").mkdir()
        (tree / "__pycache__" / "helpers.cpython-311.pyc").write_bytes(b"stale")
        (tree / "events.jsonl").write_text("{}\n")
        trees.remove(tree)
        again = trees.add(Commit(shas[5], ""))
        assert again == tree  # the same folder, checked out again
        assert git(again, "rev-parse", "--verify", operands=("HEAD",)).strip() == shas[5]
        assert git(again, "status", "--porcelain", "--ignored").strip() == ""
        assert (again / "helpers" / "__init__.py").exists() and "** 2" not in (again / "helpers.py").read_text()
        trees.remove(again)
    finally:
        trees.close()
    assert not any((tmp_path / "trees").iterdir())
