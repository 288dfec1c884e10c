"""A warning torch raises inside a watched call is the loop's, at the loop's line, as without tripwire.

torch's C++ hands its warnings (TORCH_WARN) to Python at stack level 1: the innermost Python frame, which under a
counter was the stand-in's. So `torch.tensor(t)`'s copy-construct advice, NumPy data's "list of numpy.ndarrays is
extremely slow" and `x.std()` of one element were shown at a line of tripwire's, and Python's filters and
once-per-line records applied to tripwire's module, not the loop's: a loop's `ignore` filter on its own module let
them through, and a warning shown once per line of the loop was shown once in all. A stand-in now runs the original
on the caller's line (`watched.as_caller`). Each case runs the same calls plain and recorded and asks for the same
warnings, at the same lines.

`t.new_tensor(data)` is watched as the builder it is: an upload of host data when `t` is device memory
(`tensor_to_device`, as `torch.tensor(data, device=...)`), a host build when `t` is host memory or `device="cpu"`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from sync_counts import counted

from tripwire.sync import hot_path
from tripwire.sync.counter import SyncCounter

pytestmark = pytest.mark.usefixtures("explicit_hooks")  # stand-ins and the function mode alike

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def copy_constructs() -> None:
    source = torch.ones(2)
    torch.tensor(source)
    torch.tensor(source)  # the same warning, another line: shown again under "default"
    source.new_tensor(source)


def numpy_rows() -> None:
    torch.tensor([np.ones(2), np.ones(2)])


def one_element_spread() -> None:
    x = torch.ones(1)
    x.std()
    x.var()


def read_only_array() -> None:
    array = np.ones(3)
    array.setflags(write=False)
    torch.from_numpy(array)


@pytest.fixture(autouse=True)
def warn_always() -> Iterator[None]:
    """torch's once-a-process warnings (NumPy rows, a read-only array) every time, so both runs can show them."""
    before = torch.is_warn_always_enabled()
    torch.set_warn_always(True)
    yield
    torch.set_warn_always(before)


def shown(body: Callable[[], None], *, recorded: bool, action: str = "default") -> list[tuple[str, str, int]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        warnings.simplefilter(action)
        if recorded:
            with SyncCounter(), hot_path("region"):
                body()
        else:
            body()
    return [(type(w.message).__name__, w.filename, w.lineno) for w in caught]


@pytest.mark.parametrize("body", [copy_constructs, numpy_rows, one_element_spread, read_only_array])
def test_each_warning_is_shown_at_the_loops_line_as_without_tripwire(body: Callable[[], None]) -> None:
    plain = shown(body, recorded=False)
    assert plain and all(filename == __file__ for _, filename, _ in plain), plain
    assert shown(body, recorded=True) == plain


def test_a_filter_on_the_loops_module_still_applies() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", module=__name__)
        with SyncCounter(), hot_path("region"):
            copy_constructs()
            numpy_rows()
            one_element_spread()
    assert [str(w.message)[:40] for w in caught] == []


def test_a_warning_shown_once_per_line_is_shown_once_per_line_of_the_loop() -> None:
    def twice() -> None:
        for _ in range(2):
            torch.tensor(torch.ones(2))
        torch.tensor(torch.ones(2))

    # a line of the loop is one record: its second call is not shown again, another line is
    assert [line for _, _, line in shown(twice, recorded=True)] == [line for _, _, line in shown(twice, recorded=False)]
    assert len(shown(twice, recorded=True)) == 2


def test_an_error_in_a_watched_call_still_names_the_loops_line_last() -> None:
    """The frame the original runs in wears the loop's file and line and underlines nothing: the traceback's last
    frame of the loop is the line that made the call, as without tripwire."""

    def bad() -> None:
        torch.tensor("not data")

    with pytest.raises(TypeError) as plain:
        bad()
    with SyncCounter(), hot_path("region"), pytest.raises(TypeError) as recorded:
        bad()
    ours = [entry for entry in recorded.traceback if str(entry.path) == __file__]
    assert str(recorded.value) == str(plain.value)
    assert ours[-1].lineno == plain.traceback[-1].lineno


@pytest.mark.filterwarnings("ignore:To copy construct from a tensor")
def test_new_tensor_of_a_device_tensor_uploads_and_of_a_host_tensor_builds_on_the_host() -> None:
    on_device = torch.zeros(3, device=DEVICE)

    def builds() -> None:
        on_device.new_tensor([1.0, 2.0])  # host data to the device: the upload
        on_device.new_tensor(on_device * 2)  # device data, on the device: nothing crosses
        host = torch.zeros(2)
        host.new_tensor([1.0]).item()  # a host build, read on the host
        on_device.new_tensor([3.0], device="cpu").item()  # spelled the host: the same

    assert counted(builds) == {"tensor_to_device": 1}


def test_no_runner_outlives_the_recording() -> None:
    """Each runner holds a code object and a module's globals of the loop: dropped when the last counter stops."""
    from tripwire.sync import watched

    with SyncCounter(), hot_path("region"):
        torch.zeros(2)
        assert watched._AS_CALLER
    assert not watched._AS_CALLER


def test_twin_functions_of_two_files_each_warn_at_their_own_file(tmp_path: Path) -> None:
    """Two code objects with the same name, lines and bytecode compare equal though their files differ: a runner kept
    by the code object itself served the second file's call with the first file's name. Kept by the code's identity,
    each call warns at its own file."""
    source = "import torch\n\n\ndef build(t):\n    return torch.tensor(t)\n"
    paths = [tmp_path / "first.py", tmp_path / "second.py"]
    functions = []
    for path in paths:
        path.write_text(source, encoding="utf-8")
        namespace: dict[str, object] = {}
        exec(compile(source, str(path), "exec"), namespace)
        functions.append(namespace["build"])
    assert functions[0].__code__ == functions[1].__code__  # type: ignore[attr-defined]
    with warnings.catch_warnings(record=True) as seen, SyncCounter(), hot_path("region"):
        warnings.simplefilter("always")
        for build in functions:
            build(torch.ones(2))  # type: ignore[operator]
    assert [(w.filename, w.lineno) for w in seen] == [(str(path), 5) for path in paths]
