"""The device cross-check reads site by site: each of torch's sync warnings is named at the loop's line, not at the
tripwire stand-in it was raised under (on the H200 every warning was named at `hooks.py:215` or `watched.py:69,70`,
so only totals compared). Proven on CPU by raising the warning from inside a stand-in, as torch's C++ does."""

from __future__ import annotations

import inspect
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tripwire.sync import explicit
from tripwire.sync.counter import SyncCounter
from tripwire.sync.crosscheck import SYNC_WARNING, WarningSites, compare, reason
from tripwire.sync.state import _TRIPWIRE_DIR

HERE = Path(__file__).resolve().relative_to(Path.cwd()).as_posix() if Path.cwd() in Path(__file__).parents else ""
WARNS = "import warnings\n\ndef to_kind(args, kwargs):\n    warnings.warn('called a synchronizing CUDA operation')\n"


def _inside_tripwire(source: str, name: str) -> object:
    """A function whose frames are tripwire's: torch's warning raised from inside the counter's stand-in path."""
    namespace: dict[str, object] = {}
    exec(compile(source, _TRIPWIRE_DIR + "sync/injected_warning.py", "exec"), namespace)
    return namespace[name]


def test_a_warning_raised_inside_a_stand_in_is_named_at_the_loops_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(explicit, "to_kind", _inside_tripwire(WARNS, "to_kind"))
    value = torch.ones(2)
    with SyncCounter(), WarningSites(debug_mode=False) as warned:
        line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        value.to(torch.float64)  # the stand-in's handler warns here, from tripwire's frames
    assert list(warned.sites) == [f"{HERE}:{line}"] and warned.total == 1


def test_other_warnings_are_shown_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.warns(UserWarning, match="something else"), WarningSites(debug_mode=False) as warned:
        import warnings

        warnings.warn("something else", UserWarning, stacklevel=1)
    assert warned.total == 0


def test_the_comparison_names_a_missed_line_and_explains_the_unflagged_kinds() -> None:
    events = [SimpleNamespace(kind="item", site="loop.py:3")] * 2 + [
        SimpleNamespace(kind="to_device", site="loop.py:5")
    ]
    events += [SimpleNamespace(kind="timer_sync", site="loop.py:9")]
    check = compare(events, Counter({"loop.py:3": 2, "loop.py:7": 1}))
    assert check.missed == {"loop.py:7": (0, 1)} and not check.ok
    assert check.unflagged == {"to_device": 1, "timer_sync": 1}
    text = check.format()
    assert "MISSED by tripwire (1):" in text and "loop.py:7: tripwire 0, torch 1" in text
    assert f"to_device x1 ({reason('to_device')})" in text


def test_every_counted_kind_that_torch_may_not_flag_has_a_reason() -> None:
    assert reason("timer_sync").startswith("an explicit wait") and reason("collective:all_reduce")
    assert reason("to_cpu") == ""  # a host-bound copy of device data: torch flags it


def _warn(text: str, category: type[Warning] = UserWarning) -> None:
    warnings.warn(text, category, stacklevel=1)  # one line: Python's once-per-line record is kept for it


def test_the_loops_warning_filters_decide_its_warnings_while_watched() -> None:
    """Only torch's sync warning is shown always (each counted); the loop's `-W error` still raises, its once per
    line still holds, and a filter it adds while watched stays after (the old `catch_warnings` + `always` showed
    every warning every time, so an error filter printed instead of raising, and dropped the loop's filter)."""
    with warnings.catch_warnings():  # the test's own scope: what is set inside goes with it
        warnings.resetwarnings()
        warnings.simplefilter("error", DeprecationWarning)
        warnings.simplefilter("default", UserWarning)
        shown: list[str] = []
        warnings.showwarning = lambda message, *rest, **keywords: shown.append(str(message))
        with WarningSites(debug_mode=False) as warned:
            for _ in range(3):
                _warn("called a synchronizing CUDA operation")
                _warn("the loop's own")
            with pytest.raises(DeprecationWarning):
                _warn("deprecated", DeprecationWarning)
            warnings.filterwarnings("ignore", message="added while watched")
        assert warned.total == 3 and shown == ["the loop's own"]
        _warn("added while watched")
        assert shown == ["the loop's own"] and warnings.filters[0][0] == "ignore"
        assert not any(SYNC_WARNING in str(entry[1]) for entry in warnings.filters)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch's sync detector needs CUDA")
def test_histc_over_its_inputs_own_range_is_the_two_reads_torch_flags() -> None:
    """`torch.histc(x)` on a GPU reads `x`'s minimum and maximum to the host (`implicit:histc`, two waits)."""
    x = torch.randn(64, device="cuda")
    with SyncCounter(cuda_cross_check=True) as counter:
        torch.histc(x)
        torch.histc(x, 10, -1.0, 1.0)  # a range given: no read
    check = counter.cross_check()
    assert check is not None and check.ok, check and check.format()
    assert counter.counts_by_kind().get("implicit:histc") == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch's sync detector needs CUDA")
@pytest.mark.parametrize(
    ("name", "call", "expected"),
    [
        ("bincount", lambda x: torch.bincount(x), {"implicit:bincount": 2}),  # its minimum, then its maximum
        ("bincount uint8", lambda x: torch.bincount(x.to(torch.uint8)), {"implicit:bincount": 1}),  # no minimum
        ("bincount empty", lambda x: torch.bincount(x[:0]), {}),
        ("repeat_interleave", lambda x: torch.repeat_interleave(x), {"implicit:repeat_interleave": 2}),
        ("repeat_interleave sized", lambda x: torch.repeat_interleave(x, output_size=5), {}),
        ("quantile", lambda x: torch.quantile(x.float(), 0.5), {}),  # its range check runs on a CPU only
        ("multinomial", lambda x: torch.multinomial(x.float(), 1), {}),  # its checks are asynchronous asserts
        ("masked_fill by a device scalar", lambda x: x.masked_fill(x > 1, x.max()), {"implicit:scalar_argument": 1}),
        ("masked_fill by a number", lambda x: x.masked_fill(x > 1, 0), {}),
        (
            "linspace of device endpoints",
            lambda x: torch.linspace(x.min(), x.max(), 4),
            {"implicit:scalar_argument": 2},
        ),
        (
            "nested tensor from a padding mask",  # its lengths to the host, then its check that the mask is aligned
            lambda x: torch._nested_tensor_from_mask(
                torch.ones(3, 2, 4, device="cuda"), torch.ones(3, 2, dtype=torch.bool, device="cuda")
            ),
            {"implicit:nested_from_mask": 2},
        ),
    ],
)
def test_each_wait_of_a_data_dependent_op_is_one_count(
    name: str, call: Callable[[torch.Tensor], object], expected: dict[str, int]
) -> None:
    """The counts a CPU run gives these ops (tests/tripwire/sync/test_sync_kernels.py) are the waits a GPU makes."""
    values = torch.tensor([1, 2, 2], device="cuda")
    torch.cuda.synchronize()
    with SyncCounter(cuda_cross_check=True) as counter:
        call(values)
    check = counter.cross_check()
    assert check is not None and check.ok, check and check.format()
    assert dict(counter.counts_by_kind()) == expected, name
