"""Fixtures shared by tripwire's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tripwire.sync import explicit, implicit


@pytest.fixture(params=[True, False], ids=["stand-ins", "function mode"])
def explicit_hooks(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[bool]:
    """Run a test under each way of seeing explicit syncs: stand-ins on the watched functions (what counters use) and
    the function mode every torch call goes through (the earlier design). A module marked with this fixture asserts
    the same counts, kinds and lines under both."""
    monkeypatch.setattr(explicit, "use_patches", request.param)
    yield request.param


@pytest.fixture(params=["kernels", "mode"])
def counting(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test under each way implicit syncs are counted (`implicit.use_kernels`): kernels registered over the
    ops, and the dispatch mode (inside inference mode, and on a torch that cannot hand back an op's kernel)."""
    if request.param == "kernels" and not implicit.kernels_available():
        pytest.skip("this torch cannot hand back an op's kernel: the dispatch mode counts")
    monkeypatch.setattr(implicit, "use_kernels", request.param == "kernels")
    return str(request.param)
