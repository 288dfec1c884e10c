"""Run surfaces of issue 27: damaged per-rank event lines, control characters in arguments, checkpoint writes that
hit a size or disk limit, resuming on other data, user code that stops a run, and the start-up memory estimate.

Each ends in one line on stderr with the documented exit code and loses nothing it did not have to.
"""

from __future__ import annotations

import errno
import io
import json
import os
import resource
import signal
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from reliability_helpers import SMALL_POLICY, TINY, child_env, complete_lines

from esper import host_memory
from esper.nissa.event_schema import validate_line
from esper.nissa.merge import main as merge_main
from esper.nissa.merge import merge_run_dir, rank_file_name
from esper.scripts import train
from esper.simic.training import checkpoint as checkpoint_module
from esper.simic.training import memory, wiring
from esper.simic.training.checkpoint import (
    CheckpointError,
    CheckpointLayout,
    CheckpointWriteError,
    check_data_signature,
    save_checkpoint,
)
from esper.simic.training.config import ConfigError, TrainingConfig

REPO = Path(__file__).resolve().parents[2]
SYNTHETIC = ("ppo", "--task", "cifar_baseline", "--envs", "2", *TINY, *SMALL_POLICY, "--quiet")


def cli(*argv: str, preexec: Any = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "esper.scripts.train", *argv],
        capture_output=True,
        text=True,
        env=env or child_env(),
        preexec_fn=preexec,
        timeout=300,
        check=False,
    )


_IN_ONE_PROCESS = """
import contextlib, io, json, sys
from esper.scripts.train import main
done = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else 1
    done.append([code, err.getvalue()])
print(json.dumps(done))
"""


def cli_runs(*runs: list[str]) -> list[subprocess.CompletedProcess[str]]:
    """Each argv run through the CLI's `main` in turn, in one real process: torch is imported once for all of them
    (for the argument checks, which end before anything trains)."""
    done = subprocess.run(
        [sys.executable, "-c", _IN_ONE_PROCESS, json.dumps(runs)],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=300,
        check=True,
    )
    results = json.loads(done.stdout)
    return [subprocess.CompletedProcess(argv, code, "", err) for argv, (code, err) in zip(runs, results, strict=True)]


def one_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    lines = result.stderr.splitlines()
    assert result.returncode == code and len(lines) == 1, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr
    return lines[0]


# ---- 1. per-rank event files with damaged lines: every good line merged, the drop reported and recorded ----


def event(kind: str, rank: int, order: tuple[int, ...], env_id: int = -1, **data: Any) -> dict[str, Any]:
    return {"event_type": kind, "env_id": env_id, "rank": rank, "order": list(order), "data": data}


def ended(rank: int) -> dict[str, Any]:
    data = {"outcome": "completed", "rounds_completed": 1, "discarded_round": None, "stopped_after_epoch": None}
    return event("TRAINING_ENDED", rank, (1, 0, 7, -1, 0), **data, cause=None)


def line(e: dict[str, Any]) -> bytes:
    return (json.dumps(e) + "\n").encode()


def test_damaged_rank_lines_are_dropped_and_named_and_every_good_line_is_merged(tmp_path: Path) -> None:
    rank0 = [event("TRAINING_STARTED", 0, (-1, 0, 0, -1, 0)), event("EPOCH_COMPLETED", 0, (0, 1, 4, 0, 0), 0)]
    rank1 = [event("TRAINING_STARTED", 1, (-1, 0, 0, -1, 0)), event("EPOCH_COMPLETED", 1, (0, 1, 4, 1, 0), 1)]
    (tmp_path / rank_file_name(0)).write_bytes(b"".join(map(line, [*rank0, ended(0)])))
    damaged = [
        line(rank1[0]),
        b'{"event_type": "EPOCH_\xff\xfeCOMPLETED"}\n',  # invalid UTF-8
        line(rank1[1]),
        b'{"event_type": "EPOCH_COMPLETED", "env_id": 1, "ord\n',  # truncated JSON
        b'{"hello": "not an event"}\n',  # JSON, but not a per-rank event
        line(ended(1)),
        b'{"event_type": "TRAIN',  # cut short at the end, no newline
    ]
    (tmp_path / rank_file_name(1)).write_bytes(b"".join(damaged))
    warnings: list[str] = []
    result = merge_run_dir(tmp_path, warn=warnings.append)
    merged = [json.loads(text) for text in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [(e["event_type"], e["env_id"]) for e in merged] == [
        ("TRAINING_STARTED", -1),
        ("EPOCH_COMPLETED", 0),
        ("EPOCH_COMPLETED", 1),
        ("TRAINING_ENDED", -1),
    ]
    end = merged[-1]["data"]
    assert end["dropped_lines"] == 4 and result.outcome == "completed"
    assert end["dropped_from"] == [
        "events.rank1.jsonl:2 (invalid UTF-8)",
        "events.rank1.jsonl:4 (not JSON: Invalid control character at column 52)",
        "events.rank1.jsonl:5 (not a per-rank event)",
        "events.rank1.jsonl:7 (cut short)",
    ]
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert warnings[0].startswith("dropped 4 damaged line(s) while merging into ")
    assert "events.rank1.jsonl:2 (invalid UTF-8)" in warnings[0]


def test_the_merge_command_reports_dropped_lines_in_one_line_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / rank_file_name(0)).write_bytes(line(ended(0)) + b"\xc3\x28\n")
    assert merge_main([str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("merge: warning: dropped 1 damaged line(s)")
    assert "events.rank0.jsonl:2 (invalid UTF-8)" in captured.err


DAMAGE_BEFORE_MERGE = """
import json, sys
from pathlib import Path
from esper.simic.training import run_telemetry
from esper.scripts import train

original = run_telemetry.merge_run_dir


def damage_then_merge(folder, **kwargs):
    rank1 = Path(folder) / "events.rank1.jsonl"
    lines = rank1.read_bytes().splitlines(keepends=True)
    middle = len(lines) // 2
    Path(sys.argv[1]).write_text(json.dumps({"line": middle + 1, "event": json.loads(lines[middle])}))
    lines[middle] = lines[middle][:10] + b"\\xff" + lines[middle][11:]
    rank1.write_bytes(b"".join(lines))
    return original(folder, **kwargs)


run_telemetry.merge_run_dir = damage_then_merge
sys.exit(train.main(sys.argv[2:]))
"""


def test_a_real_two_rank_run_whose_rank1_file_is_damaged_before_its_merge_keeps_every_good_line(
    tmp_path: Path,
) -> None:
    """A 2-rank torchrun; rank 0 damages a line of rank 1's file (bad UTF-8) just before the run's own merge."""
    script = tmp_path / "damaging_train.py"
    script.write_text(DAMAGE_BEFORE_MERGE)
    telemetry, record = tmp_path / "telemetry", tmp_path / "damaged.json"
    argv = [*SYNTHETIC, "--rounds", "1", "--telemetry-dir", str(telemetry), "--run-name", "ranked"]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    done = subprocess.run(
        [*command, str(script), str(record), *argv],
        capture_output=True,
        text=True,
        env={**child_env(), "PYTHONHASHSEED": "0"},
        cwd=REPO,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    damaged = json.loads(record.read_text())
    warnings = [text for text in done.stderr.splitlines() if "damaged line" in text]
    assert len(warnings) == 1 and f"events.rank1.jsonl:{damaged['line']} (invalid UTF-8)" in warnings[0], done.stderr
    folder = telemetry / "ranked"
    merged = complete_lines(folder / "events.jsonl")
    for raw in (folder / "events.jsonl").read_text().splitlines():
        validate_line(raw)
    assert merged[-1]["event_type"] == "TRAINING_ENDED" and merged[-1]["data"]["outcome"] == "completed"
    assert merged[-1]["data"]["dropped_lines"] == 1
    # every other line of both ranks is merged: re-merging the files with the damaged line restored loses nothing
    rank1 = folder / rank_file_name(1)
    lines = rank1.read_bytes().splitlines(keepends=True)
    lines[damaged["line"] - 1] = (json.dumps(damaged["event"]) + "\n").encode()
    rank1.write_bytes(b"".join(lines))
    merge_run_dir(folder, warn=None)
    clean = complete_lines(folder / "events.jsonl")
    kept = {e["event_id"] for e in merged}
    lost = [e for e in clean if e["event_id"] not in kept]
    assert all(e["event_id"] == damaged["event"]["event_id"] for e in lost) and len(merged) == len(clean) - len(lost)
    assert "dropped_lines" not in clean[-1]["data"]


# ---- 2. control characters in arguments: escaped, the message stays one line ----


@pytest.mark.parametrize("char", ["\n", "\r", "\t", "\x1b"], ids=["newline", "return", "tab", "esc"])
def test_control_characters_in_path_arguments_keep_the_error_on_one_line(tmp_path: Path, char: str) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    folder = tmp_path / f"a{char}folder"
    folder.mkdir()
    cases = {
        "--telemetry-dir": str(blocker / f"a{char}b"),
        "--save": str(folder),  # a folder, not a file
        "--resume": str(tmp_path / f"missing{char}.pt"),
        "--config-json": str(tmp_path / f"missing{char}.json"),
    }
    runs = [[*SYNTHETIC, "--rounds", "1", flag, value] for flag, value in cases.items()]
    for flag, result in zip(cases, cli_runs(*runs)):
        message = one_line(result, 2)
        assert message.startswith("train: error: ") and repr(char)[1:-1] in message, (flag, message)
        assert char not in message


# ---- 3. checkpoint writes that hit a file-size or disk limit: one line, exit 1, the earlier checkpoint intact ----


def _small_file_limit(limit: int) -> Any:
    def preexec() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # Python then gets OSError(EFBIG) instead of dying
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return preexec


def test_a_resumed_save_over_the_file_size_limit_ends_in_one_line_and_keeps_the_checkpoint(tmp_path: Path) -> None:
    ck = tmp_path / "ck.pt"
    assert cli(*SYNTHETIC, "--rounds", "1", "--save", str(ck)).returncode == 0
    before = ck.read_bytes()
    resumed = cli(*SYNTHETIC, "--rounds", "2", "--resume", str(ck), "--save", str(ck), preexec=_small_file_limit(4096))
    message = one_line(resumed, 1)
    assert message.startswith(f"train: error: cannot write checkpoint {ck}: File too large (EFBIG)")
    assert "is unchanged" in message and "ulimit -f" in message
    assert ck.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck.pt"]  # no temp file left (the lock is removed)


def test_a_full_disk_during_a_save_is_one_line_and_keeps_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ck = tmp_path / "ck.pt"
    layout = CheckpointLayout(1, ("r0c0",), "cifar_baseline", "ppo")
    save_checkpoint(ck, layout=layout, rounds_completed=1, state={"x": torch.ones(3)})
    before = ck.read_bytes()

    save = torch.save

    def full_disk(obj: Any, handle: Any) -> None:
        if isinstance(handle, io.BytesIO):  # the state's host copy, in memory (`checkpoint_digest.host_copy`)
            return save(obj, handle)
        handle.write(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(checkpoint_module.torch, "save", full_disk)
    with pytest.raises(CheckpointWriteError) as caught:
        save_checkpoint(ck, layout=layout, rounds_completed=2, state={"x": torch.ones(3)})
    message = str(caught.value)
    assert message == (
        f"cannot write checkpoint {ck}: No space left on device (ENOSPC); the previous checkpoint {ck} is unchanged: "
        "free space on that disk or --save to another disk"
    )
    assert ck.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["ck.pt"]
    assert CheckpointWriteError in train._run_failures()


# ---- 4. resuming on other data: refused in one line naming each differing field ----


def test_resuming_on_a_dataset_of_another_shape_is_refused_naming_each_field(tmp_path: Path) -> None:
    ck = tmp_path / "ck.pt"
    assert cli(*SYNTHETIC, "--rounds", "1", "--save", str(ck)).returncode == 0
    before = ck.read_bytes()
    rng = np.random.default_rng(0)
    archive = tmp_path / "small.npz"
    x, y = rng.normal(size=(200, 8, 8)).astype(np.float32), rng.integers(0, 4, 200)
    np.savez(archive, x_train=x, y_train=y, x_val=x[:50], y_val=y[:50])
    other = ("--dataset", "npz", "--data-dir", str(archive))
    message = one_line(cli(*SYNTHETIC, "--rounds", "2", "--resume", str(ck), "--save", str(ck), *other), 2)
    assert message == (
        f"train: error: checkpoint {ck} was trained on other data: dataset 'synthetic' (checkpoint) vs 'npz' (this "
        "run); image channels 3 (checkpoint) vs 1 (this run); image size 32 (checkpoint) vs 8 (this run); classes 10 "
        "(checkpoint) vs 4 (this run): resume with the --dataset (and --data-dir) it was saved with, or start "
        "without --resume"
    )
    assert ck.read_bytes() == before
    same = cli(*SYNTHETIC, "--rounds", "2", "--resume", str(ck))
    assert same.returncode == 0 and same.stderr == "", same.stderr
    payload = torch.load(ck, weights_only=True)
    assert payload["state"].pop("data") == {"dataset": "synthetic", "channels": 3, "image_size": 32, "classes": 10}
    assert payload.pop("digest").startswith("sha256:")
    old_checkpoint = tmp_path / "old.pt"
    torch.save(payload, old_checkpoint)  # as written before data signatures (and digests) were recorded
    note = one_line(cli(*SYNTHETIC, "--rounds", "2", "--resume", str(old_checkpoint)), 0)
    assert note == (
        f"train: note: checkpoint {old_checkpoint} records no digest and no data signature (written by an older "
        "esper): resuming without checking that its content is what --save wrote (silent corruption), nor that it "
        "was trained on this dataset, image shape and class count"
    )


def test_an_old_checkpoint_without_a_data_signature_is_accepted_with_a_note() -> None:
    note = check_data_signature("old.pt", None, {"dataset": "synthetic"})
    assert note is not None and "records no data signature" in note and "\n" not in note
    assert check_data_signature("ck.pt", {"dataset": "synthetic"}, {"dataset": "synthetic"}) is None
    with pytest.raises(CheckpointError, match=r"dataset 'a' \(checkpoint\) vs 'b' \(this run\)"):
        check_data_signature("ck.pt", {"dataset": "a"}, {"dataset": "b"})


# ---- 5. user code that stops a run ----


def test_a_loader_calling_sys_exit_0_is_a_one_line_user_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "exiting_loader.py").write_text("import sys\n\ndef load(**kwargs):\n    sys.exit(0)\n")
    env = {**child_env(), "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    result = cli(*SYNTHETIC, "--rounds", "1", "--dataset", "exiting_loader:load", env=env)
    message = one_line(result, 2)
    assert message.startswith("train: error: --dataset exiting_loader:load ") and "SystemExit" in message


def test_a_system_exit_escaping_data_loading_is_converted_in_wiring(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defence in depth at the call site: whatever the loader layer lets through, a SystemExit never ends a run."""

    def exiting(*args: Any, **kwargs: Any) -> Any:
        raise SystemExit(0)

    monkeypatch.setattr(wiring, "load_task_data", exiting)
    config = TrainingConfig.from_dict({"dataset": "pkg.mod:load", "n_envs": 1})
    with pytest.raises(wiring.UserCodeError) as caught:
        wiring.batch_source(config, wiring.get_task_spec("cifar_baseline"), "train", [torch.device("cpu")])
    assert str(caught.value) == (
        "--dataset pkg.mod:load: the loader pkg.mod:load called sys.exit(0) while loading the train split: a loader "
        "must return an ImageDataset or raise an exception; remove the exit call"
    )
    assert wiring.UserCodeError in train._user_errors()


def test_a_user_error_after_telemetry_opened_ends_the_events_with_a_failed_training_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ConfigError("--widths 0 is not a valid host width: use a positive width")

    monkeypatch.setattr(wiring, "trainer_parts", refuse)
    telemetry = tmp_path / "telemetry"
    argv = [*SYNTHETIC, "--rounds", "1", "--telemetry-dir", str(telemetry), "--run-name", "r"]
    assert train.main(argv) == 2
    assert capsys.readouterr().err == "train: error: --widths 0 is not a valid host width: use a positive width\n"
    events = complete_lines(telemetry / "r" / "events.jsonl")
    assert [e["event_type"] for e in events] == ["TRAINING_STARTED", "TRAINING_ENDED"]
    assert events[-1]["data"]["outcome"] == "failed"
    assert events[-1]["data"]["cause"] == "ConfigError: --widths 0 is not a valid host width: use a positive width"


# ---- 6. the start-up memory estimate ----


def test_a_run_too_large_for_memory_is_refused_in_one_line_before_allocating() -> None:
    result = cli("ppo", "--envs", "4096", "--episode-length", "1000000000", "--quiet")
    message = one_line(result, 2)
    assert message.startswith("train: error: this run needs at least ")
    assert "rollout buffer" in message and "a lower-bound estimate" in message and " is available: " in message
    assert message.endswith("lower --envs, --episode-length, --train-samples or --val-samples")


def test_the_address_space_limit_is_memory_the_estimate_counts(tmp_path: Path) -> None:
    """Under `ulimit -v 6 GiB`, 300,000 synthetic training images (3.4 GiB) fit the machine's free memory but not
    the process: refused in one line naming the limit, before the allocator would fail with a traceback."""
    import resource
    import subprocess
    import sys

    limit = 6 * 2**30
    argv = [sys.executable, "-m", "esper.scripts.train", "heuristic", "--rounds", "1", "--envs", "1"]
    result = subprocess.run(
        [*argv, "--train-samples", "300000", "--quiet"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        check=False,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
    )
    message = one_line(result, 2)
    assert message.startswith("train: error: this run needs at least 3.4 GiB of memory (")
    machine = host_memory.machine_available()
    if machine is not None and machine > 4 * 2**30:  # on a machine with less free, that alone refuses it
        assert "under this process's address-space limit (ulimit -v)" in message


def test_an_npz_archive_counts_what_loading_it_copies(tmp_path: Path) -> None:
    """From the headers alone: every member as read (each split reads them all), plus two float32 copies of the
    train images while a split converts (scaled, then normalized), or the float32 images both splits keep."""
    archive = tmp_path / "d.npz"
    x_train = np.zeros((40, 8, 8, 3), dtype=np.uint8)
    np.savez(archive, x_train=x_train, y_train=np.arange(40) % 2, x_val=x_train[:10], y_val=np.arange(10) % 2)
    read = sum(info.file_size for info in zipfile.ZipFile(archive).infolist())
    config = TrainingConfig.from_dict(
        {
            "dataset": "npz",
            "data_dir": str(archive),
            "n_envs": 1,
            "train_samples": 40,
            "val_samples": 10,
            "batch_size": 10,
        }
    )
    task = wiring.get_task_spec("cifar_baseline")
    parts = memory.memory_estimate(config, "ppo", task, wiring.SlotConfig(tuple(config.slots)), 1)
    assert parts["data"] == read + 2 * 4 * x_train.size
    assert (
        memory.memory_estimate(
            TrainingConfig.from_dict({**config.to_dict(), "data_dir": str(tmp_path / "missing.npz")}),
            "ppo",
            task,
            wiring.SlotConfig(tuple(config.slots)),
            1,
        )["data"]
        == 0
    )  # unreadable headers: loading says why


def test_an_npz_whose_loading_would_not_fit_the_address_space_is_refused_before_reading(tmp_path: Path) -> None:
    """A 600 MB uint8 train member (compressed to a few hundred kB) becomes 2.4 GB of float32 twice over while it
    converts: under `ulimit -v 6 GiB` that is refused in one line before a byte is decompressed (it used to end in
    an allocator traceback mid-load)."""
    archive = tmp_path / "big.npz"
    x_train = np.zeros((200_000, 3, 32, 32), dtype=np.uint8)
    np.savez_compressed(
        archive, x_train=x_train, y_train=np.arange(200_000) % 2, x_val=x_train[:10], y_val=np.arange(10) % 2
    )
    del x_train
    limit = 6 * 2**30
    result = cli(
        "heuristic", "--dataset", "npz", "--data-dir", str(archive), "--rounds", "1", "--envs", "1", *TINY, "--quiet",
        preexec=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
    )  # fmt: skip
    message = one_line(result, 2)
    assert message.startswith("train: error: this run needs at least "), message
    assert "data 5." in message and "a lower-bound estimate" in message, message


def test_the_estimate_is_a_lower_bound_of_a_tiny_run_and_refuses_when_memory_is_short() -> None:
    config = TrainingConfig.from_dict({"n_envs": 2, "max_epochs": 3, "train_samples": 100, "val_samples": 50})
    task = wiring.get_task_spec("cifar_baseline")
    slots = wiring.SlotConfig(tuple(config.slots))
    parts = memory.memory_estimate(config, "ppo", task, slots, 2)
    assert parts["data"] == 4 * 3 * 32 * 32 * 150 * 2 and 0 < parts["rollout buffer"] < 2**20
    memory.check_memory(config, "ppo", task, slots, torch.device("cpu"), 2)  # a tiny run fits
    with pytest.raises(ConfigError, match=r"needs at least .* but 1.0 KiB is available"):
        memory.check_memory(config, "ppo", task, slots, torch.device("cpu"), 2, available=1024)


def test_escape_writes_control_characters_as_repr_does_and_keeps_printable_text() -> None:
    from esper.messages import escape

    assert escape("a\nb\rc\td\x1be\x00") == "a\\nb\\rc\\td\\x1be\\x00"
    assert escape("plain é ü path/with spaces") == "plain é ü path/with spaces"
    assert escape("x\u2028y") == "x\\u2028y"  # a Unicode line separator splits lines too


def test_on_cuda_the_rollout_buffer_and_hosts_are_compared_with_the_device_free_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1024, 80 * 2**30))
    config = TrainingConfig.from_dict({"n_envs": 2, "max_epochs": 3, "train_samples": 100, "val_samples": 50})
    task = wiring.get_task_spec("cifar_baseline")
    slots = wiring.SlotConfig(tuple(config.slots))
    with pytest.raises(ConfigError, match=r"of cuda:0 memory \(rollout buffer .* but 1.0 KiB is available"):
        memory.check_memory(config, "ppo", task, slots, torch.device("cuda:0"), 2)
