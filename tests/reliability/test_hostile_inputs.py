"""Bad outputs, busy paths, full disks and bad values: refused before any work, in one line, changing nothing.

Each case runs the real command line in a child process. A refusal must exit 2 (1 for a failure mid-run), print
exactly one `train: error: ...` line and no traceback, and leave every file that existed before it byte for byte
as it was.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from reliability_helpers import SMALL_POLICY, TINY, child_env, complete_lines

from esper.simic.training.config import TrainingConfig
from esper.simic.training.outputs import OutputPathError, claim_outputs

BASE = ("ppo", "--rounds", "1", "--envs", "1", *TINY, *SMALL_POLICY, "--quiet")
TIMEOUT_S = 300


def train(*argv: str, limit_file_size: int | None = None) -> subprocess.CompletedProcess[str]:
    def limit() -> None:  # runs in the child: a file-size limit stands in for a full disk
        if limit_file_size is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_file_size, limit_file_size))

    return subprocess.run(
        [sys.executable, "-m", "esper.scripts.train", *argv],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=TIMEOUT_S,
        preexec_fn=limit if limit_file_size is not None else None,
    )


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def assert_refused(done: subprocess.CompletedProcess[str], needle: str, code: int = 2) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    assert len(lines) == 1 and lines[0].startswith("train: error: "), lines
    assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished one-round run's checkpoint (memory size 32)."""
    path = tmp_path_factory.mktemp("ck") / "ck.pt"
    done = train(*BASE, "--save", str(path))
    assert done.returncode == 0, done.stderr
    return path


# ---- outputs: checked and claimed before any work ----


def test_save_at_a_folder_is_refused_before_training(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    done = train(*BASE, "--save", str(folder), "--telemetry-dir", str(tmp_path / "tel"))
    assert_refused(done, f"--save {folder} is a folder: pass a file path such as {folder / 'run.ckpt'}")
    assert not (tmp_path / "tel").exists() or not any((tmp_path / "tel").iterdir())  # no run folder was made


def test_save_under_a_path_whose_folder_is_a_file_is_refused_before_training(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    before = snapshot(tmp_path)
    done = train(*BASE, "--save", str(notes / "ck.pt"))
    assert_refused(done, f"--save's folder {notes} is a file, not a folder: pass a folder path")
    assert snapshot(tmp_path) == before


def test_save_over_a_file_that_is_not_a_checkpoint_is_refused_and_the_file_kept(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    before = snapshot(tmp_path)
    done = train(*BASE, "--save", str(notes))
    assert_refused(done, f"--save {notes} exists and is not an esper checkpoint: pass another path, or --overwrite")
    assert snapshot(tmp_path) == before


def test_overwrite_lets_save_replace_a_file_that_is_not_a_checkpoint(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    done = train(*BASE, "--save", str(notes), "--overwrite")
    assert done.returncode == 0, done.stderr
    assert notes.read_bytes()[:2] == b"PK"  # a torch zip archive now
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # no lock or temporary file left


def test_a_second_run_on_the_same_checkpoint_path_is_refused_at_start(tmp_path: Path) -> None:
    target = tmp_path / "ck.pt"
    config = TrainingConfig.from_dict({"save_path": str(target)})
    with claim_outputs(config):  # the first run holds the path
        done = train(*BASE, "--save", str(target))
        assert_refused(done, f"--save {target} is in use by another run")
        with pytest.raises(OutputPathError, match="in use by another run"):
            claim_outputs(config)
    assert not target.exists()
    claim_outputs(config).release()  # free again once the first run let go


def test_run_name_cannot_leave_the_telemetry_dir(tmp_path: Path) -> None:
    done = train(*BASE, "--telemetry-dir", str(tmp_path / "tel"), "--run-name", "../../x")
    assert_refused(done, "--run-name '../../x' must be a plain folder name inside --telemetry-dir")
    assert list(tmp_path.iterdir()) == []


# ---- a full disk mid-run: whole lines only, one line naming the file, a terminal event when it fits ----


def test_a_full_disk_leaves_only_whole_event_lines_and_one_error_line(tmp_path: Path) -> None:
    done = train(*BASE, "--telemetry-dir", str(tmp_path), "--run-name", "run", limit_file_size=6000)
    events = tmp_path / "run" / "events.jsonl"
    line = assert_refused(done, f"cannot write telemetry to {events} (File too large)", code=1)
    assert "free disk space (or raise the file-size limit) and --resume from the last checkpoint" in line
    lines = complete_lines(events)  # raises on a partial or unparseable line
    assert len(lines) > 0 and events.stat().st_size <= 6000


# ---- values: validated in one place, before any work ----


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (("--lr", "-1"), "argument --lr: expected > 0, got -1.0"),
        (("--batch-size", "64", "--train-samples", "8"), "--batch-size 64 is larger than --train-samples 8"),
        (("--envs", "100000"), "argument --envs: expected <= 4096, got 100000"),
        (
            ("--data-dir", "/tmp"),
            "--data-dir is read only with --dataset cifar10, npz, imagefolder or a package.module:function loader",
        ),
    ],
)
def test_bad_values_are_refused_in_one_line(argv: Sequence[str], needle: str) -> None:
    assert_refused(train(*BASE, *argv), needle)


def test_a_config_json_gamma_out_of_range_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"gamma": 5}))
    assert_refused(train(*BASE, "--config-json", str(path)), "config key 'gamma' must be <= 1, got 5")


# ---- resuming ----


def test_resume_with_another_memory_size_is_refused_in_one_line(checkpoint: Path) -> None:
    before = checkpoint.read_bytes()
    done = train(*BASE, "--resume", str(checkpoint), "--memory-size", "48")
    line = assert_refused(done, f"checkpoint {checkpoint} holds a controller of another shape or kind")
    assert "resume with the --memory-size, hidden size and controller it was saved with" in line
    assert checkpoint.read_bytes() == before


def test_resuming_a_finished_run_says_there_is_nothing_to_do(checkpoint: Path) -> None:
    done = train(*BASE, "--resume", str(checkpoint))
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == (
        f"train: nothing to do: checkpoint {checkpoint} already holds 1 round(s) and --rounds is 1: "
        "raise --rounds to train further"
    )
