"""No argument tripwire takes reaches git as an option: every entry point that hands git a ref, swept with refs shaped
like options, ends in one line (exit 2 from the command line) and leaves the victim file untouched.

`git diff --output=FILE` truncates FILE: `tripwire exercised --against '--output=../victim.txt'` did exactly that
before every git call went through `tripwire.common.git`.
"""

from __future__ import annotations

import subprocess
from functools import partial
from pathlib import Path

import coverage
import pytest

from tripwire.common.git import GitError, check_ref, git_argv, git_output, is_ancestor
from tripwire.gates import exercised
from tripwire.gates.coverage_data import ExercisedError
from tripwire.history import cli as history_cli
from tripwire.history.commits import HistoryError, list_commits
from tripwire.outside.commands import run_main
from tripwire.scenario import ScenarioError, Tree

OPTION_SHAPED = [
    "--output={victim}",
    "-o{victim}",
    "--output={victim}..HEAD",
    "-q",
    "--all",
    "-",
    "--end-of-options",
    "HEAD\n--output={victim}",
    "HEAD --output={victim}",
    "",
]
KEPT = "keep me\n"


def git(root: Path, *args: str) -> None:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args]
    subprocess.run(command, cwd=root, check=True, capture_output=True)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("git_arguments")
    (root / "src").mkdir()
    git(root, "init", "-q")
    for index in range(2):
        (root / "src" / "a.py").write_text(f"x = {index}\n\n\ndef f():\n    return x\n")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", f"c{index}")
    data = coverage.CoverageData(basename=str(root / ".coverage"))
    data.add_lines({str(root / "src" / "a.py"): [1, 4, 5]})  # imported, and f called: the changed `x` is read
    data.write()
    return root


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim.txt"
    path.write_text(KEPT)
    return path


def one_line_error(err: str) -> str:
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("shape", OPTION_SHAPED)
def test_exercised_against_never_reaches_git_as_an_option(
    repo: Path, victim: Path, capsys: pytest.CaptureFixture[str], shape: str
) -> None:
    ref = shape.format(victim=victim)
    assert exercised.main(["--data", str(repo / ".coverage"), f"--against={ref}", "--root", str(repo)]) == 2
    assert "is not a commit" in one_line_error(capsys.readouterr().err)
    with pytest.raises(ExercisedError, match="is not a commit"):
        exercised.check_changed_lines(repo, ref, repo / ".coverage", ["src"])
    assert victim.read_text() == KEPT


@pytest.mark.parametrize("shape", OPTION_SHAPED)
def test_history_range_never_reaches_git_as_an_option(
    repo: Path, victim: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], shape: str
) -> None:
    scenario = tmp_path / "scenario.py"
    scenario.write_text("from tripwire.scenario import Scenario\n\nscenario = Scenario(name='s', script='a.py')\n")
    ref = shape.format(victim=victim)
    for span in (f"{ref}..HEAD", f"HEAD~1..{ref}"):
        argv = ["--repo", str(repo), f"--range={span}", "--scenario", str(scenario), "--out", str(tmp_path / "o")]
        assert history_cli.main(argv) == 2
        one_line_error(capsys.readouterr().err)
        with pytest.raises(HistoryError):
            list_commits(repo, span)
    assert victim.read_text() == KEPT


@pytest.mark.parametrize("shape", OPTION_SHAPED)
def test_a_scenarios_ref_never_reaches_git_as_an_option(
    repo: Path, victim: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], shape: str
) -> None:
    ref = shape.format(victim=victim)
    with pytest.raises(ScenarioError, match="is not a commit"):
        Tree(repo).is_ancestor(ref)
    scenario = tmp_path / "scenario.py"
    scenario.write_text(
        "from tripwire.scenario import Adapter, Scenario\n\n"
        f"scenario = Scenario(name='s', script='src/a.py', adapters=[Adapter(when=lambda t: t.is_ancestor({ref!r}))])\n"
    )
    out = tmp_path / "out"
    assert run_main([str(scenario), "--root", str(repo), "--out", str(out), "--cpu-pin", "native"]) == 2
    assert "is not a commit" in one_line_error(capsys.readouterr().err)
    assert victim.read_text() == KEPT and not (out / "result.json").exists()


@pytest.mark.parametrize("shape", OPTION_SHAPED)
def test_the_git_layer_refuses_option_shaped_operands_and_asks_nothing(repo: Path, victim: Path, shape: str) -> None:
    ref = shape.format(victim=victim)
    with pytest.raises(GitError) as caught:
        check_ref(ref, "--against")
    assert "\n" not in str(caught.value)
    for call in (
        partial(is_ancestor, repo, ref, "HEAD"),
        partial(git_output, repo, "diff", "--stat", operands=(ref,)),
        partial(git_argv, repo, "show", "-s", operands=(ref,)),
    ):
        with pytest.raises(GitError):
            call()
    assert victim.read_text() == KEPT


def test_every_operand_follows_end_of_options_and_every_path_follows_the_separator(repo: Path) -> None:
    argv = git_argv(repo, "diff", "-U0", operands=("HEAD~1", repo / "x"), paths=["-p", "src"])
    assert argv[:3] == ["git", "-C", str(repo)]
    marker = argv.index("--end-of-options")
    assert argv[marker + 1 : marker + 3] == ["HEAD~1", str(repo / "x")] and argv[marker + 3 :] == ["--", "-p", "src"]
    with pytest.raises(GitError, match="passed as an option"):
        git_argv(repo, "diff", "HEAD")  # an operand among the options is refused, not guessed at
    with pytest.raises(GitError, match="--verify"):
        git_argv(repo, "rev-parse", operands=("HEAD",))  # rev-parse would echo --end-of-options
    assert git_output(repo, "rev-parse", "--verify", operands=("HEAD~1^{commit}",)).strip()


def test_a_real_ref_still_works_through_every_entry_point(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control: the same calls with a plain ref do their work."""
    assert exercised.main(["--data", str(repo / ".coverage"), "--against", "HEAD~1", "--root", str(repo)]) == 0
    assert "every one run by a scenario" in capsys.readouterr().out
    assert [commit.subject for commit in list_commits(repo, "HEAD~1..HEAD")] == ["c0", "c1"]
    assert Tree(repo).is_ancestor("HEAD~1") and not Tree(repo).is_ancestor("no-such-ref")
