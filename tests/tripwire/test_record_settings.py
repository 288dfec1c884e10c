"""A recording sets the scenario's thread count and determinism for the run and gives the caller's back."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tripwire.outside.record import _torch_settings
from tripwire.scenario import Scenario


@pytest.mark.parametrize("before", [False, True])
@pytest.mark.parametrize("wanted", [False, True])
def test_determinism_is_the_scenarios_inside_and_the_callers_after(before: bool, wanted: bool) -> None:
    scenario = dataclasses.replace(Scenario(name="settings", call="loop:train"), deterministic=wanted, threads=1)
    threads = torch.get_num_threads()
    torch.use_deterministic_algorithms(before)
    try:
        with _torch_settings(scenario):
            assert torch.are_deterministic_algorithms_enabled() is wanted
            assert torch.get_num_threads() == 1
        assert torch.are_deterministic_algorithms_enabled() is before
        assert torch.get_num_threads() == threads
    finally:
        torch.use_deterministic_algorithms(False)


def test_warn_only_is_not_kept_for_the_run() -> None:
    """A caller's warn-only determinism is not the scenario's: the run gets plain determinism off."""
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with _torch_settings(Scenario(name="settings", call="loop:train")):
            assert not torch.are_deterministic_algorithms_enabled()
            assert not torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        torch.use_deterministic_algorithms(False)
