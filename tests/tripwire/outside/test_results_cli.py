"""`python -m tripwire run | compare | budget` end to end, as a user outside pytest runs them.

Two copies of the CleanRL-shaped loop (tests/tripwire/loops) in two folders: the second carries an injected
`.item()`. Each command runs in its own process; messages must name tripwire's commands, never pytest flags.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

LOOPS = Path(__file__).parents[1] / "loops"
SCENARIO = LOOPS / "ppo_script_scenario.py"
BEFORE = "                entropy_loss = entropy.mean()\n"
INJECTED = (BEFORE, BEFORE + "                kl_seen = approx_kl.item()\n")


def tripwire(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tripwire", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600, check=False, env=env)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli")
    text = (LOOPS / "ppo_script.py").read_text()
    for name, source in (("base", text), ("head", text.replace(*INJECTED))):
        (root / name / "checkout").mkdir(parents=True)
        (root / name / "checkout" / "ppo_script.py").write_text(source)
        done = tripwire("run", str(SCENARIO), "--root", f"{name}/checkout", "--out", f"results/{name}", cwd=root)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.startswith("ppo-script: ok in ")
    return root


def test_compare_exits_1_and_names_the_new_line(results: Path) -> None:
    done = tripwire("compare", "results/base", "results/head", cwd=results)
    assert done.returncode == 1
    assert "syncs       differs  +24 syncs; NEW   '<outside>' ppo_script.py:" in done.stdout
    assert done.stdout.rstrip().endswith("DIFFERENT: see the checks above")
    same = tripwire("compare", "results/base", "results/base", "--brief", cwd=results)
    assert same.returncode == 0 and same.stdout.rstrip().endswith("identical")


def test_a_per_iteration_budget_is_written_and_fails_naming_the_line_and_the_command(results: Path) -> None:
    written = tripwire("budget", "write", "results/base", "budget.json", "--per-iteration", cwd=results)
    assert written.returncode == 0 and "per iteration" in written.stdout
    ok = tripwire("budget", "check", "results/base", "budget.json", cwd=results)
    assert ok.returncode == 0 and ok.stdout.startswith("sync budget ok")
    over = tripwire("budget", "check", "results/head", "budget.json", cwd=results)
    assert over.returncode == 1
    lines = over.stdout.splitlines()
    assert "region '<outside>' per iteration: budget 206 per iteration, exceeded in #0 214, #1 214" in over.stdout
    assert any(
        line.strip().startswith("NEW ppo_script.py:") and "`kl_seen = approx_kl.item()`" in line for line in lines
    )
    assert "python -m tripwire budget write results/head budget.json --per-iteration" in over.stdout
    assert "pytest" not in over.stdout


def test_budgets_are_never_rewritten_under_ci(results: Path) -> None:
    done = tripwire("budget", "write", "results/head", "budget.json", cwd=results, env={"CI": "true", "PATH": ""})
    assert done.returncode == 2 and "budgets are never rewritten in CI" in done.stderr


def test_outside_pytest_a_budget_message_names_tripwires_command(tmp_path: Path) -> None:
    probe = (
        "from tripwire.sync.budget import SyncBudget, check_budget\n"
        "print(check_budget({'update': 2}, SyncBudget(regions={'update': 1})).format())\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert "regenerate with `python -m tripwire budget write RESULT FILE" in done.stdout
    assert "pytest" not in done.stdout


def test_bad_input_is_one_line_naming_the_problem(tmp_path: Path) -> None:
    missing = tripwire("run", "nowhere.py", "--out", "r", cwd=tmp_path)
    assert missing.returncode == 2
    assert (
        missing.stderr.strip()
        == "error: nowhere.py: no such scenario file (write one defining `scenario = Scenario(...)`)"
    )
    no_result = tripwire("compare", "a", "b", cwd=tmp_path)
    assert no_result.returncode == 2 and len(no_result.stderr.strip().splitlines()) == 1
    assert "no tripwire result here (record one with `python -m tripwire run`)" in no_result.stderr
