"""`SettingsWatch`: every determinism setting a run changes, at the line that changed it, with torch left as it was."""

from __future__ import annotations

import torch

from tripwire.bitwise.settings import SettingsWatch, determinism_settings


def test_each_change_is_named_at_its_line_and_a_set_to_the_same_value_is_none() -> None:
    before = determinism_settings()
    try:
        with SettingsWatch() as watch:
            torch.backends.cudnn.benchmark = False  # already False: no change
            torch.backends.cudnn.benchmark = True
            torch.use_deterministic_algorithms(True)
    finally:
        torch.backends.cudnn.benchmark = False
        torch.use_deterministic_algorithms(False)
    assert [(change.setting, change.before, change.after) for change in watch.changes] == [
        ("torch.backends.cudnn.benchmark", False, True),
        ("torch.use_deterministic_algorithms", [False, False], [True, False]),
    ]
    assert all(
        change.site.endswith("in test_each_change_is_named_at_its_line_and_a_set_to_the_same_value_is_none")
        for change in watch.changes
    )
    assert determinism_settings() == before


def test_a_change_made_another_way_is_found_at_the_end_without_a_line() -> None:
    threads = torch.get_num_threads()
    try:
        with SettingsWatch() as watch:
            torch.set_num_threads(threads + 1)
    finally:
        torch.set_num_threads(threads)
    assert [(change.setting, change.site) for change in watch.changes] == [("torch.num_threads", "")]
    assert "the line is unknown" in watch.format()


def test_the_watch_leaves_torch_as_it_found_it() -> None:
    setter, cudnn_class = torch.use_deterministic_algorithms, type(torch.backends.cudnn)
    flags, code = dict(vars(cudnn_class)), torch.use_deterministic_algorithms.__code__
    with SettingsWatch():
        assert torch.use_deterministic_algorithms is setter  # the same object, its code swapped
    assert torch.use_deterministic_algorithms.__code__ is code and dict(vars(cudnn_class)) == flags


def test_the_fill_of_uninitialized_memory_is_watched_at_its_line_and_put_back() -> None:
    """The trainer turns the fill off with deterministic algorithms (esper.tolaria.determinism): a recording names
    the line, and `restore_settings` gives the caller's value back."""
    from tripwire.bitwise.settings import restore_settings

    module = torch.utils.deterministic
    fill_class, before = type(module), determinism_settings()
    flags = dict(vars(fill_class))
    assert before["torch.utils.deterministic.fill_uninitialized_memory"] is True  # torch's default
    try:
        with SettingsWatch() as watch:
            module.fill_uninitialized_memory = False  # type: ignore[attr-defined]
        assert [(c.setting, c.before, c.after) for c in watch.changes] == [
            ("torch.utils.deterministic.fill_uninitialized_memory", True, False)
        ]
        assert watch.changes[0].site.endswith(
            "in test_the_fill_of_uninitialized_memory_is_watched_at_its_line_and_put_back"
        )
        assert dict(vars(fill_class)) == flags
        restore_settings(before)
        assert module.fill_uninitialized_memory is True  # type: ignore[attr-defined]
    finally:
        module.fill_uninitialized_memory = True  # type: ignore[attr-defined]
