"""Suite-wide settings: one intra-op thread, so bitwise results (and goldens) match in every test and subprocess.

CPU bitwise results depend on the thread count; `nox -s tests` and `nox -s guardrails` pin it through the
environment (noxfile.PINNED_ENV), and this makes a bare `pytest` run behave the same.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")


def pytest_configure() -> None:
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
