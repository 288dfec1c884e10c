"""The device pack (tests/device/pack.py) and the device command's refusals, without the network or a device."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "device"))
from pack import export_original  # noqa: E402 - tests/device is not a package
from rehearse import image_packages  # noqa: E402

sys.path.remove(str(ROOT / "tests" / "device"))


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True).stdout


def test_the_original_is_exported_at_its_commit_from_a_git_directory_or_a_checkout(tmp_path: Path) -> None:
    repo = tmp_path / "original"
    (repo / "src" / "esper").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / "src" / "esper" / "__init__.py").write_text("VERSION = 'at the commit'\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    commit = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "src" / "esper" / "__init__.py").write_text("VERSION = 'later'\n")  # not committed: not exported
    export_original(repo / ".git", commit, tmp_path / "from-git")
    assert (tmp_path / "from-git" / "src" / "esper" / "__init__.py").read_text() == "VERSION = 'at the commit'\n"
    export_original(repo, commit, tmp_path / "from-checkout")  # a checkout's .git is found
    assert (tmp_path / "from-checkout" / "src" / "esper" / "__init__.py").read_text() == "VERSION = 'at the commit'\n"


def test_a_folder_that_is_no_original_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"neither a git directory nor a checkout with src/esper; point it at one"):
        export_original(tmp_path, "11ebe0f6", tmp_path / "out")


def test_the_device_command_without_a_pack_says_how_to_make_one(tmp_path: Path) -> None:
    env = {**os.environ, "PACK": str(tmp_path / "empty"), "OUT": str(tmp_path / "out")}
    done = subprocess.run(
        ["bash", str(ROOT / "tests" / "device" / "on_device.sh")], env=env, capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"on_device.sh: no wheels in {tmp_path / 'empty'}/wheels; run 'nox -s gpu_pack' here first and carry "
        f"{tmp_path / 'empty'}"
    )
    assert not (tmp_path / "out").exists()


def test_the_image_list_pins_the_images_torch_and_torchvision() -> None:
    names, pinned = image_packages()
    assert pinned == {"torch": "2.11.0", "torchvision": "0.26.0"}
    assert {"pytest", "pytest-benchmark", "numpy", "pip"} <= names and "syrupy" not in names
