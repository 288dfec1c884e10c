"""A mixed-precision loop's `GradScaler`: the reads it makes on a GPU, counted on a CPU run too.

`torch.amp.GradScaler("cuda")` built without CUDA disables itself, and a CPU run of an fp16 loop then counted none of
the reads its GPU run makes: `scaler.step(optimizer)` reads the found-inf flag at every step, `get_scale()` the
scale, `state_dict()` the scale and the growth tracker. A scaler disabled for want of CUDA (not by the loop's
`enabled=False`) counts each as the `item` it is on the GPU, at the line that calls the scaler; a scaler that runs
(`GradScaler("cpu")` here, the CUDA one on a GPU) counts its own reads, the same number at the same lines.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch

from tripwire.sync import hot_path
from tripwire.sync.counter import SyncCounter

CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if CUDA else "cpu")
STEPS = 3


def fp16_loop(make: Callable[[], Any], *, fused: bool = False, checkpoint: bool = False) -> list[int]:
    """`STEPS` steps of a scaled loss, then (with `checkpoint`) the scaler's scale and state read; the lines of the
    scaler's calls that read on a GPU."""
    device = DEVICE.type
    model = torch.nn.Linear(4, 1).to(device)
    if fused:
        optimizer: torch.optim.Optimizer = torch.optim.Adam(model.parameters(), fused=True)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "GradScaler is enabled, but CUDA is not available. Disabling."
        scaler = make()
    line = inspect.currentframe().f_lineno  # type: ignore[union-attr]
    for _ in range(STEPS):
        with torch.autocast(device, dtype=torch.float16, enabled=CUDA):
            loss = model(torch.ones(8, 4, device=device)).float().pow(2).mean()
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)  # line + 6
        scaler.update()
    if checkpoint:
        scaler.get_scale()  # line + 9
        scaler.state_dict()  # line + 10
    return [line + 6] * STEPS + ([line + 9, line + 10, line + 10] if checkpoint else [])


def recorded(body: Callable[[], list[int]]) -> tuple[int, list[int], list[int]]:
    """The `item`s counted (the model's move to the device aside), their lines, and the lines `body` says read on a
    GPU."""
    with SyncCounter() as counter, hot_path("region"):
        expected = body()
    lines = sorted(event.line for event in counter.events if event.kind == "item")
    return counter.counts_by_kind("region").get("item", 0), lines, sorted(expected)


@pytest.mark.parametrize(
    "make",
    [lambda: torch.amp.GradScaler("cuda"), lambda: torch.cuda.amp.GradScaler(), lambda: torch.amp.GradScaler()],
    ids=["torch.amp.GradScaler('cuda')", "torch.cuda.amp.GradScaler()", "the default device"],
)
def test_a_cuda_scaler_counts_a_read_each_step_where_the_gpu_run_waits(make: Callable[[], Any]) -> None:
    counts, lines, expected = recorded(lambda: fp16_loop(make))
    assert counts == STEPS and lines == expected, (counts, lines, expected)


def test_its_scale_and_state_are_reads_once_it_has_scaled() -> None:
    counts, lines, expected = recorded(lambda: fp16_loop(lambda: torch.amp.GradScaler("cuda"), checkpoint=True))
    assert counts == STEPS + 3 and lines == expected, (counts, lines, expected)


@pytest.mark.skipif(CUDA, reason="the CPU's own scaler, beside the CUDA one a CPU run disables")
def test_a_scaler_that_runs_counts_the_same_reads_at_the_same_lines() -> None:
    """`GradScaler("cpu")` runs on a CPU and reads its flag and scale with `.item()` as the CUDA one does on a GPU:
    the counts the disabled CUDA scaler stands in for are those (and a running scaler is not counted twice)."""
    running = recorded(lambda: fp16_loop(lambda: torch.amp.GradScaler("cpu"), checkpoint=True))
    standing_in = recorded(lambda: fp16_loop(lambda: torch.amp.GradScaler("cuda"), checkpoint=True))
    assert running[0] == standing_in[0] == STEPS + 3
    assert running[1] == running[2] and standing_in[1] == standing_in[2]


def test_a_scaler_the_loop_disabled_reads_nothing() -> None:
    counts, _, _ = recorded(lambda: fp16_loop(lambda: torch.amp.GradScaler("cuda", enabled=False), checkpoint=True))
    assert counts == 0


def test_an_optimizer_that_takes_the_scaling_itself_reads_nothing_in_the_step() -> None:
    """`fused=True`: the optimizer reads the found-inf flag inside its own kernel (`_step_supports_amp_scaling`)."""
    counts, _, _ = recorded(lambda: fp16_loop(lambda: torch.amp.GradScaler("cuda"), fused=True))
    assert counts == 0


def test_the_scaler_is_torchs_own_again_and_trains_the_same() -> None:
    from torch.amp.grad_scaler import GradScaler

    own = {
        name: (vars(GradScaler)[name].__code__, inspect.signature(vars(GradScaler)[name]))
        for name in vars(GradScaler)
        if callable(vars(GradScaler)[name]) and hasattr(vars(GradScaler)[name], "__code__")
    }

    def trained() -> torch.Tensor:
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1).to(DEVICE)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scaler = torch.amp.GradScaler("cuda")
        for _ in range(STEPS):
            optimizer.zero_grad()
            scaler.scale(model(torch.ones(2, 4, device=DEVICE)).pow(2).mean()).backward()
            scaler.step(optimizer)
            scaler.update()
        assert CUDA or (scaler.state_dict() == {} and scaler.get_scale() == 1.0)
        return model.weight.detach().clone()

    plain = trained()
    with SyncCounter(), hot_path("region"):
        during = {name: inspect.signature(vars(GradScaler)[name]) for name in own}
        watched = trained()
    assert torch.equal(plain, watched)
    assert during == {name: signature for name, (_, signature) in own.items()}
    assert all(vars(GradScaler)[name].__code__ is code for name, (code, _) in own.items())


@pytest.mark.skipif(not CUDA, reason="torch's sync detector needs CUDA")
def test_torchs_detector_flags_each_scaler_read_the_cpu_run_counts() -> None:
    """On a GPU the scaler runs: torch's detector flags each read the CPU run counts for it, at the same lines."""
    with SyncCounter(cuda_cross_check=True) as counter:
        expected = fp16_loop(lambda: torch.amp.GradScaler("cuda"), checkpoint=True)
    check = counter.cross_check()
    assert check is not None and check.ok, check and check.format()
    lines = sorted(event.line for event in counter.events if event.kind == "item")
    assert lines == sorted(expected), (lines, expected)
