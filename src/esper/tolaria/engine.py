"""The execution engine: per-env streams and AMP, the train pass, fused validation and one batched transfer.

This is the hardware side of the trainer. The RL loop hands `run_epoch` env runtimes, batches and validation
plans and gets back one typed `EnvEpochResult` per env (`esper.tolaria.epoch` owns the row layout and the one
transfer); it never touches streams, scalers, autocast or device tensors itself.

Synchronization rules (the hot path):
- every batch, each env's stream waits on the default stream (the batch iterator's non-blocking copies run
  there) before the env trains on it;
- losses and correct counts accumulate as device tensors; nothing is read on the host mid-epoch;
- at the epoch boundary the default stream waits on every env stream (no host sync), and the accumulators of
  all envs on a device come to the host in ONE transfer. The sync count per epoch therefore does not grow with
  the number of envs (the original synchronized each env stream separately).

With `EngineConfig.env_workers > 1` envs train and validate concurrently on that many threads. On CPU torch
releases the GIL inside its kernels, so the threads compute at once; on CUDA each thread issues its envs' ops onto
their own streams, so the host cost of issuing them (most of an epoch's time at small batches) is spread over the
threads and the streams overlap on the device. Each env's work is the same sequence of ops in the same order either
way, so results are bitwise identical for every worker count (on CUDA with deterministic algorithms); the calling
thread draws the batches, in order, a few steps ahead of the workers. Run one intra-op thread per worker
(`torch.set_num_threads(1)`) or CPU workers oversubscribe the cores.
"""

from __future__ import annotations

import queue
import threading
import types
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from functools import partial
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from esper.kasmina.model import MorphogeneticModel
from esper.leyline.options import AmpMode as AmpMode
from esper.leyline.options import CompileBackend, CompileMode
from esper.tolaria.batches import EnvBatch
from esper.tolaria.epoch import (
    STAT_COLUMNS,
    EnvEpochResult,
    FusedPlan,
    StatSums,
    TrainAccumulators,
    gather_rows,
    pack_row,
    unpack_row,
)
from esper.tolaria.governor import TolariaGovernor
from esper.tolaria.graphs import GraphedSteps, StepResult
from esper.tolaria.optim_steps import sgd_step, zero_grads
from esper.tolaria.streams import autocast_context, join_streams, stream_context, wait_for_default_stream
from tripwire.sync import carried, hot_path


@dataclass
class EnvRuntime:
    """One env's hardware-side state: its model, optimizers, stream, scaler and governor."""

    env_id: int
    device: torch.device
    model: MorphogeneticModel
    host_optimizer: torch.optim.Optimizer
    governor: TolariaGovernor
    stream: torch.cuda.Stream | None = None
    scaler: torch.amp.GradScaler | None = None
    amp_dtype: torch.dtype | None = None
    slot_ids: tuple[str, ...] = field(default_factory=tuple)
    poison_next_batch: bool = False  # fault injection: the next train batch's loss becomes NaN

    def reset_optimizer_state(self) -> None:
        """Drop momentum after a rollback (the governor restores weights; the caller clears optimizer state)."""
        self.host_optimizer.state.clear()
        for slot in self.model.seed_slots.values():
            slot.clear_optimizer_state()


@dataclass(frozen=True)
class EngineConfig:
    """Optimizer-side constants the engine applies to every env."""

    seed_lr: float = 0.01
    seed_momentum: float = 0.9
    max_grad_norm: float = 1.0
    env_workers: int = 1  # threads training / validating envs concurrently (1: one after another)
    compile_step: CompileBackend = CompileBackend.OFF  # each env's forward, loss and backward (`forward_loss`)
    compile_mode: CompileMode = CompileMode.DEFAULT  # inductor's; reduce-overhead captures CUDA graphs
    cuda_graphs: bool = False  # each CUDA env's train step and validation captured, replayed (`esper.tolaria.graphs`)

    def __post_init__(self) -> None:
        if self.env_workers < 1:
            raise ValueError(f"env_workers must be a positive integer, got {self.env_workers}")
        if self.cuda_graphs and (self.compile_step is not CompileBackend.OFF or self.env_workers > 1):
            raise ValueError(
                "cuda_graphs captures the eager step of envs trained in turn: not with compile_step or env_workers"
            )


def forward_loss(model: nn.Module, inputs: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """One env's forward and loss: what `--compile-step` compiles (AOTAutograd then compiles its backward too)."""
    logits = model(inputs)
    return logits, F.cross_entropy(logits, targets)


StepFunction = Callable[[MorphogeneticModel, Tensor, Tensor], tuple[Tensor, Tensor]]


class CompiledStep:
    """`forward_loss` compiled on a backend, with one dynamo cache per model structure.

    Each distinct `MorphogeneticModel.structure_key()` (which seeds are where, at which stage, blending how; train or
    eval mode) gets a copy of `forward_loss` under its own code object, so dynamo can never run a graph captured for
    one structure on another: its own guards on the slots' Python state missed stage changes on torch 2.14
    (`SeedSlot.structure_key`). A graph is therefore captured on the first step of each new structure: an env's
    first step, a seed germinated, a stage changed, a seed removed, a TRAINING seed's alpha leaving 0; and by dynamo
    within a structure for what it guards itself (another batch size, dtype or device). A slot's alpha is a graph
    input, so its ramp captures nothing (`ScalarAlphaCache.refresh`). Envs of equal structure share their graphs
    (parameters are inputs). With inductor's reduce-overhead mode on CUDA each graph is also recorded as a CUDA
    graph and replayed.
    """

    def __init__(self, backend: CompileBackend, mode: CompileMode) -> None:
        self.backend = backend
        self.mode = str(mode) if backend is CompileBackend.INDUCTOR else None
        self._by_key: dict[tuple[object, ...], StepFunction] = {}
        self._lock = threading.Lock()  # env worker threads may meet a new structure at once

    @property
    def outputs_persist(self) -> bool:
        """Whether a step's outputs stay valid after the next step: not when inductor records CUDA graphs (its
        reduce-overhead and max-autotune modes, or its config set so), whose next replay overwrites them."""
        if self.backend is not CompileBackend.INDUCTOR:
            return True
        from torch._inductor import config as inductor_config
        from torch._inductor import list_mode_options

        cudagraphs = list_mode_options(self.mode).get("triton.cudagraphs", inductor_config.triton.cudagraphs)
        return not cudagraphs

    @property
    def structures(self) -> int:
        """Structures seen so far (each captured at least once)."""
        return len(self._by_key)

    def __call__(self, model: MorphogeneticModel, inputs: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        model.prepare_compiled_step()
        key = model.structure_key()
        step = self._by_key.get(key)
        if step is None:
            with self._lock:
                step = self._by_key.get(key) or self._compiled_copy(len(self._by_key))
                self._by_key[key] = step
        return step(model, inputs, targets)

    def _compiled_copy(self, index: int) -> StepFunction:
        code = forward_loss.__code__.replace(co_name=f"forward_loss_{index}")
        copy = types.FunctionType(code, forward_loss.__globals__, f"forward_loss_{index}")
        compiled: StepFunction = torch.compile(copy, backend=str(self.backend), mode=self.mode, dynamic=False)
        return compiled


def compile_step(backend: CompileBackend, mode: CompileMode) -> StepFunction:
    """`forward_loss` itself (off), or a `CompiledStep` on `backend` (inductor in `mode`)."""
    return forward_loss if backend is CompileBackend.OFF else CompiledStep(backend, mode)


def alpha_table(plan: FusedPlan, device: torch.device) -> Tensor | None:
    """The plan's alphas as a [num_configs, num_slots] float32 tensor on `device` (None without named slots).

    Copied from pinned memory without blocking: `torch.tensor(alphas, device=cuda)` is a blocking host-to-device
    copy, which synchronizes the stream; done per env per batch it was a per-env sync inside fused validation.
    """
    return _copy_alphas(plan, device) if plan.slot_ids else None


def _copy_alphas(plan: FusedPlan, device: torch.device) -> Tensor:
    table = torch.tensor(plan.alphas, dtype=torch.float32)
    if device.type == "cuda":
        table = table.pin_memory()
    return table.to(device, non_blocking=True)


# Steps the batch-drawing thread may run ahead of the slowest worker group (threaded CPU passes).
PREFETCH_STEPS = 2
_END_OF_PASS = object()


def _one_plain_group(grads: Sequence[Tensor]) -> bool:
    """Whether `grads` are plain tensors on one CPU or CUDA device, of one dtype (and there is at least one)."""
    first = grads[0] if grads else None
    return (
        first is not None
        and first.device.type in ("cpu", "cuda")
        and all(type(g) is Tensor and g.device == first.device and g.dtype == first.dtype for g in grads)
    )


def clip_grad_norm_(parameters: Sequence[nn.Parameter], max_norm: float) -> Tensor:
    """`torch.nn.utils.clip_grad_norm_` (L2) with the same ops in the same order, hence the same bits, minus its
    per-call grouping by device and dtype: every batch clips the host and each trainable seed, and that Python
    cost a measurable share of an epoch (docs/measurements.md#why-the-code-is-as-it-is). Anything but plain tensors
    on one device and dtype (the common case: always here) goes to torch's own function."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not _one_plain_group(grads):
        return nn.utils.clip_grad_norm_(parameters, max_norm)
    total: Tensor = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
    # torch writes `max_norm / (total + 1e-6)`, which a tensor computes as reciprocal, then times max_norm; times
    # 1.0 (the trainer's max_norm) changes no bit, so it is skipped: one aten op of every clip.
    inverse = torch.reciprocal(total + 1e-6)
    coefficient = torch.clamp(inverse if max_norm == 1.0 else inverse * float(max_norm), max=1.0)
    torch._foreach_mul_(grads, coefficient)
    return total


def _consume_steps(
    feed: queue.Queue[object], env_indices: Sequence[int], step: Callable[[int, EnvBatch], None]
) -> None:
    """A worker group's job: run `step` for its envs on every fed batch, in order, until the end of the pass.

    After a failure the group keeps taking (and dropping) batches, so the feeding thread is never left blocked on
    a full queue; the failure is raised once the pass has ended.
    """
    failure: Exception | None = None
    while (per_env := feed.get()) is not _END_OF_PASS:
        if failure is not None:
            continue
        try:
            for index in env_indices:
                step(index, cast(Sequence[EnvBatch], per_env)[index])
        except Exception as exc:  # raised in the caller's thread by _run_concurrently
            failure = exc
    if failure is not None:
        raise failure


@dataclass(frozen=True)
class _TrainableSeed:
    index: int  # the slot's position, i.e. its column in TrainAccumulators.seed_grad_norms
    parameters: list[nn.Parameter]
    optimizer: torch.optim.Optimizer


def _trainable_seeds(model: MorphogeneticModel, lr: float, momentum: float) -> list[_TrainableSeed]:
    """Every seed that trains this step, with its parameters and (lazily created) optimizer, in one pass."""
    out: list[_TrainableSeed] = []
    for index, slot in enumerate(model.seed_slots.values()):
        if slot.seed_trainable and (optimizer := slot.seed_optimizer(lr, momentum)) is not None:
            out.append(_TrainableSeed(index, slot.seed_parameters(), optimizer))
    return out


class VectorizedEngine:
    """Trains and validates every env's model on shared batches, keeping all results on the device."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self._pool: ThreadPoolExecutor | None = None
        self._forward_loss = compile_step(config.compile_step, config.compile_mode)
        self._outputs_persist = not isinstance(self._forward_loss, CompiledStep) or self._forward_loss.outputs_persist
        self.graphs = GraphedSteps() if config.cuda_graphs else None

    def close(self) -> None:
        """Stop the env worker threads, if any were started."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _threaded(self, envs: Sequence[EnvRuntime]) -> bool:
        """Whether to run these envs on worker threads: more than one worker and env (CPU, or CUDA with streams)."""
        return self.config.env_workers > 1 and len(envs) > 1

    def _run_concurrently(
        self, n_envs: int, batches: Iterable[Sequence[EnvBatch]], step: Callable[[int, EnvBatch], None]
    ) -> None:
        """Call `step(env_index, batch)` for every env and batch on the worker threads.

        Env i always runs on worker group i % W, batch-first within its group, so each env sees its batches in
        order. This thread draws the batches and feeds every group through a queue of PREFETCH_STEPS steps, so
        drawing overlaps training and at most that many steps are held beyond the one in use (a list of the whole
        epoch would hold all of it: gigabytes for a full CIFAR-10 epoch of several envs). A failing group keeps
        draining its queue, so the feed never blocks; every group finishes before the first failure is raised.
        """
        workers = min(self.config.env_workers, n_envs)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.config.env_workers, thread_name_prefix="esper-env")
        feeds: list[queue.Queue[object]] = [queue.Queue(maxsize=PREFETCH_STEPS) for _ in range(workers)]
        futures = [
            self._pool.submit(carried(partial(_consume_steps, feed, range(group, n_envs, workers), step)))
            for group, feed in enumerate(feeds)
        ]
        try:
            for per_env in batches:
                for feed in feeds:
                    feed.put(per_env)
        finally:
            for feed in feeds:
                feed.put(_END_OF_PASS)
            wait(futures)
        for future in futures:
            future.result()

    def run_epoch(
        self,
        envs: Sequence[EnvRuntime],
        train_batches: Iterable[Sequence[EnvBatch]],
        val_batches: Iterable[Sequence[EnvBatch]],
        plans: Sequence[FusedPlan],
    ) -> list[EnvEpochResult]:
        """One epoch of every env: the train pass, fused validation of `plans`, then ONE transfer to the host.

        Nothing is read on the host before that transfer; the results come back typed, one per env.
        """
        train = self.train_pass(envs, train_batches)
        val = self.validate(envs, val_batches, plans)
        rows = gather_rows([pack_row(t, v) for t, v in zip(train, val)])
        return [unpack_row(row, len(env.model.seed_slots)) for env, row in zip(envs, rows)]

    def new_accumulators(self, env: EnvRuntime) -> TrainAccumulators:
        num_slots = len(env.model.seed_slots)
        return TrainAccumulators(
            stats=torch.zeros(STAT_COLUMNS, device=env.device),
            seed_grad_norms=torch.zeros(max(1, num_slots), device=env.device),
            host_grad_norm=torch.zeros(1, device=env.device),
        )

    def train_batch(self, env: EnvRuntime, acc: TrainAccumulators, inputs: Tensor, targets: Tensor) -> None:
        """One optimizer step of one env on one batch; results stay on the device."""
        model = env.model
        # validate() restores train mode; a train() per batch costs time (measurements.md#why-the-code-is-as-it-is)
        if not model.training:
            model.train()
        seeds = _trainable_seeds(model, self.config.seed_lr, self.config.seed_momentum)
        result = None
        if self.graphs is not None:
            optimizers = [env.host_optimizer, *(seed.optimizer for seed in seeds)]
            result = self.graphs.run(env, optimizers, inputs, targets, partial(self._step, env, seeds))
        if result is None:
            result = self._step(env, seeds, inputs, targets)
            if not self._outputs_persist:  # a CUDA graph's outputs, which its next replay overwrites
                result = StepResult(
                    result.loss.clone(), result.logits.argmax(dim=1), result.host_norm, result.seed_norms, True
                )
        acc.add_host_norm(result.host_norm)
        for index, norm in result.seed_norms:
            acc.add_seed_norm(index, norm)
        # Kept, without their graph, until the pass folds them (`TrainAccumulators.fold`): a detach is a view, no
        # kernel, where adding them now was four ops with kernels (docs/measurements.md#why-the-code-is-as-it-is).
        if result.predictions:
            acc.add_batch(result.loss, targets, predictions=result.logits)
        else:
            acc.add_batch(result.loss, targets, logits=result.logits)

    def _step(self, env: EnvRuntime, seeds: Sequence[_TrainableSeed], inputs: Tensor, targets: Tensor) -> StepResult:
        """The step's arithmetic: zeroed gradients, forward and loss, backward, the clips and the optimizer steps."""
        model = env.model
        seed_optimizers = [seed.optimizer for seed in seeds]
        zero_grads(env.host_optimizer)
        for opt in seed_optimizers:
            zero_grads(opt)
        with autocast_context(env):
            logits, loss = self._forward_loss(model, inputs, targets)
        if env.poison_next_batch:
            loss = loss * float("nan")
            env.poison_next_batch = False
        if env.scaler is not None:
            env.scaler.scale(loss).backward()
            env.scaler.unscale_(env.host_optimizer)
            for opt in seed_optimizers:
                env.scaler.unscale_(opt)
        else:
            loss.backward()
        # The norms are of gradients, which carry no graph: no detach (an aten op per batch) is needed.
        host_norm = clip_grad_norm_(model.host_parameters(), self.config.max_grad_norm)
        seed_norms = []
        for seed in seeds:
            with_grad = [p for p in seed.parameters if p.grad is not None]
            if with_grad:
                seed_norms.append((seed.index, clip_grad_norm_(with_grad, self.config.max_grad_norm)))
        if env.scaler is not None:
            env.scaler.step(env.host_optimizer)
            for opt in seed_optimizers:
                env.scaler.step(opt)
            env.scaler.update()
        else:
            sgd_step(env.host_optimizer)
            for opt in seed_optimizers:
                sgd_step(opt)
        return StepResult(loss.detach(), logits.detach(), host_norm, seed_norms)

    def train_pass(self, envs: Sequence[EnvRuntime], batches: Iterable[Sequence[EnvBatch]]) -> list[TrainAccumulators]:
        """One full training epoch for every env over the shared batches (batch-first iteration)."""
        accs = [self.new_accumulators(env) for env in envs]
        with hot_path("train_pass"):
            if self._threaded(envs):
                self._run_concurrently(len(envs), batches, partial(self._train_step, envs, accs))
            else:
                self._train_in_turn(envs, accs, batches)
            for env, acc in zip(envs, accs):
                with stream_context(env):
                    acc.fold()
            join_streams(envs)
        return accs

    def _train_in_turn(
        self, envs: Sequence[EnvRuntime], accs: Sequence[TrainAccumulators], batches: Iterable[Sequence[EnvBatch]]
    ) -> None:
        """Batch-first training of every env, each on its own stream when it has one."""
        for per_env in batches:
            for env, acc, (inputs, targets) in zip(envs, accs, per_env):
                wait_for_default_stream(env, (inputs, targets))
                with stream_context(env):
                    self.train_batch(env, acc, inputs, targets)

    def _train_step(
        self, envs: Sequence[EnvRuntime], accs: Sequence[TrainAccumulators], index: int, batch: EnvBatch
    ) -> None:
        """Env `index`'s step on its batch (a worker-thread step of `_run_concurrently`), on its own stream."""
        env = envs[index]
        wait_for_default_stream(env, batch)
        with stream_context(env):
            self.train_batch(env, accs[index], *batch)

    def validate_batch(
        self,
        env: EnvRuntime,
        plan: FusedPlan,
        acc: StatSums,
        inputs: Tensor,
        targets: Tensor,
        table: Tensor | None = None,
    ) -> None:
        """Fused validation of every counterfactual config of one env on one batch (one forward pass).

        `table` is `alpha_table(plan, device)`, built once per pass; it is built here when not given.
        """
        if table is None and plan.slot_ids:
            table = _copy_alphas(plan, inputs.device)
        sums = None
        if self.graphs is not None:
            plan_key = (plan.slot_ids, plan.num_configs)
            sums = self.graphs.validate(
                env, plan_key, inputs, targets, table, partial(self._validation_sums, env, plan)
            )
        if sums is None:
            sums = self._validation_sums(env, plan, inputs, targets, table)
        with torch.inference_mode():
            acc.add(*sums, targets.shape[0])

    def _validation_sums(
        self, env: EnvRuntime, plan: FusedPlan, inputs: Tensor, targets: Tensor, table: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """Fused validation's arithmetic on one batch: every config's loss sum and correct count."""
        n_cfg = plan.num_configs
        batch = targets.shape[0]
        model = env.model
        with torch.inference_mode(), autocast_context(env):
            if not plan.slot_ids:
                logits = model(inputs)  # one config: the targets need no repeat (a copy per batch)
            else:
                assert table is not None
                alphas = table.to(dtype=inputs.dtype)
                overrides = {
                    slot_id: alphas[:, j].view(n_cfg, 1).expand(n_cfg, batch).reshape(n_cfg * batch, 1, 1, 1)
                    for j, slot_id in enumerate(plan.slot_ids)
                }
                logits = model.fused_forward(inputs.repeat(n_cfg, 1, 1, 1), overrides)
                targets = targets.repeat(n_cfg)
            losses = F.cross_entropy(logits.float(), targets, reduction="none").view(n_cfg, batch)
            correct = (logits.argmax(dim=1) == targets).view(n_cfg, batch)
            return losses.sum(dim=1), correct.sum(dim=1)

    def validate(
        self,
        envs: Sequence[EnvRuntime],
        batches: Iterable[Sequence[EnvBatch]],
        plans: Sequence[FusedPlan],
    ) -> list[Tensor]:
        """Fused validation for every env; returns per env a [num_configs, 3] device tensor."""
        accs = [StatSums.zeros(plan.num_configs, device=env.device) for env, plan in zip(envs, plans)]
        tables = [alpha_table(plan, env.device) for env, plan in zip(envs, plans)]
        for env in envs:
            env.model.eval()
        with hot_path("fused_validation"):
            if self._threaded(envs):
                step = partial(self._validate_step, envs, plans, accs, tables)
                self._run_concurrently(len(envs), batches, step)
                join_streams(envs)
            else:
                self._validate_in_turn(envs, plans, accs, tables, batches)
        for env in envs:
            env.model.train()
        return [acc.close() for acc in accs]

    def _validate_step(
        self,
        envs: Sequence[EnvRuntime],
        plans: Sequence[FusedPlan],
        accs: Sequence[StatSums],
        tables: Sequence[Tensor | None],
        index: int,
        batch: EnvBatch,
    ) -> None:
        """Env `index`'s fused validation of its batch (a worker-thread step of `_run_concurrently`), on its stream."""
        env, (inputs, targets), table = envs[index], batch, tables[index]
        wait_for_default_stream(env, batch if table is None else (inputs, targets, table))
        with stream_context(env):
            self.validate_batch(env, plans[index], accs[index], inputs, targets, table)

    def _validate_in_turn(
        self,
        envs: Sequence[EnvRuntime],
        plans: Sequence[FusedPlan],
        accs: Sequence[StatSums],
        tables: Sequence[Tensor | None],
        batches: Iterable[Sequence[EnvBatch]],
    ) -> None:
        """Batch-first validation of every env, each on its own stream when it has one."""
        for per_env in batches:
            for env, plan, acc, table, (inputs, targets) in zip(envs, plans, accs, tables, per_env):
                wait_for_default_stream(env, (inputs, targets) if table is None else (inputs, targets, table))
                with stream_context(env):
                    self.validate_batch(env, plan, acc, inputs, targets, table)
        join_streams(envs)
