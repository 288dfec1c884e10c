"""tripwire's pytest plugin (registered through the `pytest11` entry point).

Fixtures: `sync_counter` (a running `SyncCounter` for the test's duration). Marker: `gpu` (skips with a
stated reason where CUDA is not available).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tripwire.sync import SyncCounter


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA device; skipped with a reason where there is none")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") is not None:
        import torch

        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA GPU: torch.cuda.is_available() is False on this machine")


@pytest.fixture
def sync_counter() -> Iterator[SyncCounter]:
    """A SyncCounter active for the whole test; read its counts after the code under test ran."""
    with SyncCounter() as counter:
        yield counter
