"""Changed lines no scenario ran fail the gate, named at file:line in their function; comments, docstrings and moves
are no change; a reviewed exclusion excuses a line only with a reason, and only while it names real code.

Each test makes a small git repository: a base commit, a change in the working tree, and a "scenario" that runs part
of the package under coverage.py (its real tracer, in this process), then asks `check_changed_lines`.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import coverage
import pytest

from tripwire.gates.exercised import (
    ExercisedError,
    changed_lines,
    check_changed_lines,
    coverage_rows,
    fields_at_default,
    load_exclusions,
    main,
)

BASE = '''"""A trainer module."""


def scale(x, factor=2):
    """Scaled."""
    return x * factor


def sparse_reward(acc, budget):
    if acc > 1:
        raise ValueError("accuracy is a fraction")
    total = min(
        acc,
        budget,
    )
    return total
'''


def git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args], cwd=root, check=True, capture_output=True
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    package = tmp_path / "src" / "trainer"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "rewards.py").write_text(BASE, encoding="utf-8")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-q", "-m", "base")
    return tmp_path


def change(repo: Path, old: str, new: str, name: str = "rewards.py") -> None:
    path = repo / "src" / "trainer" / name
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new), encoding="utf-8")


def scenario(repo: Path, run: str = "scale") -> Path:
    """Import the package from `repo` and call `run` under coverage; returns the data file."""
    data = repo / ".coverage"
    cov = coverage.Coverage(data_file=str(data), source=[str(repo / "src")], config_file=False)
    sys.path.insert(0, str(repo / "src"))
    for name in [name for name in sys.modules if name.startswith("trainer")]:
        del sys.modules[name]
    try:
        cov.start()
        module = importlib.import_module("trainer.rewards")
        getattr(module, run)(0.5) if run == "scale" else getattr(module, run)(0.5, 1.0)
        cov.stop()
        cov.save()
    finally:
        sys.path.remove(str(repo / "src"))
        for name in [name for name in sys.modules if name.startswith("trainer")]:
            del sys.modules[name]
    return data


def test_a_changed_line_no_scenario_ran_fails_naming_its_line_and_function(repo: Path) -> None:
    change(repo, "    return total\n", "    return total * 0.5\n")
    report = check_changed_lines(repo, "HEAD", scenario(repo, "scale"), ["src"])
    assert not report.ok and report.changed == 1
    assert [(u.file, u.line, u.function, u.text) for u in report.unseen] == [
        ("src/trainer/rewards.py", 16, "sparse_reward", "return total * 0.5")
    ]
    text = report.format()
    assert "UNSEEN src/trainer/rewards.py:16 in sparse_reward  `return total * 0.5`" in text
    assert "add a scenario" in text and "[[unexercised]]" in text


def test_the_same_change_passes_once_a_scenario_runs_it(repo: Path) -> None:
    change(repo, "    return total\n", "    return total * 0.5\n")
    report = check_changed_lines(repo, "HEAD", scenario(repo, "sparse_reward"), ["src"])
    assert report.ok and report.changed == 1, report.format()


def test_a_continuation_line_is_judged_by_its_statement(repo: Path) -> None:
    change(repo, "        budget,\n    )", "        budget * 2,\n    )")
    unseen = check_changed_lines(repo, "HEAD", scenario(repo, "scale"), ["src"]).unseen
    assert [(u.line, u.text) for u in unseen] == [(14, "budget * 2,")]


def test_a_default_changed_in_a_function_no_scenario_calls_is_unseen_though_its_def_ran(repo: Path) -> None:
    """The `def` line runs at import, so coverage calls it run: its defaults are used only when the function is."""
    change(repo, "def sparse_reward(acc, budget):", "def sparse_reward(acc, budget=0.5):")
    report = check_changed_lines(repo, "HEAD", scenario(repo, "scale"), ["src"])
    assert [u.format() for u in report.unseen] == [
        "src/trainer/rewards.py:9 in sparse_reward  `def sparse_reward(acc, budget=0.5):`  (runs at import only: "
        "sparse_reward was never called)"
    ]
    assert check_changed_lines(repo, "HEAD", scenario(repo, "sparse_reward"), ["src"]).ok


def test_a_constant_only_unrun_code_reads_is_unseen_and_one_run_code_reads_is_seen(repo: Path) -> None:
    change(repo, "def sparse_reward(acc, budget):\n", "CAP = 1.0\nFACTOR = 3\n\n\ndef sparse_reward(acc, budget):\n")
    change(repo, "        budget,\n    )", "        budget,\n        CAP,\n    )")
    change(repo, "    return x * factor\n", "    return x * factor * FACTOR\n")
    report = check_changed_lines(repo, "HEAD", scenario(repo, "scale"), ["src"])
    assert [(u.text, u.why) for u in report.unseen] == [
        ("CAP = 1.0", "runs at import only: no code that ran inside a function names CAP"),
        ("CAP,", ""),  # the body line itself: not run at all
    ]
    # run the other function: CAP is read by code that ran; scale's line and FACTOR (read only by scale) are not
    unseen = check_changed_lines(repo, "HEAD", scenario(repo, "sparse_reward"), ["src"]).unseen
    assert [u.text for u in unseen] == ["return x * factor * FACTOR", "FACTOR = 3"]


def test_what_a_used_import_time_statement_reads_is_used_too(repo: Path) -> None:
    """`TABLE` is read by scale, which ran; `LIMIT` only by TABLE's value, at import: used through it."""
    change(
        repo,
        "def sparse_reward(acc, budget):\n",
        'LIMIT = 2\nTABLE = {"a": LIMIT}\n\n\ndef sparse_reward(acc, budget):\n',
    )
    change(repo, "    return x * factor\n", '    return x * factor * TABLE["a"]\n')
    report = check_changed_lines(repo, "HEAD", scenario(repo, "scale"), ["src"])
    assert report.ok and report.changed == 3, report.format()


def test_comments_docstrings_and_blank_lines_are_no_executable_change(repo: Path) -> None:
    change(repo, '    """Scaled."""\n', '    """Scaled by `factor`."""\n\n    # a note for the reader\n')
    change(repo, "    total = min(\n", "    # clipped to the budget\n    total = min(\n")
    report = check_changed_lines(repo, "HEAD", scenario(repo, "scale"), ["src"])
    assert report.ok and report.changed == 0, report.format()


def test_a_function_moved_verbatim_to_a_new_module_is_no_change(repo: Path) -> None:
    moved = BASE[BASE.index("def sparse_reward") :]
    change(repo, moved, "from trainer.sparse import sparse_reward  # moved\n")
    (repo / "src" / "trainer" / "sparse.py").write_text(f'"""Moved."""\n\n\n{moved}', encoding="utf-8")
    report = check_changed_lines(repo, "HEAD", scenario(repo, "scale"), ["src"])
    assert report.ok, report.format()  # the raise and the return never ran, but they only moved
    # what is left: the re-export line, and the new module's docstring and blank lines (no statement run or not)
    assert changed_lines(repo, "HEAD", ["src"]) == {"src/trainer/rewards.py": {9}, "src/trainer/sparse.py": {1, 2, 3}}


def test_a_moved_function_that_also_changed_is_a_change(repo: Path) -> None:
    moved = BASE[BASE.index("def sparse_reward") :]
    change(repo, moved, "from trainer.sparse import sparse_reward  # moved\n")
    edited = moved.replace("    return total\n", "    return -total\n")
    (repo / "src" / "trainer" / "sparse.py").write_text(f'"""Moved."""\n\n\n{edited}', encoding="utf-8")
    unseen = check_changed_lines(repo, "HEAD", scenario(repo, "scale"), ["src"]).unseen
    assert [(u.file, u.text) for u in unseen] == [("src/trainer/sparse.py", "return -total")]


def test_an_exclusion_excuses_with_its_reason_and_a_pattern_matches_the_statement(repo: Path) -> None:
    change(
        repo, '        raise ValueError("accuracy is a fraction")', '        raise ValueError("accuracy is in [0, 1]")'
    )
    change(repo, "    return total\n", "    return total * 0.5\n")
    listing = repo / "unexercised.toml"
    listing.write_text(
        '[[unexercised]]\npattern = "^raise "\nreason = "bad input: asserted by the unit tests"\n', encoding="utf-8"
    )
    data = scenario(repo, "scale")
    report = check_changed_lines(repo, "HEAD", data, ["src"], load_exclusions(listing, repo))
    assert [u.text for u in report.unseen] == ["return total * 0.5"]
    assert [(u.text, e.reason) for u, e in report.excused] == [
        ('raise ValueError("accuracy is in [0, 1]")', "bad input: asserted by the unit tests")
    ]
    listing.write_text(
        '[[unexercised]]\nwhere = "src/trainer/rewards.py::sparse_reward"\nreason = "only a preset runs it"\n',
        encoding="utf-8",
    )
    assert check_changed_lines(repo, "HEAD", data, ["src"], load_exclusions(listing, repo)).ok


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('where = "src/trainer/rewards.py::sparse_reward"\n', "non-empty `reason`"),
        ('where = "src/trainer/rewards.py::gone"\nreason = "x"\n', "names no function in src/trainer/rewards.py"),
        ('where = "src/trainer/old.py"\nreason = "x"\n', "names no file of the tree"),
        ('pattern = "(unclosed"\nreason = "x"\n', "is no regular expression"),
        ('wher = "src/trainer/rewards.py"\nreason = "x"\n', "needs `where`"),
    ],
)
def test_a_bad_or_stale_exclusion_is_a_one_line_error(repo: Path, entry: str, message: str) -> None:
    listing = repo / "unexercised.toml"
    listing.write_text(f"[[unexercised]]\n{entry}", encoding="utf-8")
    with pytest.raises(ExercisedError, match=message) as caught:
        load_exclusions(listing, repo)
    assert "\n" not in str(caught.value)


def test_no_coverage_data_and_an_unknown_base_are_one_line_errors(repo: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(ExercisedError, match=r"no coverage data at .* run the scenarios under coverage first"):
        check_changed_lines(repo, "HEAD", repo / "missing", ["src"])
    data = scenario(repo)
    assert main(["--data", str(data), "--against", "no-such-ref", "--root", str(repo)]) == 2
    assert "error: --against 'no-such-ref' names no commit in " in capsys.readouterr().err


def test_the_report_without_a_base_names_functions_never_entered(repo: Path) -> None:
    rows = coverage_rows(scenario(repo, "scale"), repo, ["src/trainer/rewards.py"])
    assert [(row.file, row.never_entered) for row in rows] == [("src/trainer/rewards.py", ("sparse_reward",))]
    assert 0 < rows[0].percent < 100


def test_fields_every_run_leaves_at_default_are_named() -> None:
    default = {"lr": 0.1, "gamma": 0.99, "preset": None}
    assert fields_at_default(default, [{**default, "lr": 0.2}, default]) == ["gamma", "preset"]
