"""CUDA graphs of the train step and of fused validation (`--cuda-graphs`): each captured once per model, replayed.

On a GPU at the original's sizes the host is the bottleneck: a train step issues about a hundred kernels, each a
few microseconds of launch and tens of host time around it, for a few hundred microseconds of device work
(docs/measurements.md). A captured step is one launch. `GraphedSteps` captures the whole step of one env (zeroed
gradients, forward, loss, backward, both clips and the SGD steps of the host and of every training seed) and
replays it on each later batch of the same model:

- **When it captures.** A graph is keyed by everything the step's kernels depend on beyond tensor values: the
  model's structure (`MorphogeneticModel.structure_key`: which seeds, at which stage, blending how), the batch's
  shape, every optimizer setting, and the address of every parameter, momentum buffer and alpha tensor the step
  reads or writes (a graph replays addresses). A new key is run eagerly first, once on the capture stream (the
  warm-up: lazy initialisations, and the momentum buffers an SGD's first step makes), and captured at its second
  batch. So an env captures when it starts, when a seed is germinated, changes stage or is removed, when a
  TRAINING seed's alpha leaves 0, and after a rollback, whose cleared momentum the next eager step makes anew.
  Each env keeps its last `KEEP` graphs; an env's model alternates between few structures.
- **What it costs.** A capture records the step without running it, then replays it; with the warm-up step, a new
  key costs about two eager steps of host time. Figures: docs/measurements.md.
- **Bits.** A replay runs the kernels the eager step ran, on the same addresses: the same results bit for bit, which
  tests/tolaria/test_cuda_graphs.py checks against the eager step on a GPU (a whole run, rollbacks included).
- **Fused validation** is graphed the same way (`GraphedSteps.validate`): one graph per env and key of every
  counterfactual config's forward pass on one batch, its loss sums and correct counts, under `inference_mode`. Its
  key adds the plan (the slots it overrides, the number of configs) and the address of every parameter and buffer
  the forward reads (a BatchNorm's running statistics); the pass's alpha table is copied into the graph's own
  before each replay, like the batch. Its outputs are added to the pass's sums on the same stream before the next
  replay overwrites them, so nothing is copied out. At the original's sizes eager validation took 9.2 ms of host
  time an env-epoch on the H200 (docs/measurements.md), four envs' 37 ms, next to the graphed train pass's replays.
- **Not graphed** (run eagerly, as without the option): a step on a CPU tensor, with a gradient scaler or autocast,
  a poisoned batch (fault injection), a first step before the momentum buffers exist, an optimizer other than
  `torch.optim.SGD`, and a key whose capture failed (a capture that meets a host sync raises; the reason is kept in
  `GraphedSteps.failures` and the key runs eagerly from then on).
- **Threads.** Envs are trained in turn: `EngineConfig` refuses `cuda_graphs` with env worker threads, a pairing
  not yet verified on a GPU (its first run there did not finish: docs/measurements.md). The lock (one warm-up or
  capture at a time, so the per-device capture stream is never shared), the thread-local capture mode and the
  per-env graphs are written for it; on a CPU the bookkeeping under threads equals the eager run in turn
  (tests/tolaria/test_cuda_graphs.py), and the device check's `graph_threads` step tries the pairing on a GPU,
  dumping every thread's stack if it does not end.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import torch
from torch import Tensor

from esper.kasmina.blending import reading_graph_inputs
from esper.kasmina.model import MorphogeneticModel

# Graphs kept per env, the most recently used: a model alternates between a handful of structures
KEEP = 4
# Optimizer settings a step's kernels read as constants
_GROUP_SETTINGS = ("lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize", "foreach", "fused")


@dataclass
class StepResult:
    """What one train step hands the pass's accumulators: its mean loss and logits (without graph), the host's
    gradient norm, and each training seed's (slot index, norm)."""

    loss: Tensor
    logits: Tensor  # or, when `predictions`, the predicted classes
    host_norm: Tensor
    seed_norms: list[tuple[int, Tensor]]
    predictions: bool = False

    def copies(self) -> StepResult:
        """Copies that outlive the next replay, which overwrites a graph's outputs (the logits as predictions)."""
        return StepResult(
            self.loss.clone(),
            self.logits.argmax(dim=1),
            self.host_norm.clone(),
            [(index, norm.clone()) for index, norm in self.seed_norms],
            predictions=True,
        )


class GraphEnv(Protocol):
    """What `GraphedSteps` reads of an env (`esper.tolaria.engine.EnvRuntime`)."""

    env_id: int
    model: MorphogeneticModel
    host_optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler | None
    amp_dtype: torch.dtype | None
    poison_next_batch: bool


StepBody = Callable[[Tensor, Tensor], StepResult]
# Fused validation of one batch: (inputs, targets, alpha table or None) -> (loss sums, correct counts), per config
ValidationSums = tuple[Tensor, Tensor]
ValidationBody = Callable[[Tensor, Tensor, Tensor | None], ValidationSums]
Outputs = TypeVar("Outputs", StepResult, ValidationSums)


class Replayable(Protocol):
    def replay(self) -> None: ...


class GraphBackend(Protocol):
    """Where and how steps are captured: `CudaGraphs` on a GPU; a test's stand-in on a CPU."""

    def accepts(self, tensor: Tensor) -> bool:
        """Whether a step on this batch can be captured."""
        ...

    def warm_up(self, device: torch.device, work: Callable[[], Outputs]) -> Outputs:
        """Run `work` eagerly, where the capture will run (a new key's first step)."""
        ...

    def capture(
        self,
        device: torch.device,
        env: GraphEnv,
        optimizers: Sequence[torch.optim.Optimizer],
        work: Callable[[], Outputs],
    ) -> tuple[Replayable, Outputs]:
        """Record `work` (env's step with these optimizers, or its validation with none) without running it; the
        graph and its outputs, which each replay overwrites."""
        ...


def output_tensors(outputs: StepResult | ValidationSums) -> list[Tensor]:
    """Every tensor a step or a validation hands on."""
    if isinstance(outputs, StepResult):
        return [outputs.loss, outputs.logits, outputs.host_norm, *(norm for _, norm in outputs.seed_norms)]
    return list(outputs)


class CudaGraphs:
    """CUDA graphs, each captured in thread-local mode on its device's capture stream."""

    def __init__(self) -> None:
        self._streams: dict[torch.device, torch.cuda.Stream] = {}

    def accepts(self, tensor: Tensor) -> bool:
        return tensor.device.type == "cuda"

    def warm_up(self, device: torch.device, work: Callable[[], Outputs]) -> Outputs:
        return self._on_capture_stream(device, work, record=True)

    def capture(
        self,
        device: torch.device,
        env: GraphEnv,
        optimizers: Sequence[torch.optim.Optimizer],
        work: Callable[[], Outputs],
    ) -> tuple[Replayable, Outputs]:
        graph = torch.cuda.CUDAGraph()

        def captured_step() -> Outputs:
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                with reading_graph_inputs():
                    return work()
            finally:
                graph.capture_end()

        return graph, self._on_capture_stream(device, captured_step, record=False)

    def _on_capture_stream(self, device: torch.device, work: Callable[[], Outputs], *, record: bool) -> Outputs:
        """`work` on this device's capture stream, ordered after and before the current stream's work; with
        `record`, what it returns is marked used on the current stream (the pass keeps it until it folds), so the
        allocator does not hand its memory back early. A graph's outputs live in its own pool, as long as it does."""
        stream = self._streams.get(device)
        if stream is None:
            stream = self._streams[device] = torch.cuda.Stream(device)
        current = torch.cuda.current_stream(device)
        stream.wait_stream(current)
        with torch.cuda.stream(stream):
            result = work()
        current.wait_stream(stream)
        if record:
            for tensor in output_tensors(result):
                tensor.record_stream(current)
        return result


@dataclass
class _Captured:
    graph: Replayable
    inputs: tuple[Tensor, ...]  # the graph's own copies of what each replay reads anew (batch, targets, table)
    result: Any  # the graph's outputs: a StepResult or ValidationSums


@dataclass
class _EnvGraphs:
    graphs: OrderedDict[tuple[object, ...], _Captured] = field(default_factory=OrderedDict)
    warmed: tuple[object, ...] | None = None  # the key whose warm-up step ran last


class GraphedSteps:
    """Each env's train step and fused validation as graphs, by key (module docstring). `run` returns the step's
    result (a replay's as copies that outlive the next one), `validate` a batch's loss sums and correct counts; each
    returns None when the work is not graphed and the caller runs it eagerly."""

    def __init__(self, backend: GraphBackend | None = None) -> None:
        self.backend: GraphBackend = CudaGraphs() if backend is None else backend
        self._envs: dict[int, _EnvGraphs] = {}
        self._validations: dict[int, _EnvGraphs] = {}
        self._lock = threading.Lock()
        self._failed: set[tuple[object, ...]] = set()
        self.failures: list[str] = []
        self.captures = 0
        self.replays = 0
        self.warmups = 0
        self.validation_replays = 0  # of `replays`, those of fused validation

    def run(
        self,
        env: GraphEnv,
        optimizers: Sequence[torch.optim.Optimizer],
        inputs: Tensor,
        targets: Tensor,
        body: StepBody,
    ) -> StepResult | None:
        key = self._key(env, optimizers, inputs, targets)
        if key is None or key in self._failed:
            return None
        graphs = self._envs.setdefault(env.env_id, _EnvGraphs())
        done = self._graphed(graphs, key, env, optimizers, (inputs, targets), body)
        if done is None:
            return None
        result, graphed = done
        return result.copies() if graphed else result

    def validate(
        self,
        env: GraphEnv,
        plan_key: tuple[object, ...],
        inputs: Tensor,
        targets: Tensor,
        table: Tensor | None,
        body: ValidationBody,
    ) -> ValidationSums | None:
        """Fused validation of one batch (`body(inputs, targets, table)`) as a graph; `plan_key` is what the plan
        changes in its kernels (the slots it overrides, its number of configs)."""
        key = self._validation_key(env, plan_key, inputs, targets)
        if key is None or key in self._failed:
            return None
        graphs = self._validations.setdefault(env.env_id, _EnvGraphs())
        if table is None:
            done = self._graphed(graphs, key, env, [], (inputs, targets), lambda i, t: body(i, t, None))
        else:
            done = self._graphed(graphs, key, env, [], (inputs, targets, table), body)
        if done is None:
            return None
        result, graphed = done
        if graphed:
            self.validation_replays += 1
        return result

    def _graphed(
        self,
        graphs: _EnvGraphs,
        key: tuple[object, ...],
        env: GraphEnv,
        optimizers: Sequence[torch.optim.Optimizer],
        sources: tuple[Tensor, ...],
        body: Callable[..., Outputs],
    ) -> tuple[Outputs, bool] | None:
        """`body(*sources)` by its graph for `key`: replayed, or captured at the key's second call (its first is an
        eager warm-up where the capture will run). Returns the outputs and whether a graph made them (a replay's
        outputs are the graph's own, which the next replay overwrites), or None when the capture failed."""
        captured = graphs.graphs.get(key)
        if captured is not None:
            graphs.graphs.move_to_end(key)
            for static, source in zip(captured.inputs, sources):
                static.copy_(source)
            captured.graph.replay()
            self.replays += 1
            return captured.result, True
        with self._lock:
            if graphs.warmed != key:  # a new key: one eager run where the capture will run, first
                graphs.warmed = key
                self.warmups += 1
                return self.backend.warm_up(sources[0].device, lambda: body(*sources)), False
            statics = tuple(source.clone() for source in sources)
            try:
                graph, result = self.backend.capture(sources[0].device, env, optimizers, lambda: body(*statics))
            except RuntimeError as exc:  # e.g. a host sync inside the step: this key runs eagerly from now on
                self._failed.add(key)
                self.failures.append(f"env {env.env_id}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
                return None
            graph.replay()
            self.captures += 1
            graphs.graphs[key] = _Captured(graph, statics, result)
            while len(graphs.graphs) > KEEP:
                graphs.graphs.popitem(last=False)
            graphs.warmed = None
            return result, True

    def _key(
        self, env: GraphEnv, optimizers: Sequence[torch.optim.Optimizer], inputs: Tensor, targets: Tensor
    ) -> tuple[object, ...] | None:
        """What a graph of this step depends on beyond tensor values, or None when the step is not graphed."""
        if not self.backend.accepts(inputs) or env.scaler is not None or env.amp_dtype is not None:
            return None
        if env.poison_next_batch:
            return None
        model = env.model
        addresses: list[int] = [alpha.data_ptr() for alpha in model.prepare_compiled_step()]
        settings: list[object] = []
        for optimizer in optimizers:
            if type(optimizer) is not torch.optim.SGD:
                return None
            state = optimizer.state
            for group in optimizer.param_groups:
                settings.append(tuple(group.get(name) for name in _GROUP_SETTINGS))
                momentum = group["momentum"] != 0
                for param in group["params"]:
                    addresses.append(param.data_ptr())
                    if momentum:
                        buffer = state[param].get("momentum_buffer") if param in state else None
                        if buffer is None:  # the first step makes it: eager
                            return None
                        addresses.append(buffer.data_ptr())
        return (model.structure_key(), _batch_key(inputs, targets), tuple(settings), tuple(addresses))

    def _validation_key(
        self,
        env: GraphEnv,
        plan_key: tuple[object, ...],
        inputs: Tensor,
        targets: Tensor,
    ) -> tuple[object, ...] | None:
        """What a graph of this validation depends on beyond tensor values, or None when it is not graphed: the
        model's structure (its eval mode included), the plan (which also sizes its alpha table), the batch's shapes,
        and the address of every alpha, parameter and buffer its forward reads."""
        if not self.backend.accepts(inputs) or env.amp_dtype is not None:
            return None
        model = env.model
        addresses = [alpha.data_ptr() for alpha in model.prepare_compiled_step()]
        addresses += [tensor.data_ptr() for tensor in model.parameters()]
        addresses += [tensor.data_ptr() for tensor in model.buffers()]
        return ("validation", model.structure_key(), plan_key, _batch_key(inputs, targets), tuple(addresses))


def _batch_key(inputs: Tensor, targets: Tensor) -> tuple[object, ...]:
    """What a batch's tensors decide of a graph's kernels beyond their values: shapes, the inputs' strides, dtypes."""
    return (tuple(inputs.shape), inputs.stride(), inputs.dtype, tuple(targets.shape), targets.dtype)
