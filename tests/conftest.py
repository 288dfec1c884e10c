"""Suite-wide settings: one intra-op thread and portable CPU numerics, so bitwise results (and goldens) match in
every test and subprocess, on this machine and on other x86-64 machines.

CPU bitwise results depend on the thread count and on the kernels' instruction set; `nox -s tests` and
`nox -s guardrails` pin both through the environment (noxfile.GATE_ENV), and this makes a bare `pytest` run
behave the same (it runs before anything imports torch; an explicit setting in the environment wins).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tripwire.common.numerics import apply_portable_cpu_env

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
apply_portable_cpu_env()


def pytest_configure() -> None:
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


@pytest.fixture(scope="module", autouse=True)
def distribution_checks_kept() -> Iterator[None]:
    """torch.compile's first use turns off torch.distributions' argument checks for the whole process (dynamo's
    `TorchPatcher.patch`), and a loop may do it itself: each test module (its module-scoped loop runs included)
    leaves the setting as it found it, so the syncs those checks make in a later loop do not depend on which test
    ran first."""
    import torch

    checking = torch.distributions.Distribution._validate_args
    yield
    torch.distributions.Distribution.set_default_validate_args(checking)


@pytest.fixture(scope="session", autouse=True)
def sb3_logs_in_the_session_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Stable-Baselines3 makes a logger folder in the system's temporary folder for every run unless `SB3_LOGDIR`
    names one: the third-party loop tests (and the subprocesses they start) would leave one there each time."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SB3_LOGDIR", str(tmp_path_factory.mktemp("sb3-logs")))
        yield
