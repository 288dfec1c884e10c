"""`ignoring`: one warning ignored, whatever the loop's filters say, while every record of the loop's warnings shown
once per line stays; and a sync counter started at each step (which registers kernels and builds torch's tables each
time) leaves the loop's once-per-line warning shown once."""

from __future__ import annotations

import warnings

import pytest
import torch

from tripwire.common.quiet import ignoring
from tripwire.sync.counter import SyncCounter


def _loop_warning() -> None:
    warnings.warn("the loop's own", UserWarning, stacklevel=1)


@pytest.fixture
def shown(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    monkeypatch.setattr(warnings, "filters", list(warnings.filters))  # the test's filters go with it
    monkeypatch.setattr(warnings, "showwarning", lambda message, *rest, **kwargs: seen.append(str(message)))
    return seen


def test_the_one_warning_is_ignored_under_error_and_others_still_raise(shown: list[str]) -> None:
    warnings.simplefilter("error")
    with ignoring(".*tripwire's own"):
        warnings.warn("tripwire's own", UserWarning, stacklevel=1)  # under `-W error`: no exception
        with pytest.raises(UserWarning, match="the loop's"):
            _loop_warning()
    with pytest.raises(UserWarning, match="tripwire's own"):
        warnings.warn("tripwire's own", UserWarning, stacklevel=1)


def test_a_filter_the_loop_adds_meanwhile_stays_and_ours_goes(shown: list[str]) -> None:
    before = list(warnings.filters)
    with ignoring(".*tripwire's own"):
        warnings.filterwarnings("ignore", message="the loop's")
        added = warnings.filters[0]
    assert list(warnings.filters) == [added, *before]


def test_the_loops_once_per_line_record_is_kept(shown: list[str]) -> None:
    warnings.simplefilter("default")
    for _ in range(3):
        _loop_warning()
        with ignoring(".*tripwire's own"):
            warnings.warn("tripwire's own", UserWarning, stacklevel=1)
    assert shown == ["the loop's own"]


def test_a_counter_started_at_each_step_leaves_the_loops_warning_shown_once(shown: list[str]) -> None:
    """Failed before: `catch_warnings` around the kernel registrations and around a `torch.overrides` table built at
    each start cleared the records, so the warning showed at every step."""
    warnings.simplefilter("default")
    x = torch.ones(4)
    for _ in range(4):
        with SyncCounter():
            _loop_warning()
            (x * 2).sum().item()
    assert shown == ["the loop's own"]
