"""Fuzzing where the gate writes and what it hands git: 1,300 inputs, in-process.

- 350 budget writes (`python -m tripwire budget write RESULT FILE`) to drawn paths: under a file, into a folder, a
  FIFO, a device, a link loop, a name too long, a NUL or a line break, `..`, `/proc`. The budget is written whole and
  loads, or the write is refused in one line and the sandbox is exactly as it was (no partial or temporary file).
- 350 output folders (`run --out`, `--values-store`, `history --out`) checked as the commands check them: a folder
  the check lets through takes a whole result; one it refuses is one line, and nothing was created.
- 400 refs drawn as text (option-shaped, with spaces, control characters, any letters): each is refused in one line
  or reaches git only after `--end-of-options`, never among the options.
- 200 of those refs through the real entry points and a real git: `exercised --against`, `history --range` and a
  scenario's `Tree.is_ancestor`; a victim file named in option-shaped refs is never touched.

Paths are drawn inside a sandbox folder per input (plus a few fixed absolute ones that cannot be written), so a
wrong verdict cannot write elsewhere. Examples are derandomized: the same inputs every run.
"""

from __future__ import annotations

import io
import os
import subprocess
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import coverage
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tripwire.common.errors import TripwireError
from tripwire.common.files import PathError, output_folder
from tripwire.common.folders import folder_prefixes
from tripwire.common.git import GitError, check_ref, git_argv
from tripwire.gates import exercised
from tripwire.history.commits import list_commits
from tripwire.outside.commands import budget_main
from tripwire.outside.result import Result, SyncSummary
from tripwire.scenario import Tree
from tripwire.sync.budget import SyncBudget

FUZZ = settings(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
PARTS = ["afile", "folder", "fifo", "null", "loop", "new", "budget.json", "folder/..", ".", "x" * 300, "a\nb"]
PARTS += ["a\x00b", "afile/.."]
PARTS += ["é", "\udcff", " ", "-", "--output=v"]
FIXED = ["/proc/nope", "/proc/nope/deeper", "/dev/null", "/dev/full"]
KEPT = "keep me\n"


def sandbox(folder: Path) -> Path:
    """A folder holding one of each thing an output path can run into."""
    folder.mkdir()
    (folder / "afile").write_text(KEPT)
    (folder / "folder").mkdir()
    os.mkfifo(folder / "fifo")
    (folder / "null").symlink_to("/dev/null")
    (folder / "loop").symlink_to(folder / "loop")
    return folder


def listing(folder: Path) -> list[tuple[str, str]]:
    """Every entry under `folder` (links not followed) with the content of the regular files."""
    entries = []
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            content = path.read_text(errors="replace") if path.is_file() and not path.is_symlink() else ""
            entries.append((str(path.relative_to(folder)), content))
    return sorted(entries)


def drawn_path(data: Any, root: Path) -> str:
    if data.draw(st.integers(0, 9)) == 0:
        return data.draw(st.sampled_from(FIXED))
    parts = data.draw(st.lists(st.sampled_from(PARTS), min_size=1, max_size=4))
    trailing = "/" if data.draw(st.booleans()) else ""
    return str(root.joinpath(*parts)) + trailing


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Result("s", "ok", syncs=SyncSummary(declared=["r"])).save(tmp_path_factory.mktemp("result") / "r")


def quiet(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        code = budget_main(argv)
    return code, err.getvalue()


def inside(root: Path, path: str) -> bool:
    real = os.path.realpath(path)
    return real == str(root) or real.startswith(str(root) + os.sep)


@settings(FUZZ, max_examples=350)
@given(data=st.data())
def test_a_budget_is_written_whole_or_refused_in_one_line_leaving_everything_as_it_was(
    result: Path, tmp_path_factory: pytest.TempPathFactory, data: Any
) -> None:
    root = sandbox(tmp_path_factory.mktemp("budget") / "box")
    before = listing(root)
    target = drawn_path(data, root)
    code, err = quiet(["write", str(result), target])
    if code == 0:
        assert inside(root, target), target  # nothing outside the sandbox can be written
        assert SyncBudget.load(Path(target)).regions == {"r": 0}
        assert [entry for entry in listing(root) if entry not in before and ".tmp" in entry[0]] == []
        return
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, (target, err)
    assert listing(root) == before, target


def test_a_refused_budget_write_removes_the_folder_it_made_on_the_way(result: Path, tmp_path: Path) -> None:
    """Found by this fuzzer unseeded: `box/folder/new/../folder` makes `box/folder/new` to reach `box/folder/folder`,
    which is then a folder, so the write is refused; the folder it made stayed behind. A write that succeeds through
    the same kind of path keeps the folder its path made."""
    root = sandbox(tmp_path / "box")
    before = listing(root)
    code, err = quiet(["write", str(result), str(root / "folder" / "folder" / ".." / "folder")])
    assert code == 2 and "Is a directory" in err and err.count("\n") == 1, err
    assert listing(root) == before
    code, _ = quiet(["write", str(result), str(root / "new" / "deeper" / ".." / "b.json")])
    assert code == 0 and (root / "new" / "b.json").is_file() and (root / "new" / "deeper").is_dir()


@settings(FUZZ, max_examples=350)
@given(data=st.data())
def test_an_output_folder_that_passes_the_check_takes_a_result_and_one_that_fails_is_one_line(
    tmp_path_factory: pytest.TempPathFactory, data: Any
) -> None:
    root = sandbox(tmp_path_factory.mktemp("out") / "box")
    before = listing(root)
    target = drawn_path(data, root)
    flag = data.draw(st.sampled_from(["--out", "--values-store", "history --out"]))
    try:
        output_folder(Path(target), flag)
    except PathError as error:
        assert "\n" not in str(error) and str(error).startswith(flag), str(error)
        assert listing(root) == before, target
        return
    assert inside(root, target), target
    Result("s", "ok", syncs=SyncSummary(declared=["r"])).save(target)  # the check's word holds: the save succeeds
    assert Result.load(target).ok


OPTION_SHAPED = st.sampled_from(["-", "--", "--output=", "-o", "--all", "--end-of-options", "-q", "--exec="])
REF_TEXT = st.text(max_size=16) | st.builds(str.__add__, OPTION_SHAPED, st.text(max_size=10))
REF_TEXT |= st.sampled_from(["HEAD", "HEAD~1", "main", "v1.0", "a..b", "HEAD^{commit}", "HEAD@{0}", "ab" * 20])


@settings(FUZZ, max_examples=400)
@given(ref=REF_TEXT)
def test_a_ref_is_refused_in_one_line_or_reaches_git_only_after_end_of_options(ref: str) -> None:
    try:
        check_ref(ref, "--against")
    except GitError as error:
        assert "\n" not in str(error) and str(error).startswith("--against ")
        assert not ref or ref[0] == "-" or any(char.isspace() or not char.isprintable() for char in ref)
        return
    argv = git_argv("/repo", "diff", "-U0", "--no-color", operands=(ref,), paths=["src"])
    marker = argv.index("--end-of-options")
    assert argv[marker + 1] == ref and argv[marker + 2 :] == ["--", "src"]
    assert all(option.startswith("-") for option in argv[4:marker]) and ref not in argv[:marker]


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args], cwd=root, check=True)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("refs_repo")
    (root / "src").mkdir()
    git(root, "init", "-q")
    for index in range(2):
        (root / "src" / "a.py").write_text(f"x = {index}\n")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", f"c{index}")
    data = coverage.CoverageData(basename=str(root / ".coverage"))
    data.add_lines({str(root / "src" / "a.py"): [1]})
    data.write()
    return root


@settings(FUZZ, max_examples=200)
@given(data=st.data())
def test_a_drawn_ref_through_every_entry_point_answers_or_is_refused_and_touches_nothing(
    repo: Path, tmp_path_factory: pytest.TempPathFactory, data: Any
) -> None:
    victim = tmp_path_factory.mktemp("victim") / "victim.txt"
    victim.write_text(KEPT)
    template = data.draw(st.sampled_from(["--output={victim}", "-o{victim}", "--output={victim}..HEAD", "{text}"]))
    ref = template.replace("{victim}", str(victim)).replace("{text}", data.draw(REF_TEXT))
    entry = data.draw(st.sampled_from(["exercised", "history", "tree"]))
    try:
        if entry == "exercised":
            exercised.check_changed_lines(repo, ref, repo / ".coverage", ["src"])
        elif entry == "history":
            list_commits(repo, f"{ref}..HEAD" if data.draw(st.booleans()) else f"HEAD~1..{ref}")
        else:
            Tree(repo).is_ancestor(ref)
    except TripwireError as error:
        assert "\n" not in str(error), str(error)
    assert victim.read_text() == KEPT, ref


def test_a_folders_prefixes_are_it_as_given_and_resolved_and_take_in_no_sibling(tmp_path: Path) -> None:
    real = tmp_path / "real" / "torch"
    real.mkdir(parents=True)
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    prefixes = folder_prefixes(str(tmp_path / "linked" / "torch"))
    assert set(prefixes) == {f"{tmp_path}/linked/torch/", f"{tmp_path}/real/torch/"}
    assert f"{tmp_path}/linked/torch/optim/adam.py".startswith(prefixes)
    assert f"{tmp_path}/real/torch/nn/modules/linear.py".startswith(prefixes)
    assert not f"{tmp_path}/real/torchvision/ops/boxes.py".startswith(prefixes)  # a sibling whose name begins alike
