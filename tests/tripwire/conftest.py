"""Fixtures shared by tripwire's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tripwire.sync import explicit


@pytest.fixture(params=[True, False], ids=["stand-ins", "function mode"])
def explicit_hooks(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[bool]:
    """Run a test under each way of seeing explicit syncs: stand-ins on the watched functions (what counters use) and
    the function mode every torch call goes through (the earlier design). A module marked with this fixture asserts
    the same counts, kinds and lines under both."""
    monkeypatch.setattr(explicit, "use_patches", request.param)
    yield request.param
