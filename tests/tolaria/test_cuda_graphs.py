"""`--cuda-graphs` (`esper.tolaria.graphs`): a captured step gives the eager step's bits, and when it is captured.

A CUDA graph needs a GPU; what a CPU can check is the bookkeeping around it. `RerunGraphs` stands in for
`CudaGraphs` with a graph's semantics: a capture changes nothing (the step runs on state it then puts back: a CUDA
capture runs no kernel) and a replay runs the step again on the captured input tensors and writes its outputs into
the captured ones. With it a whole run, seeds germinating, blending and fossilizing, must equal the eager run bit
for bit, which holds only if each replay gets this batch in the captured inputs, reads the slots' alphas refreshed
for it, hands the accumulators copies of outputs the next replay overwrites, and a structure change captures anew.
Addresses are what it cannot check (a rerun reads Python's current tensors, a graph the captured addresses): the
GPU tests below do, on a device, and so does the device check (tests/device/check.py, `nox -s gpu`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import Tensor

from esper.kasmina.blending import reading_graph_inputs
from esper.kasmina.model import MorphogeneticModel
from esper.simic.training import wiring
from esper.simic.training.config import ConfigError, TrainingConfig
from esper.tolaria.engine import EngineConfig, VectorizedEngine
from esper.tolaria.graphs import GraphedSteps, GraphEnv, StepResult, ValidationSums, output_tensors
from run_helpers import SEEDED_RUN, first_event_difference, first_weight_difference, recorded_run

RUN: dict[str, Any] = {**SEEDED_RUN, "n_envs": 2}


class _Rerun:
    def __init__(self, work: Callable[[], Any], outputs: StepResult | ValidationSums) -> None:
        self.work, self.outputs = work, outputs

    def replay(self) -> None:
        with reading_graph_inputs():
            fresh = self.work()
        if isinstance(fresh, StepResult):
            assert isinstance(self.outputs, StepResult)
            assert [index for index, _ in self.outputs.seed_norms] == [index for index, _ in fresh.seed_norms]
        for mine, new in zip(output_tensors(self.outputs), output_tensors(fresh), strict=True):
            # a validation's outputs are made under inference_mode, where alone they may be written
            with torch.inference_mode() if mine.is_inference() else torch.no_grad():
                mine.copy_(new)


class RerunGraphs:
    """`CudaGraphs`' stand-in on a CPU (the module docstring)."""

    def accepts(self, tensor: Tensor) -> bool:
        return tensor.device.type == "cpu"

    def warm_up(self, device: torch.device, work: Callable[[], Any]) -> Any:
        return work()

    def capture(
        self,
        device: torch.device,
        env: GraphEnv,
        optimizers: Sequence[torch.optim.Optimizer],
        work: Callable[[], Any],
    ) -> tuple[_Rerun, Any]:
        state = list(env.model.state_dict(keep_vars=True).values())
        state += [value for opt in optimizers for entry in opt.state.values() for value in entry.values()]
        tensors = [tensor for tensor in state if isinstance(tensor, Tensor)]
        saved = [tensor.detach().clone() for tensor in tensors]
        with reading_graph_inputs():
            outputs = work()
        with torch.no_grad():
            for tensor, value in zip(tensors, saved):
                tensor.copy_(value)
        return _Rerun(work, outputs), outputs


_plain_build = wiring.build_engine


@pytest.fixture
def graphed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[GraphedSteps]]:
    """Every engine the runs build gets `GraphedSteps(RerunGraphs())`; the list holds them."""
    made: list[GraphedSteps] = []
    build = wiring.build_engine

    def with_graphs(setup: Any) -> VectorizedEngine:
        engine = build(setup)
        engine.graphs = GraphedSteps(RerunGraphs())
        made.append(engine.graphs)
        return engine

    monkeypatch.setattr(wiring, "build_engine", with_graphs)
    yield made


@pytest.mark.parametrize("controller", ["heuristic", "ppo"])
def test_a_graphed_run_is_the_eager_run_bitwise(
    controller: str, graphed: list[GraphedSteps], monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as eager:
        eager.setattr(wiring, "build_engine", _plain_build)
        result_eager, events_eager = recorded_run(RUN, controller=controller)
    result, events = recorded_run(RUN, controller=controller)
    graphs = graphed[-1]
    assert first_event_difference(events, events_eager) is None
    assert first_weight_difference(result.final_weights, result_eager.final_weights) is None
    assert graphs.failures == []
    assert graphs.replays > graphs.captures > 0
    assert graphs.warmups == graphs.captures  # each capture's key ran one warm-up step first
    assert graphs.replays > graphs.validation_replays > 0  # fused validation replayed too
    if controller == "heuristic":  # seeds germinated, trained and blended: structures beyond the envs' first
        kinds = {event["event_type"] for event in events}
        assert {"SEED_GERMINATED", "SEED_STAGE_CHANGED"} <= kinds
        assert graphs.captures > RUN["n_envs"] * RUN["n_episodes"]


def test_graphed_steps_on_env_worker_threads_are_the_eager_run_in_turn_bitwise(
    graphed: list[GraphedSteps], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bookkeeping under threads (the pairing the option still refuses on a GPU: tests/device/steps.py's
    `graph_threads` step tries it there): per-env graphs, the lock around warm-ups and captures, the counts."""
    with monkeypatch.context() as eager:
        eager.setattr(wiring, "build_engine", _plain_build)
        result_eager, events_eager = recorded_run(RUN, controller="heuristic")
    result, events = recorded_run({**RUN, "env_workers": 2}, controller="heuristic")
    graphs = graphed[-1]
    assert first_event_difference(events, events_eager) is None
    assert first_weight_difference(result.final_weights, result_eager.final_weights) is None
    assert graphs.failures == [] and graphs.replays > graphs.captures > RUN["n_envs"] * RUN["n_episodes"]


def test_a_replay_that_reads_a_stale_alpha_is_caught(
    graphed: list[GraphedSteps], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard, shown: if the slots' alpha tensors were not refilled before each replay, a blending seed's ramp
    would be frozen at its captured value, and the run's bits move."""
    with monkeypatch.context() as eager:
        eager.setattr(wiring, "build_engine", _plain_build)
        result_eager, _ = recorded_run(RUN, controller="heuristic")
    first: dict[int, list[Tensor]] = {}

    def frozen(self: MorphogeneticModel) -> list[Tensor]:
        held = first.get(id(self))
        if held is None:
            held = first[id(self)] = [slot.refresh_alpha_input() for slot in self.seed_slots.values()]
        return held

    monkeypatch.setattr(MorphogeneticModel, "prepare_compiled_step", frozen)
    result, _ = recorded_run(RUN, controller="heuristic")
    assert first_weight_difference(result.final_weights, result_eager.final_weights) is not None


@pytest.mark.parametrize(
    ("validation", "controller"), [(False, "ppo"), (True, "heuristic")], ids=["train", "validation"]
)
def test_a_replay_that_skips_the_new_batch_is_caught(
    validation: bool, controller: str, graphed: list[GraphedSteps], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard, shown: a train step replayed on the captured batch instead of this one trains on other data; a
    fused validation replayed so reports other accuracies."""
    with monkeypatch.context() as eager:
        eager.setattr(wiring, "build_engine", _plain_build)
        result_eager, events_eager = recorded_run(RUN, controller=controller)
    monkeypatch.setattr(Tensor, "copy_", _copy_unless_into_a_captured_input(Tensor.copy_, validation=validation))
    result, events = recorded_run(RUN, controller=controller)
    graphs = graphed[-1]
    if validation:
        assert graphs.validation_replays > 0
        assert first_event_difference(events, events_eager) is not None
    else:
        assert graphs.replays > graphs.validation_replays
        assert first_weight_difference(result.final_weights, result_eager.final_weights) is not None


def _copy_unless_into_a_captured_input(
    copy: Callable[..., Tensor], *, validation: bool = False
) -> Callable[..., Tensor]:
    """`Tensor.copy_` that skips the copies into a graph's static inputs (a train step's; with `validation`, only
    a fused validation's)."""
    run = GraphedSteps._graphed.__code__

    def copy_(self: Tensor, src: Tensor, non_blocking: bool = False) -> Tensor:
        frame = sys._getframe(1)
        if frame.f_code is run:  # GraphedSteps._graphed's copies into its static inputs
            steps = frame.f_locals["self"]
            if (frame.f_locals["graphs"] in steps._validations.values()) == validation:
                return self
        return copy(self, src, non_blocking)

    return copy_


class _BlendingModel(torch.nn.Module):
    """What `GraphedSteps.validate` reads of a model, with a forward that reads every input a graph must refresh."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 4)
        self.alpha = torch.zeros(1)

    def structure_key(self) -> tuple[object, ...]:
        return (self.training,)

    def prepare_compiled_step(self) -> list[Tensor]:
        return [self.alpha]


def test_a_validation_replay_reads_this_passs_alpha_table() -> None:
    """A blending seed's alpha ramps from epoch to epoch under one key: each replay must read the pass's alpha table,
    copied into the graph's own, not the one it was captured with. Injected: without that copy the sums are the
    captured epoch's."""
    env = SimpleNamespace(env_id=0, model=_BlendingModel().eval(), amp_dtype=None)
    inputs, targets = torch.randn(5, 3), torch.tensor([0, 1, 2, 3, 0])

    def sums(x: Tensor, y: Tensor, table: Tensor | None) -> ValidationSums:
        assert table is not None
        with torch.inference_mode():
            logits = env.model.layer(x).unsqueeze(0) * table.view(-1, 1, 1)  # one row of logits per config
            losses = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.repeat(len(table)), reduction="none")
            return losses.view(len(table), -1).sum(dim=1), (logits.argmax(-1) == y).sum(dim=1)

    def graphed_sums(steps: GraphedSteps, table: Tensor) -> ValidationSums | None:
        return steps.validate(env, (("r0c0",), 2), inputs, targets, table, sums)

    ramp = [torch.tensor([[alpha], [0.0]]) for alpha in (0.25, 0.25, 0.5, 0.75)]
    steps = GraphedSteps(RerunGraphs())
    for table in ramp:  # warm-up, capture, then two replays with the ramp's later tables
        got = graphed_sums(steps, table)
        assert got is not None
        want = sums(inputs, targets, table)
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert (steps.warmups, steps.captures, steps.validation_replays) == (1, 1, 3)

    stale = GraphedSteps(RerunGraphs())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Tensor, "copy_", _copy_unless_into_a_captured_input(Tensor.copy_, validation=True))
        for table in ramp:
            got = graphed_sums(stale, table)
    assert got is not None
    assert torch.equal(got[0], sums(inputs, targets, ramp[1])[0])  # the captured epoch's, not the last one's
    assert not torch.equal(got[0], sums(inputs, targets, ramp[-1])[0])


def test_the_cuda_backend_takes_no_cpu_batch() -> None:
    steps = GraphedSteps()  # the CUDA backend: a CPU batch is not its
    assert not steps.backend.accepts(torch.zeros(1))


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({}, "--device cuda"),
        ({"device": "cuda", "amp": "bfloat16"}, "drop --amp"),
        ({"device": "cuda", "compile_step": "aot_eager"}, "--compile-step"),
        ({"device": "cuda", "env_workers": 2}, "--env-workers"),
        ({"devices": ["cuda:0", "cpu"]}, "--device cuda"),
    ],
)
def test_the_option_names_what_it_cannot_run_with(changes: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem.replace("-", r"\-")):
        TrainingConfig.from_dict({"cuda_graphs": True, **changes})
    with pytest.raises(ValueError, match="cuda_graphs"):
        EngineConfig(cuda_graphs=True, env_workers=2)


CUDA_RUN = {**RUN, "device": "cuda", "train_samples": 96, "val_samples": 32, "batch_size": 16}
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="a CUDA graph needs a GPU")


@needs_cuda
@pytest.mark.parametrize("controller", ["heuristic", "ppo"])
def test_on_a_gpu_the_graphed_run_is_the_eager_run_bitwise(controller: str) -> None:
    result_eager, events_eager = recorded_run(CUDA_RUN, controller=controller)
    made: list[VectorizedEngine] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(wiring, "build_engine", lambda setup: made.append(_plain_build(setup)) or made[-1])
        result, events = recorded_run({**CUDA_RUN, "cuda_graphs": True}, controller=controller)
    graphs = made[-1].graphs
    assert graphs is not None and graphs.failures == [] and graphs.replays > graphs.captures > 0
    assert graphs.replays > graphs.validation_replays > 0  # fused validation captured under inference_mode too
    assert first_event_difference(events, events_eager) is None
    assert first_weight_difference(result.final_weights, result_eager.final_weights) is None


@needs_cuda
def test_on_a_gpu_a_rollback_recaptures_and_keeps_the_eager_bits() -> None:
    run = {**CUDA_RUN, "n_episodes": 1, "inject_nan_epoch": 3}
    result_eager, events_eager = recorded_run(run)
    result, events = recorded_run({**run, "cuda_graphs": True})
    assert any(event["event_type"] == "GOVERNOR_ROLLBACK" for event in events)
    assert first_event_difference(events, events_eager) is None
    assert first_weight_difference(result.final_weights, result_eager.final_weights) is None
