"""The original system's own training loop, one epoch per timed `run()`, for a paired A/B against ours.

The original is esper-lite at commit 11ebe0f6 (its whole PPO loop is one function,
`esper.simic.training.vectorized.train_ppo_vectorized`). This module is imported by a `tripwire.bench.worker`
whose `sys.path` starts with the ORIGINAL's `src/`, so `import esper` here is the original's package: nothing
here imports our `esper` or `workloads.py`, and nothing of the original is copied: its function is called as its
CLI calls it (`scripts/train.py`, `ppo --preset cifar_baseline`), with its own preset, and paced from outside.

How one epoch is cut out of a function that runs whole training: `train_ppo_vectorized` runs in a background
thread (as the original's own Sanctum TUI mode runs it), and two of its public parameters are objects that
pause that thread until the workload lets it go on:
- `telemetry_config`: a `TelemetryConfig` (level NORMAL, what the CLI passes by default) whose
  `tick_escalation()`, the first call of every epoch, pauses first: the epoch starts there;
- `shutdown_event`: an object whose `is_set()` (never true) pauses; the loop calls it at the end of every epoch,
  after the epoch's bootstrap, and again at the end of every round, after the PPO update.
`prepare()` (untimed) lets the thread run to the start of its next epoch; `run()` (timed) lets it run one
epoch, to the end-of-epoch check. The caller blocks while the thread runs, so exactly one of them computes.

One `run()` = one epoch of the original's loop for all n envs, exactly as it trains: `tick_escalation`, per-env
slot telemetry set-up, the train pass (20 shared batches of 50 samples per env, through its `SharedBatchIterator`,
host SGD + seed optimizers, gradient telemetry), the fused counterfactual validation (4 batches of 50 per env),
signals, observation features, the LSTM policy's `get_action`, action execution, rewards, the rollout buffer, its
telemetry emission, and in the episode's last epoch the bootstrap value call. Not in `run()` (but still run, in
the next `prepare()`): at an episode's end its rollback bookkeeping, `_run_ppo_updates` (the PPO update), anomaly
checks, batch telemetry and best-policy snapshot; then the next episode's fresh envs (`create_env_state`, which
also re-seeds torch per env). So `run()` times what ours times in `EpochWorkload(..., episodes=True)`, whose
`run()` is `VectorizedPPOTrainer.run_epoch` (no PPO update either), and leaves out what the original's own
`step_timer` leaves out (it stops before the PPO update). The first `prepare()` runs the whole set-up: policy and
agent creation, datasets, loaders, first envs. The hand-over to and from the thread costs about 50 us per call.
`proxies` stay off: op and sync counters are thread-local torch modes, blind to the training thread.

Workload (esper-lite-measured.md): task cifar_baseline, preset `TrainingConfig.for_cifar_baseline()`, 5-epoch
episodes (`max_epochs = chunk_length = 5`), `batch_size_per_env=50`, `num_workers=0`, `compile_mode="off"`,
device cpu, torch's default thread count, seed 42, the preset's 100 rounds (a new seeded run starts, untimed,
if a workload ever gets through them). Data: the original's mock CIFAR-10 (`get_cifar10_datasets(mock=True)`:
N(0,1) 3x32x32 images, random labels, 1000 train / 200 test) is fixed in size, so during set-up its task's
dataset hook is pointed at n draws of that same mock, concatenated (n*1000 train / n*200 test): every env trains
on 1000 samples and validates on 200 per epoch, whatever n.

What differs from a CLI run: no ConsoleOutput backend on the hub (it prints every event; a benchmark worker has
nobody reading it), and each workload has its own `NissaHub`, installed as the global hub before each step (the
original adds a backend to the global hub at every start, so workloads sharing one would pile them up). Its
`BlueprintAnalytics` backend still runs and prints germinations (the worker sends prints to stderr); its hub
delivers events on background threads, as shipped. Seeding: as shipped the original seeds torch only per env,
after the policy's initialisation and the mock data are drawn, so each run would differ; a workload therefore
seeds torch, `random` and numpy globally (seed 42) before its set-up, which makes it deterministic at a fixed
thread count. As the original draws from those global generators all through an episode, workloads that take
turns in one process swap their generator states in `prepare()`: a run is the same interleaved or alone. The
training thread adopts the caller's torch thread count whenever it resumes (OpenMP's count is per thread).

Interpreter: one with the original's imports, torch 2.14.1 / torchvision 0.29.1 plus numpy, rich,
typing_extensions and psutil (psutil is the one the project's own env lacks), and scipy for the worker's own
`tripwire.bench` package.
"""

# The original's modules are sorted as one first-party block; ruff would sort each by whether OUR tree has a file of
# that name, which changes with our tree, not with this file.
from __future__ import annotations  # noqa: I001

import dataclasses
import random
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any
from unittest import mock

import numpy as np
import torch
from torch.utils.data import TensorDataset

import esper.nissa.output as nissa_output
from esper.runtime import tasks as original_tasks
from esper.simic.telemetry import TelemetryConfig, TelemetryLevel
from esper.simic.training.config import TrainingConfig
from esper.simic.training.vectorized import train_ppo_vectorized
from esper.utils.data import get_cifar10_datasets
from tripwire.bench.paired_spec import PairedBench

SEED = 42
EPISODE_LENGTH = 5
BATCH_SIZE_PER_ENV = 50
TRAIN_SAMPLES_PER_ENV = 1000  # the original's mock draws 1000 train / 200 test per call
ENV_COUNTS = (1, 2, 4)

# Where the training thread is paused.
CREATED = "created"  # thread started, set-up not yet run
EPOCH_START = "epoch_start"  # in tick_escalation(), before the epoch's first statement
EPOCH_END = "epoch_end"  # in the end-of-epoch shutdown check
ROUND_END = "round_end"  # in the end-of-round shutdown check, after the PPO update
FINISHED = "finished"  # train_ppo_vectorized returned or raised


class _Stop(BaseException):
    """Raised in the training thread at a pause point to unwind it when its workload is closed."""


class _Pacer:
    """Hands control back and forth between the caller and the training thread: one of them runs at a time."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._trainer_turn = False
        self.point = CREATED
        self.epoch = 0  # epochs begun in the current episode
        self.error: BaseException | None = None
        self.stopping = False
        self.threads = torch.get_num_threads()  # the caller's torch thread count, adopted by the training thread

    def pause(self, point: str) -> None:
        """Training thread: report `point` and wait until the caller lets it go on."""
        with self._cond:
            self.point = point
            self._trainer_turn = False
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._trainer_turn)
            if self.stopping:
                raise _Stop
        if torch.get_num_threads() != self.threads:  # OpenMP's thread count is per thread: follow the caller's
            torch.set_num_threads(self.threads)

    def finish(self, error: BaseException | None) -> None:
        with self._cond:
            self.point, self.error = FINISHED, error
            self._trainer_turn = False
            self._cond.notify_all()

    def step(self) -> str:
        """Caller: let the training thread run to its next pause point; return that point."""
        self.threads = torch.get_num_threads()
        with self._cond:
            self._trainer_turn = True
            self._cond.notify_all()
            self._cond.wait_for(lambda: not self._trainer_turn)
        if self.error is not None:
            raise RuntimeError(f"the original's training loop failed: {self.error!r}") from self.error
        return self.point

    def stop(self, thread: threading.Thread) -> None:
        if self.point != FINISHED and thread.is_alive():
            self.stopping = True
            self.step()
        thread.join(timeout=10.0)


class _PacedTelemetryConfig(TelemetryConfig):
    """The CLI's TelemetryConfig; its per-epoch `tick_escalation()` marks (and pauses at) the epoch's start."""

    pacer: _Pacer

    def tick_escalation(self) -> None:
        self.pacer.epoch += 1
        self.pacer.pause(EPOCH_START)
        super().tick_escalation()


class _PacedShutdown:
    """A `shutdown_event` that is never set; its `is_set()` checks mark the end of an epoch and of a round."""

    def __init__(self, pacer: _Pacer) -> None:
        self.pacer = pacer

    def is_set(self) -> bool:
        pacer = self.pacer
        if pacer.point == EPOCH_START:  # the first check after an epoch starts is that epoch's end
            pacer.pause(EPOCH_END)
        else:  # the second in a row is the round's end (after the PPO update)
            pacer.epoch = 0
            pacer.pause(ROUND_END)
        return False


def _train(pacer: _Pacer, kwargs: dict[str, Any]) -> None:
    """The training thread: wait for the first step, then run the original's whole training."""
    error: BaseException | None = None
    try:
        pacer.pause(CREATED)
        train_ppo_vectorized(**kwargs)
    except _Stop:
        pass
    except BaseException as exc:  # handed to the caller, raised there by `step()`
        error = exc
    finally:
        pacer.finish(error)


def _stop_run(pacer: _Pacer, thread: threading.Thread, hub: Any) -> None:
    pacer.stop(thread)
    hub.close(timeout=2.0)


def _concatenated(parts: Sequence[Any]) -> TensorDataset:
    return TensorDataset(*(torch.cat(tensors) for tensors in zip(*(part.tensors for part in parts))))


def scaled_mock_datasets(n_envs: int) -> Callable[..., tuple[TensorDataset, TensorDataset]]:
    """A stand-in for the task's dataset hook: n draws of the original's mock CIFAR-10, concatenated."""

    def datasets(data_root: str = "./data", mock: bool = False) -> tuple[TensorDataset, TensorDataset]:
        trains, tests = zip(*(get_cifar10_datasets(data_root=data_root, mock=True) for _ in range(n_envs)))
        return _concatenated(trains), _concatenated(tests)

    return datasets


def train_kwargs(
    n_envs: int, seed: int = SEED, episode_length: int = EPISODE_LENGTH, device: str = "cpu"
) -> dict[str, Any]:
    """`train_ppo_vectorized` keyword arguments as the CLI builds them, at the original's best CPU settings (on
    `device`: the GPU check runs it on `cuda:0`, which the original's CLI needs spelled with its index)."""
    config = dataclasses.replace(
        TrainingConfig.for_cifar_baseline(),
        task="cifar_baseline",
        n_envs=n_envs,
        max_epochs=episode_length,
        chunk_length=episode_length,
        batch_size_per_env=BATCH_SIZE_PER_ENV,
        compile_mode="off",
        seed=seed,
    )
    return {**config.to_train_kwargs(), "device": device, "num_workers": 0}


_active: weakref.ref[OriginalEpochWorkload] | None = None  # the workload whose RNG streams are the global ones


class OriginalEpochWorkload:
    """One epoch of the original's `train_ppo_vectorized` for `n_envs` envs per `run()` (module docstring).

    Rounds walk through whole episodes: epochs 1..5, then (untimed) the PPO update and fresh envs.
    """

    def __init__(
        self, n_envs: int, *, seed: int = SEED, episode_length: int = EPISODE_LENGTH, device: str = "cpu"
    ) -> None:
        self.n_envs = n_envs
        self.seed = seed
        self.kwargs = train_kwargs(n_envs, seed, episode_length, "cuda:0" if device == "cuda" else device)
        self.pacer: _Pacer | None = None
        self.hub: Any = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._rng: tuple[Any, Any, Any] | None = None  # its global RNG states while another workload runs

    def _start(self) -> None:
        """A new training run: its own hub, a seeded global RNG, a paused thread (set-up runs on the next step)."""
        self.close()
        pacer = _Pacer()
        config = _PacedTelemetryConfig(level=TelemetryLevel.NORMAL)
        config.pacer = pacer
        kwargs = {**self.kwargs, "telemetry_config": config, "shutdown_event": _PacedShutdown(pacer)}
        thread = threading.Thread(target=_train, args=(pacer, kwargs), name="original-train", daemon=True)
        self.pacer, self.hub = pacer, nissa_output.NissaHub()
        self._finalizer = weakref.finalize(self, _stop_run, pacer, thread, self.hub)
        self._activate()
        torch.manual_seed(self.seed)
        random.seed(self.seed)
        np.random.seed(self.seed)
        thread.start()

    def _activate(self) -> None:
        """Make this workload's hub the global one and its RNG streams the global ones.

        The original draws from the global torch / `random` generators all through an episode (it re-seeds them
        only when it creates envs), so when workloads take turns in one process the one that steps next gets its
        own streams back; saving the previous owner's here, untimed, keeps `run()` free of it.
        """
        global _active
        nissa_output._global_hub = self.hub  # get_hub() is looked up at run time all over the original
        previous = _active() if _active is not None else None
        if previous is self:
            return
        if previous is not None:
            previous._rng = (torch.get_rng_state(), random.getstate(), np.random.get_state())
        if self._rng is not None:
            torch_state, random_state, numpy_state = self._rng
            torch.set_rng_state(torch_state)
            random.setstate(random_state)
            np.random.set_state(numpy_state)
        _active = weakref.ref(self)

    def _step(self) -> str:
        assert self.pacer is not None
        self._activate()
        if self.pacer.point != CREATED:
            return self.pacer.step()
        with mock.patch.object(original_tasks, "get_cifar10_datasets", scaled_mock_datasets(self.n_envs)):
            return self.pacer.step()  # the set-up, up to the first epoch's start

    @property
    def epoch(self) -> int:
        """After `prepare()`, the epoch of the episode that `run()` runs (1..episode length); 0 before any."""
        return self.pacer.epoch if self.pacer is not None else 0

    def prepare(self) -> None:
        while self.pacer is None or self.pacer.point != EPOCH_START:
            if self.pacer is None or self.pacer.point == FINISHED:
                self._start()
            self._step()

    def run(self) -> None:
        if self.pacer is None or self.pacer.point != EPOCH_START:
            raise RuntimeError("run() needs prepare() first")
        point = self._step()
        if point != EPOCH_END:
            raise RuntimeError(f"the original's epoch ended at {point!r}, not at its end-of-epoch check")

    def close(self) -> None:
        """Stop the training thread and the hub (also done when the workload is garbage-collected)."""
        if self._finalizer is not None:
            self._finalizer()
        self.pacer, self.hub, self._finalizer = None, None, None


def paired_benchmarks() -> dict[str, PairedBench]:
    return {
        f"original_workload[{n}env]": PairedBench(
            make=lambda n=n: OriginalEpochWorkload(n),
            units={"env_epochs": n, "samples": n * TRAIN_SAMPLES_PER_ENV},
            runs_per_unit=1,
            threads=None,
            proxies=False,
        )
        for n in ENV_COUNTS
    }


def paired_benchmarks_one_thread() -> dict[str, PairedBench]:
    """The same epochs on one torch thread (original_comparison.py's `1 thread` setting)."""
    return {name: dataclasses.replace(bench, threads=1) for name, bench in paired_benchmarks().items()}
