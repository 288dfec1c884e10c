"""Crash safety: SIGKILL at ten points leaves whole events and a loadable (or no) checkpoint; SIGINT stops cleanly.

A kill may cut the last events line, but only at a page boundary, where Linux stops a write when a fatal signal
is pending (esper.nissa.backends, docs/reliability.md); `complete_lines(..., killed=True)` drops that fragment.

Every kill is a real SIGKILL of a separate CLI process (forked from a warm launcher, see fork_launcher.py). The
kill points: a seeded random delay before any event, seven seeded line counts of events.jsonl spread over the
three rounds, and the moment the first and the second checkpoint's temporary file appears (mid-save). SIGINT
is sent to a cold `python -m esper.scripts.train` process.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from reliability_helpers import Launcher, child_env, complete_lines, line_count, ppo_argv, rounds_in, wait_for

from esper.simic.training.checkpoint import CheckpointLayout, load_checkpoint
from esper.simic.training.checkpoint_schema import Plain

pytestmark = pytest.mark.slow

LAYOUT = CheckpointLayout(n_envs=2, slot_ids=("r0c1",), task="cifar_baseline", controller="ppo")
ROUNDS = 3
KILL_SEED = 20261122
RUN_TIMEOUT_S = 120.0


@dataclass
class Kill:
    """One killed run: where it was killed and what it left behind."""

    point: str
    returncode: int
    events: Path
    checkpoint: Path
    hit_mid_save: bool = False


def kill_points() -> list[tuple[str, float | int]]:
    rng = random.Random(KILL_SEED)
    lines = sorted(rng.sample(range(1, 76), 7))  # a 3-round run writes 83 lines; stop short of its exit
    return [("delay", rng.uniform(0.0, 0.3)), *[("lines", n) for n in lines], ("save", 1), ("save", 2)]


def _temp_files(folder: Path) -> list[Path]:
    return list(folder.glob(".ck.pt.*.tmp"))


def _checkpoint_rounds(path: Path) -> int | None:
    """Rounds the checkpoint holds, None when there is none; a partial file would raise CheckpointError here."""
    return load_checkpoint(path, layout=LAYOUT, state=Plain())[0] if path.exists() else None


class SaveWatch:
    """Predicate: the nth checkpoint save is in progress (its temporary file exists) or, if missed, done."""

    def __init__(self, folder: Path, checkpoint: Path, nth: int) -> None:
        self.folder, self.checkpoint, self.nth = folder, checkpoint, nth
        self.inodes: set[int] = set()  # each atomic rename gives the checkpoint a new inode: one per save
        self.missed = False

    def __call__(self) -> bool:
        with contextlib.suppress(FileNotFoundError):
            self.inodes.add(self.checkpoint.stat().st_ino)
        if len(self.inodes) >= self.nth:
            self.missed = True
            return True
        return len(self.inodes) == self.nth - 1 and bool(_temp_files(self.folder))


def run_and_kill(launcher: Launcher, root: Path, index: int, point: str, at: float | int) -> Kill:
    folder = root / f"kill{index}"
    folder.mkdir()
    checkpoint = folder / "ck.pt"
    events = folder / "tel" / "run" / "events.jsonl"
    pid = launcher.start(ppo_argv(folder / "tel", "run", checkpoint, ROUNDS), folder / "output.txt")
    mid_save = False
    if point == "delay":
        wait_for(lambda: False, float(at))
    elif point == "lines":
        assert wait_for(lambda: line_count(events) >= int(at), RUN_TIMEOUT_S), f"never reached {at} lines"
    else:
        watch = SaveWatch(folder, checkpoint, int(at))
        assert wait_for(watch, RUN_TIMEOUT_S, poll=0.0005), f"save {at} never happened"
        mid_save = not watch.missed
    os.kill(pid, signal.SIGKILL)
    return Kill(f"{point}={at}", launcher.wait(pid), events, checkpoint, mid_save)


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    warm = Launcher()
    yield warm
    warm.close()


@pytest.fixture(scope="module")
def kills(launcher: Launcher, tmp_path_factory: pytest.TempPathFactory) -> list[Kill]:
    root = tmp_path_factory.mktemp("kills")
    return [run_and_kill(launcher, root, i, point, at) for i, (point, at) in enumerate(kill_points())]


def test_ten_distinct_kill_points_each_end_a_live_run_with_sigkill(kills: list[Kill]) -> None:
    assert len({kill.point for kill in kills}) == 10
    assert [kill.returncode for kill in kills] == [-signal.SIGKILL] * 10, [k.point for k in kills]


def test_every_events_line_left_by_a_kill_is_whole_but_a_last_one_cut_at_a_page_boundary(kills: list[Kill]) -> None:
    parsed = [complete_lines(kill.events, killed=True) for kill in kills]
    assert sum(len(events) for events in parsed) > 0


def test_the_checkpoint_after_a_kill_is_absent_or_loadable_never_partial(kills: list[Kill]) -> None:
    found = [_checkpoint_rounds(kill.checkpoint) for kill in kills]
    assert all(rounds is None or 1 <= rounds <= ROUNDS for rounds in found), found
    assert None in found and any(rounds is not None for rounds in found), "kills should land before and after saves"


def test_a_checkpoint_never_names_a_round_whose_events_are_not_on_disk(kills: list[Kill]) -> None:
    for kill in kills:
        saved = _checkpoint_rounds(kill.checkpoint) or 0
        assert rounds_in(complete_lines(kill.events, killed=True)) >= saved, kill.point


def test_kills_waiting_for_a_save_hit_it_or_its_end(kills: list[Kill]) -> None:
    mid_save = [kill for kill in kills if kill.point.startswith("save")]
    # The kill lands while the temporary file exists or just after the rename; either way the target is whole.
    for kill in mid_save:
        print(f"kill at {kill.point}: {'inside the save' if kill.hit_mid_save else 'just after the save'}")
        rounds = _checkpoint_rounds(kill.checkpoint)
        expected = {int(kill.point.split("=")[1]) - 1, int(kill.point.split("=")[1])}
        assert (rounds or 0) in expected, (kill.point, rounds, kill.hit_mid_save)


def test_a_killed_run_resumes_and_completes_the_remaining_rounds(
    kills: list[Kill], launcher: Launcher, tmp_path: Path
) -> None:
    resumable = [k for k in kills if (_checkpoint_rounds(k.checkpoint) or 0) in (1, 2)]
    kill = next((k for k in resumable if k.hit_mid_save), resumable[0])  # one that left a temporary file, if any
    done = _checkpoint_rounds(kill.checkpoint) or 0
    argv = [*ppo_argv(tmp_path / "tel", "resumed", kill.checkpoint, ROUNDS), "--resume", str(kill.checkpoint)]
    assert launcher.run(argv, tmp_path / "output.txt") == 0, (tmp_path / "output.txt").read_text()
    events = complete_lines(tmp_path / "tel" / "resumed" / "events.jsonl")
    [loaded] = [e for e in events if e["event_type"] == "CHECKPOINT_LOADED"]
    assert loaded["data"]["rounds_completed"] == done
    assert rounds_in(events) == ROUNDS - done
    assert _checkpoint_rounds(kill.checkpoint) == ROUNDS
    assert _temp_files(kill.checkpoint.parent) == []  # the resumed run's saves removed what the killed one left


# ---- SIGINT, SIGTERM, SIGHUP: finish the epoch, keep the last round, flush, exit 128+N ----


@dataclass
class Interrupted:
    signum: int
    returncode: int
    stderr: str
    events: list[dict[str, Any]]
    checkpoint: Path
    argv: list[str]


@pytest.fixture(scope="module", params=[signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def interrupted(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Interrupted:
    signum = request.param
    root = tmp_path_factory.mktemp(signum.name.lower())
    checkpoint = root / "ck.pt"
    argv = ppo_argv(root / "tel", "run", checkpoint, ROUNDS)
    events = root / "tel" / "run" / "events.jsonl"
    process = subprocess.Popen(
        [sys.executable, "-m", "esper.scripts.train", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        # line 30 is round 2's first EPOCH_COMPLETED: the signal arrives inside round 2
        assert wait_for(lambda: line_count(events) >= 30, RUN_TIMEOUT_S), "round 2 never started"
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
    return Interrupted(signum, process.returncode, stderr, complete_lines(events), checkpoint, argv)


def test_a_stop_signal_exits_128_plus_its_number_with_a_message_and_no_traceback(interrupted: Interrupted) -> None:
    assert interrupted.returncode == 128 + interrupted.signum, interrupted.stderr  # 130, 143, 129
    assert "Traceback" not in interrupted.stderr
    assert (
        f"train: {signal.Signals(interrupted.signum).name} received: finishing the current epoch" in interrupted.stderr
    )
    assert "train: interrupted in round 2 after epoch" in interrupted.stderr.splitlines()[-1]
    assert "continue with --resume" in interrupted.stderr.splitlines()[-1]


def test_a_stopped_run_ends_its_events_with_the_discarded_round(interrupted: Interrupted) -> None:
    last = interrupted.events[-1]
    assert last["event_type"] == "TRAINING_ENDED"
    assert last["data"]["outcome"] == "interrupted"
    assert (last["data"]["rounds_completed"], last["data"]["discarded_round"]) == (1, 1)


def test_a_stop_signal_keeps_the_last_completed_round_in_the_checkpoint(interrupted: Interrupted) -> None:
    assert _checkpoint_rounds(interrupted.checkpoint) == 1 == rounds_in(interrupted.events)


def test_a_stop_signal_finishes_the_current_epoch_for_every_env(interrupted: Interrupted) -> None:
    last_round_end = max(i for i, e in enumerate(interrupted.events) if e["data"].get("kind") == "throughput")
    tail = [e for e in interrupted.events[last_round_end + 1 :] if e["event_type"] == "EPOCH_COMPLETED"]
    stopped_after = int(interrupted.stderr.splitlines()[-1].split("after epoch ")[1].split()[0])
    for env_id in (0, 1):
        assert [e["epoch"] for e in tail if e["env_id"] == env_id] == list(range(1, stopped_after + 1))


def test_a_run_stopped_by_a_signal_resumes_and_completes(
    interrupted: Interrupted, launcher: Launcher, tmp_path: Path
) -> None:
    resume = str(interrupted.checkpoint)
    argv = [*ppo_argv(tmp_path / "tel", "resumed", interrupted.checkpoint, ROUNDS), "--resume", resume]
    assert launcher.run(argv, tmp_path / "output.txt") == 0, (tmp_path / "output.txt").read_text()
    assert rounds_in(complete_lines(tmp_path / "tel" / "resumed" / "events.jsonl")) == ROUNDS - 1
    assert _checkpoint_rounds(interrupted.checkpoint) == ROUNDS
