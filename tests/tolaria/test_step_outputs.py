"""What a train step hands the pass's accumulators: its own outputs, kept to the pass's end, unless they are a CUDA
graph's (inductor's reduce-overhead and max-autotune modes), whose next replay overwrites them; then copies and
predictions, with the same results."""

from __future__ import annotations

from typing import Any

import pytest
import torch._inductor.config as inductor_config

from esper.leyline.options import CompileBackend, CompileMode
from esper.tolaria import engine
from esper.tolaria.engine import CompiledStep, VectorizedEngine
from run_helpers import first_event_difference, first_weight_difference, recorded_run

RUN: dict[str, Any] = {
    "n_episodes": 1,
    "n_envs": 2,
    "max_epochs": 6,
    "task": "cifar_baseline",
    "slots": ["r0c0", "r0c1"],
    "train_samples": 44,  # a short last batch
    "val_samples": 16,
    "batch_size": 8,
    "seed": 3,
}


@pytest.mark.parametrize(
    ("backend", "mode", "persist"),
    [
        (CompileBackend.EAGER, CompileMode.REDUCE_OVERHEAD, True),  # the mode is inductor's alone
        (CompileBackend.AOT_EAGER, CompileMode.DEFAULT, True),
        (CompileBackend.INDUCTOR, CompileMode.DEFAULT, True),
        (CompileBackend.INDUCTOR, CompileMode.REDUCE_OVERHEAD, False),
        (CompileBackend.INDUCTOR, CompileMode.MAX_AUTOTUNE, False),
    ],
)
def test_a_compiled_step_says_whether_its_outputs_outlive_the_next_step(
    backend: CompileBackend, mode: CompileMode, persist: bool
) -> None:
    assert CompiledStep(backend, mode).outputs_persist is persist


def test_inductor_told_to_record_cuda_graphs_by_its_config_keeps_no_outputs() -> None:
    with inductor_config.patch({"triton.cudagraphs": True}):
        assert CompiledStep(CompileBackend.INDUCTOR, CompileMode.DEFAULT).outputs_persist is False


def test_an_eager_engine_keeps_the_steps_outputs() -> None:
    assert VectorizedEngine(engine.EngineConfig())._outputs_persist is True


def test_copies_and_predictions_give_the_kept_outputs_results_bitwise(monkeypatch: pytest.MonkeyPatch) -> None:
    """The heuristic controller germinates and blends, so seeds train and their norms are kept too."""
    kept, kept_events = recorded_run(RUN, controller="heuristic")
    init = VectorizedEngine.__init__

    def without_kept_outputs(self: VectorizedEngine, config: engine.EngineConfig) -> None:
        init(self, config)
        self._outputs_persist = False

    monkeypatch.setattr(VectorizedEngine, "__init__", without_kept_outputs)
    copied, copied_events = recorded_run(RUN, controller="heuristic")
    assert first_event_difference(copied_events, kept_events) is None
    assert first_weight_difference(copied.final_weights, kept.final_weights) is None
    assert any(event["event_type"] == "SEED_GERMINATED" for event in kept_events)
