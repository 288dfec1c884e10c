"""Bad files: damaged or foreign checkpoints, goldens and benchmark baselines give one line naming the file and
the fix (exit code 2 through the CLI), and nothing is overwritten (file bytes unchanged).

Already covered elsewhere, not repeated here: the checkpoint API refusing truncated files and pickled objects
and other layouts (tests/test_resume.py), a trajectory golden from another determinism context skipping with
the differing settings (tests/tripwire/gates/test_goldens.py), and tripwire.bench exiting 2 on a hand-edited
or corrupted baseline (tests/bench/test_bench_cli.py).
"""

from __future__ import annotations

import dataclasses
import io
import os
import random
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from esper.scripts import train
from esper.simic.training.config import TrainingConfig
from esper.simic.training.vectorized import run_training
from tripwire.bench import cli as bench_cli
from tripwire.bench.store import BaselineError, read_baseline
from tripwire.bitwise.trajectory import Trajectory, TrajectoryRecorder
from tripwire.common.context import capture_context, context_key
from tripwire.common.errors import GoldenFileError, SyncBudgetExceeded, TrajectoryDivergence
from tripwire.gates.goldens import GoldenStore
from tripwire.sync.counter import SyncCounter

REPO = Path(__file__).resolve().parents[2]
RUN = {"n_episodes": 1, "n_envs": 2, "max_epochs": 1, "train_samples": 50, "val_samples": 25, "batch_size": 25}
SMALL = {"hidden_dim": 16, "lstm_hidden_dim": 16, "telemetry_level": "off"}


# ---- checkpoints through the CLI: `--resume P --save P` with a bad P exits 2 and leaves P as it was ----


@pytest.fixture(scope="module")
def good_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("good") / "ck.pt"
    run_training(TrainingConfig.from_dict({**RUN, **SMALL, "save_path": str(path)}))
    return path.read_bytes()


def truncated(good: bytes) -> bytes:
    return good[: len(good) // 2]


def flipped_header(good: bytes) -> bytes:
    middle = 200  # inside the zip's first entry (the pickled structure)
    return good[:middle] + bytes(b ^ 0xFF for b in good[middle : middle + 64]) + good[middle + 64 :]


def flipped_tensor_bit(good: bytes) -> bytes:
    """One bit flipped inside the first tensor's data: torch.load alone would load it silently."""
    with zipfile.ZipFile(io.BytesIO(good)) as archive:
        member = next(i for i in archive.infolist() if "/data/" in i.filename and i.file_size > 64)
    start = member.header_offset + 30 + len(member.filename.encode()) + len(member.extra) + member.file_size // 2
    return good[:start] + bytes([good[start] ^ 0x01]) + good[start + 1 :]


def pickled_object(good: bytes, path: Path) -> bytes:
    torch.save({"format": "esper-checkpoint", "payload": Path("x")}, path)
    return path.read_bytes()


def foreign(good: bytes, path: Path) -> bytes:
    torch.save({"weights": torch.ones(3)}, path)
    return path.read_bytes()


CORRUPTIONS: dict[str, tuple[Callable[..., bytes], str]] = {
    "truncated": (truncated, "is truncated or corrupted"),
    "flipped-bytes": (flipped_header, "is truncated or corrupted"),
    "empty": (lambda good: b"", "is truncated or corrupted"),
    "garbage": (lambda good: random.Random(7).randbytes(4096), "is truncated or corrupted"),
    "flipped-tensor-bit": (flipped_tensor_bit, "checksum mismatch in archive/data/"),
}
FOREIGN: dict[str, tuple[Callable[[bytes, Path], bytes], str]] = {
    "pickled-object": (pickled_object, "weights_only loading refuses"),
    "not-esper": (foreign, "is not an esper checkpoint"),
}
LAYOUTS = {"other-env-count": ["--envs", "3"], "other-slots": ["--envs", "2", "--slots", "r0c0", "r0c1"]}


def resume_same_path(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    argv = ["ppo", "--rounds", "2", "--episode-length", "1", "--train-samples", "50", "--val-samples", "25"]
    argv += ["--batch-size", "25", "--memory-size", "16", "--telemetry-level", "off", "--quiet"]
    code = train.main([*argv, *(extra or ("--envs", "2")), "--resume", str(path), "--save", str(path)])
    return code, capsys.readouterr().err


def assert_refused_unchanged(path: Path, before: bytes, code: int, err: str, needle: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"train: error: checkpoint {path} ") and needle in lines[0], err
    assert path.read_bytes() == before, "the refused checkpoint was overwritten"
    assert [p.name for p in path.parent.iterdir()] == [path.name], "a temporary file was left behind"


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_a_damaged_checkpoint_is_refused_in_one_line_and_left_untouched(
    case: str, good_checkpoint: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    damage, needle = CORRUPTIONS[case]
    path = tmp_path / "ck.pt"
    path.write_bytes(damage(good_checkpoint))
    before = path.read_bytes()
    assert_refused_unchanged(path, before, *resume_same_path(path, capsys), needle)


@pytest.mark.parametrize("case", list(FOREIGN))
def test_a_foreign_file_given_as_checkpoint_is_refused_and_left_untouched(
    case: str, good_checkpoint: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, needle = FOREIGN[case]
    path = tmp_path / "ck.pt"
    before = make(good_checkpoint, path)
    assert_refused_unchanged(path, before, *resume_same_path(path, capsys), needle)


@pytest.mark.parametrize("case", list(LAYOUTS))
def test_a_checkpoint_of_another_layout_is_refused_and_left_untouched(
    case: str, good_checkpoint: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ck.pt"
    path.write_bytes(good_checkpoint)
    code, err = resume_same_path(path, capsys, *LAYOUTS[case])
    assert_refused_unchanged(path, good_checkpoint, code, err, "resume with the same --envs, --slots and --task")


# ---- trajectory goldens and sync budgets (consumed by pytest through GoldenStore) ----


def _trajectory() -> Trajectory:
    recorder = TrajectoryRecorder(context=capture_context("cpu"))
    recorder.record("r0/e1/env0/train", {"w": torch.ones(3)})
    return recorder.trajectory


@pytest.fixture
def golden(tmp_path: Path) -> tuple[GoldenStore, Path]:
    """A store with a valid golden for scenario 's' in this machine's determinism context."""
    GoldenStore(tmp_path, update=True).check_trajectory("s", _trajectory())
    path = tmp_path / "trajectories" / "s" / f"{context_key(capture_context('cpu'))}.json"
    assert path.is_file()
    return GoldenStore(tmp_path), path


TRAJECTORY_DAMAGE: dict[str, tuple[Callable[[str], str], str]] = {
    "truncated": (lambda text: text[: len(text) // 2], "not valid JSON"),
    "wrong-format": (lambda text: text.replace("tripwire-trajectory/2", "tripwire-trajectory/9"), "not a trajectory"),
    "bad-checkpoints": (lambda text: text.replace('"checkpoints": [', '"checkpoints": [7, '), "'checkpoints' must be"),
}


@pytest.mark.parametrize("case", list(TRAJECTORY_DAMAGE))
def test_a_damaged_trajectory_golden_fails_in_one_line_naming_the_file(
    case: str, golden: tuple[GoldenStore, Path]
) -> None:
    store, path = golden
    damage, needle = TRAJECTORY_DAMAGE[case]
    path.write_text(damage(path.read_text()))
    before = path.read_bytes()
    with pytest.raises(GoldenFileError) as caught:
        store.check_trajectory("s", _trajectory())
    message = str(caught.value)
    assert message.startswith(str(path)) and needle in message and "\n" not in message
    assert path.read_bytes() == before


def test_a_hand_edited_trajectory_digest_fails_naming_the_golden_and_checkpoint(
    golden: tuple[GoldenStore, Path],
) -> None:
    store, path = golden
    golden_digest = Trajectory.load(path).checkpoints[0][1]["w"]
    path.write_text(path.read_text().replace(golden_digest, "0" * len(golden_digest)))
    before = path.read_bytes()
    with pytest.raises(TrajectoryDivergence) as caught:
        store.check_trajectory("s", _trajectory())
    assert str(path) in str(caught.value) and "r0/e1/env0/train" in str(caught.value)
    assert path.read_bytes() == before


def test_a_binary_corrupted_trajectory_golden_fails_in_one_line_naming_the_file(
    golden: tuple[GoldenStore, Path],
) -> None:
    store, path = golden
    path.write_bytes(b"\xff\xfe\x00" + path.read_bytes()[3:])
    before = path.read_bytes()
    with pytest.raises(GoldenFileError) as caught:
        store.check_trajectory("s", _trajectory())
    assert str(caught.value).startswith(str(path)) and "\n" not in str(caught.value)
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"{not json", "not valid JSON"),
        (b'{"regions": {"train_pass": -1}}', "'regions' must map region names"),
        (b"\xff\xfe{}", "not UTF-8 text"),
    ],
)
def test_a_damaged_sync_budget_fails_in_one_line_naming_the_file(tmp_path: Path, content: bytes, needle: str) -> None:
    path = tmp_path / "sync_budgets" / "s.json"
    path.parent.mkdir()
    path.write_bytes(content)
    with pytest.raises(SyncBudgetExceeded) as caught:
        GoldenStore(tmp_path).check_sync_budget("s", SyncCounter(), {})
    message = str(caught.value)
    assert message.startswith(str(path)) and needle in message and "\n" not in message
    assert path.read_bytes() == content


# ---- benchmark baselines (tripwire.bench, exit code 2) ----


@pytest.fixture
def baseline(tmp_path: Path) -> Path:
    """A copy of the committed CPU benchmark baseline, under a baselines folder of its own."""
    path = tmp_path / "baselines" / "bench" / "cpu.json"
    path.parent.mkdir(parents=True)
    path.write_bytes((REPO / "baselines" / "bench" / "cpu.json").read_bytes())
    read_baseline(path)  # the committed baseline itself is intact
    return path


BASELINE_DAMAGE: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "truncated": (lambda raw: raw[: len(raw) // 2], "corrupted baseline, not valid JSON"),
    "hand-edited": (lambda raw: raw.replace(b'"threshold": 0.', b'"threshold": 9.', 1), "checksum mismatch"),
    "empty": (lambda raw: b"", "corrupted baseline, not valid JSON"),
    "binary": (lambda raw: b"\xff\xfe" + raw, "unreadable baseline"),
    "not-an-object": (lambda raw: b"[1, 2]", "unknown baseline format"),
}


@pytest.mark.parametrize("case", list(BASELINE_DAMAGE))
def test_a_damaged_benchmark_baseline_is_refused_in_one_line_naming_the_file(baseline: Path, case: str) -> None:
    damage, needle = BASELINE_DAMAGE[case]
    baseline.write_bytes(damage(baseline.read_bytes()))
    before = baseline.read_bytes()
    with pytest.raises(BaselineError) as caught:
        read_baseline(baseline)
    message = str(caught.value)
    assert message.startswith(str(baseline)) and needle in message and "\n" not in message
    assert baseline.read_bytes() == before


def test_a_baseline_recorded_on_another_device_is_refused_and_nothing_is_written(
    baseline: Path, tmp_path: Path
) -> None:
    before = baseline.read_bytes()
    current = dataclasses.replace(read_baseline(baseline), device="cuda")
    out = tmp_path / "out"
    with pytest.raises(BaselineError) as caught:
        bench_cli.gate(baseline, current, out)
    assert str(caught.value) == f"{baseline}: recorded on cpu, this run is on cuda"
    assert baseline.read_bytes() == before and not out.exists()


# ---- telemetry snapshots (syrupy, consumed by pytest) ----

SNAPSHOT_TEST = """
def test_counts(telemetry_counts):
    telemetry_counts.check([{"event_type": "TRAINING_STARTED", "env_id": -1}])
"""
FAST = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:benchmark")


def test_a_corrupted_telemetry_snapshot_fails_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_counts.py").write_text(SNAPSHOT_TEST)
    command = [sys.executable, "-m", "pytest", "-q", *FAST]
    env = {key: value for key, value in os.environ.items() if key != "CI"}
    assert subprocess.run([*command, "--snapshot-update"], cwd=tmp_path, env=env, capture_output=True).returncode == 0
    snapshot = tmp_path / "baselines" / "telemetry" / "test_counts" / "test_counts.json"
    snapshot.write_text(snapshot.read_text()[:20])
    before = snapshot.read_bytes()
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert snapshot.read_bytes() == before
    assert done.returncode == 1
    assert "baselines/telemetry/test_counts/test_counts.json" in done.stdout
