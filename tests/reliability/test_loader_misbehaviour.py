"""A `--dataset` loader that misbehaves towards the process ends the run in one line with a documented exit code:

- a dataset whose `len()` raises, or disagrees with its images: exit 2 (it was a traceback, exit 1);
- a loader that signals its own process with SIGINT, SIGTERM or SIGHUP: the run stops at once (it is still being set
  up: there is no epoch to finish), one line saying so, exit 130 / 143 / 129 (it was two lines, the second claiming
  "a second interrupt");
- a loader that closes file descriptor 2 or `sys.stderr`: the stream is put back and the run refused, exit 2 (it
  exited 1 with no word at all, its traceback written to the closed stream).

The signal and stream cases run as real processes, forked from a warm launcher (`fork_launcher.py`).
"""

from __future__ import annotations

import contextlib
import io
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from reliability_helpers import SMALL_POLICY, TINY, Launcher

from esper.scripts import train

RUN = ("ppo", "--task", "cifar_baseline", "--envs", "2", *TINY, *SMALL_POLICY, "--quiet", "--rounds", "1")
LOADERS = """
import os
import signal
import sys

from esper.data.records import ImageDataset
from esper.data.synthetic import make_synthetic


class LenRaises(ImageDataset):
    def __len__(self):
        raise RuntimeError("len is broken")


class LenLies(ImageDataset):
    def __len__(self):
        return 7


def _data(split, n_samples, seed):
    return make_synthetic(n_samples or 100, seed=seed, split=split)


def len_raises(*, split, n_samples, seed, data_dir):
    d = _data(split, n_samples, seed)
    return LenRaises(d.images, d.labels, d.num_classes, d.name, d.augment)


def len_lies(*, split, n_samples, seed, data_dir):
    d = _data(split, n_samples, seed)
    return LenLies(d.images, d.labels, d.num_classes, d.name, d.augment)


def sends_sigint(*, split, n_samples, seed, data_dir):
    os.kill(os.getpid(), signal.SIGINT)
    return _data(split, n_samples, seed)


def sends_sigterm(*, split, n_samples, seed, data_dir):
    os.kill(os.getpid(), signal.SIGTERM)
    return _data(split, n_samples, seed)


def sends_sighup(*, split, n_samples, seed, data_dir):
    signal.raise_signal(signal.SIGHUP)
    return _data(split, n_samples, seed)


def closes_fd_2(*, split, n_samples, seed, data_dir):
    os.close(2)
    return _data(split, n_samples, seed)


def closes_sys_stderr(*, split, n_samples, seed, data_dir):
    sys.stderr.close()
    return _data(split, n_samples, seed)
"""


@pytest.fixture(scope="module")
def loaders(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("loaders")
    (folder / "odd_loaders.py").write_text(LOADERS)
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))
    sys.modules.pop("odd_loaders", None)


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    warm = Launcher()
    yield warm
    warm.close()


def quiet_main(*argv: str) -> tuple[int, list[str]]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = train.main(list(argv))
    return code, err.getvalue().splitlines()


@pytest.mark.parametrize(
    ("loader", "message"),
    [
        ("len_raises", "len() of the LenRaises raised RuntimeError (len is broken): an ImageDataset's length is its"),
        ("len_lies", "len() of the LenLies is 7, its images hold 200: drop the __len__ override"),
    ],
)
def test_a_dataset_whose_len_raises_or_lies_is_refused_in_one_line(loaders: Path, loader: str, message: str) -> None:
    code, lines = quiet_main(*RUN, "--dataset", f"odd_loaders:{loader}")
    assert code == 2 and len(lines) == 1, (code, lines)
    assert lines[0].startswith(f"train: error: --dataset odd_loaders:{loader}: train split: {message}"), lines[0]


@pytest.mark.parametrize(("name", "code"), [("SIGINT", 130), ("SIGTERM", 143), ("SIGHUP", 129)])
def test_a_loader_that_signals_its_own_process_stops_the_setup_in_one_line(
    loaders: Path, launcher: Launcher, tmp_path: Path, name: str, code: int
) -> None:
    log = tmp_path / "log"
    argv = [*RUN, "--dataset", f"odd_loaders:sends_{name.lower()}", "--save", str(tmp_path / "ck.pt")]
    assert launcher.run(argv, log, (loaders,)) == code == 128 + signal.Signals[name]
    assert log.read_text().splitlines() == [
        f"train: {name} received while the run was being set up (loading data, reading the checkpoint), before any "
        "training: stopped, nothing was trained or saved; run the command again (if no one sent it, the run's own "
        "code did: a --dataset loader or --task module)"
    ]
    assert not (tmp_path / "ck.pt").exists()


@pytest.mark.parametrize(
    ("loader", "stream"), [("closes_fd_2", "standard error (fd 2)"), ("closes_sys_stderr", "sys.stderr")]
)
def test_a_loader_that_closes_stderr_is_refused_in_one_line_on_the_stream_put_back(
    loaders: Path, launcher: Launcher, tmp_path: Path, loader: str, stream: str
) -> None:
    log = tmp_path / "log"
    assert launcher.run([*RUN, "--dataset", f"odd_loaders:{loader}"], log, (loaders,)) == 2
    assert log.read_text().splitlines() == [
        f"train: error: --dataset odd_loaders:{loader} closed or replaced the process's {stream} while loading the "
        "train split (put back for this message): a loader must leave the standard streams open"
    ]
