"""CPU envs on worker threads (`env_workers > 1`): same results, same syncs, failures surface.

- a run with 2 or 3 env workers gives the same events (minus ids, timestamps and wall-clock fields), actions,
  rewards and bitwise-identical weights as the same run with one worker, for PPO and for the heuristic
  controller (which germinates, blends and fossilizes, so seeds train inside the worker threads);
- the host syncs of a threaded run are the ones of the sequential run, region by region and site by site;
- a sync injected into the per-batch train step is counted, in its `train_pass` region, once per env and
  batch, when the step runs on a worker thread; without `tripwire.sync.carried` the same worker sync is
  invisible (why the engine wraps its jobs);
- an exception in one env's job is raised in the caller after every job has finished.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any, cast

import pytest
import torch

from esper.nissa import TelemetryHub
from esper.simic.training.config import ConfigError, TrainingConfig
from esper.simic.training.trainer import TrainingResult
from esper.tolaria.engine import PREFETCH_STEPS, EngineConfig, EnvRuntime, VectorizedEngine
from esper.tolaria.epoch import TrainAccumulators
from run_helpers import SEEDED_RUN, first_event_difference, first_weight_difference, recorded_run
from tripwire.sync import SyncEvent, carried, hot_path
from tripwire.sync.counter import SyncCounter

RUN: dict[str, Any] = SEEDED_RUN


def _run(controller: str, env_workers: int) -> tuple[list[dict[str, Any]], TrainingResult]:
    result, events = recorded_run({**RUN, "env_workers": env_workers}, controller=controller)
    return events, result


@pytest.mark.parametrize("controller", ["ppo", "heuristic"])
@pytest.mark.parametrize("workers", [2, 3])
def test_threaded_envs_reproduce_the_sequential_run_bitwise(controller: str, workers: int) -> None:
    events_seq, result_seq = _run(controller, 1)
    events_thr, result_thr = _run(controller, workers)

    assert first_event_difference(events_thr, events_seq) is None
    assert first_weight_difference(result_thr.final_weights, result_seq.final_weights) is None
    if controller == "heuristic":  # seeds trained inside the workers
        kinds = Counter(event["event_type"] for event in events_seq)
        assert kinds["SEED_GERMINATED"] >= RUN["n_envs"]
        assert kinds["SEED_STAGE_CHANGED"] >= 3 * RUN["n_envs"]


def _sites(events: list[SyncEvent]) -> Counter[tuple[str, str, str]]:
    return Counter((event.region, event.site, event.kind) for event in events)


def test_threaded_envs_make_the_same_syncs_as_sequential_ones() -> None:
    with SyncCounter() as sequential:
        _run("ppo", 1)
    with SyncCounter() as threaded:
        _run("ppo", 2)

    assert sequential.counts_by_region().get("epoch_transfer", 0) > 0  # the counter saw the run
    assert _sites(threaded.events) == _sites(sequential.events)


def _tiny_engine_setup(
    n_envs: int, n_batches: int = 3
) -> tuple[list[EnvRuntime], list[list[tuple[torch.Tensor, torch.Tensor]]]]:
    """Env runtimes of an n-env run and `n_batches` batches of random data, built the way the trainer builds them."""
    from esper.leyline import SlotConfig, get_task_spec
    from esper.simic.rewards import RewardMode
    from esper.simic.training.env_factory import EnvFactory
    from esper.tolaria.engine import AmpMode

    task = get_task_spec("cifar_baseline")
    factory = EnvFactory(
        task=task,
        slot_config=SlotConfig(("r0c1",)),
        devices=[torch.device("cpu")] * n_envs,
        run_seed=3,
        max_epochs=3,
        amp=AmpMode.OFF,
        reward_mode=RewardMode.SHAPED,
        plateau_threshold=0.5,
        permissive_gates=True,
        hub=TelemetryHub(),
    )
    envs = [env.runtime for env in factory.create(0, n_envs)]
    generator = torch.Generator().manual_seed(0)
    batches = [
        [(torch.randn(4, 3, 32, 32, generator=generator), torch.randint(0, 10, (4,), generator=generator))] * n_envs
        for _ in range(n_batches)
    ]
    return envs, batches


def test_a_sync_injected_into_the_threaded_train_step_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    original = VectorizedEngine.train_batch

    def leaky(self: VectorizedEngine, env: EnvRuntime, acc: TrainAccumulators, *batch: torch.Tensor) -> None:
        original(self, env, acc, *batch)
        acc.stats.sum().item()  # the hazard: a per-batch host read

    monkeypatch.setattr(VectorizedEngine, "train_batch", leaky)
    envs, batches = _tiny_engine_setup(2)
    engine = VectorizedEngine(EngineConfig(env_workers=2))
    try:
        with SyncCounter() as counter:
            engine.train_pass(envs, batches)
    finally:
        engine.close()
    worker_threads = {thread.name for thread in threading.enumerate()}
    assert counter.counts_by_region() == {"train_pass": 2 * len(batches)}
    assert counter.counts_by_kind() == {"item": 2 * len(batches)}
    assert not any(name.startswith("esper-env") for name in worker_threads)  # close() stopped the workers


def test_without_carried_a_worker_thread_sync_is_invisible() -> None:
    """Why the engine wraps its jobs: torch function modes are thread-local. A counter carries the threads started
    while it counts, but the engine's pool outlives a counter and its threads may have started before one, as here
    (`threads=False`: a thread started earlier, seen as the counter sees it)."""
    tensor = torch.ones(3)

    def read() -> None:
        tensor.sum().item()

    with SyncCounter(threads=False) as counter, hot_path("train_pass"):
        plain = threading.Thread(target=read)
        plain.start()
        plain.join()
        seen_plain = counter.total
        wrapped = threading.Thread(target=carried(read))
        wrapped.start()
        wrapped.join()
    assert seen_plain == 0
    assert counter.counts_by_region() == {"train_pass": 1}


def test_a_failing_env_job_raises_after_every_job_finished(monkeypatch: pytest.MonkeyPatch) -> None:
    original = VectorizedEngine.train_batch
    finished: list[int] = []

    def fail_env_0(self: VectorizedEngine, env: EnvRuntime, acc: TrainAccumulators, *batch: torch.Tensor) -> None:
        if env.env_id == 0:
            raise RuntimeError("env 0 broke")
        original(self, env, acc, *batch)
        finished.append(env.env_id)

    monkeypatch.setattr(VectorizedEngine, "train_batch", fail_env_0)
    envs, batches = _tiny_engine_setup(2, n_batches=4 * PREFETCH_STEPS)  # more than a queue holds
    engine = VectorizedEngine(EngineConfig(env_workers=2))
    try:
        with pytest.raises(RuntimeError, match="env 0 broke"):
            engine.train_pass(envs, batches)
    finally:
        engine.close()
    assert finished == [1] * len(batches)


def test_one_env_or_one_worker_stays_on_the_calling_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: set[str] = set()
    original = VectorizedEngine.train_batch

    def record(self: VectorizedEngine, env: EnvRuntime, acc: TrainAccumulators, *batch: torch.Tensor) -> None:
        threads.add(threading.current_thread().name)
        original(self, env, acc, *batch)

    monkeypatch.setattr(VectorizedEngine, "train_batch", record)
    envs, batches = _tiny_engine_setup(2)
    VectorizedEngine(EngineConfig(env_workers=1)).train_pass(envs, batches)
    VectorizedEngine(EngineConfig(env_workers=4)).train_pass(envs[:1], [b[:1] for b in batches])
    assert threads == {threading.current_thread().name}
    engine = VectorizedEngine(EngineConfig(env_workers=2))
    engine.train_pass(envs, batches)
    engine.close()
    assert any(name.startswith("esper-env") for name in threads)


def test_env_workers_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="--env-workers must be a positive integer"):
        TrainingConfig(env_workers=0)
    with pytest.raises(ValueError, match="env_workers must be a positive integer"):
        EngineConfig(env_workers=0)


def test_batches_are_drawn_a_few_steps_ahead_not_all_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The feeding thread holds at most PREFETCH_STEPS queued steps per group beyond the ones in use."""
    envs, batches = _tiny_engine_setup(3, n_batches=12)
    drawn = 0
    lead: list[int] = []
    original = VectorizedEngine.train_batch

    def draw() -> Iterator[list[tuple[torch.Tensor, torch.Tensor]]]:
        nonlocal drawn
        for per_env in batches:
            drawn += 1
            yield per_env

    def record(self: VectorizedEngine, env: EnvRuntime, acc: TrainAccumulators, *batch: torch.Tensor) -> None:
        lead.append(drawn - acc.batches)  # batches drawn when this env runs its (acc.batches)-th step
        original(self, env, acc, *batch)

    monkeypatch.setattr(VectorizedEngine, "train_batch", record)
    engine = VectorizedEngine(EngineConfig(env_workers=2))
    try:
        accs = engine.train_pass(envs, draw())
    finally:
        engine.close()
    assert [acc.batches for acc in accs] == [12, 12, 12]
    assert max(lead) <= PREFETCH_STEPS + 2  # the step in use, the queue, and one blocked put


def test_a_failing_batch_iterator_stops_the_workers_and_raises() -> None:
    envs, batches = _tiny_engine_setup(2, n_batches=6)

    def broken() -> Iterator[list[tuple[torch.Tensor, torch.Tensor]]]:
        yield from batches[:3]
        raise OSError("data file vanished")

    engine = VectorizedEngine(EngineConfig(env_workers=2))
    try:
        with pytest.raises(OSError, match="data file vanished"):
            engine.train_pass(envs, broken())
    finally:
        engine.close()


def test_envs_with_streams_run_on_worker_threads_each_on_its_own_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA path of the threaded engine, wired on CPU: with env_workers > 1, envs that have streams go to the
    worker threads; each step first waits for the loader's copies and then runs inside its own env's stream, on a
    worker thread; the default stream joins every env stream once per pass, after the last step. The stream calls
    are stand-ins here (a CPU has no streams), so the sums must equal the in-turn pass bit for bit."""
    import esper.tolaria.engine as engine_module

    plain_envs, batches = _tiny_engine_setup(3)
    expected = VectorizedEngine(EngineConfig(env_workers=1)).train_pass(plain_envs, batches)
    calls: list[tuple[str, int, str]] = []
    entered: list[tuple[int, int, str]] = []  # (env, stream env, thread) of every train_batch

    class Stream:
        def __init__(self, env_id: int) -> None:
            self.env_id = env_id

    current: dict[str, int] = {}

    class Entered:
        def __init__(self, env: EnvRuntime) -> None:
            self.env = env

        def __enter__(self) -> None:
            current[threading.current_thread().name] = cast(Stream, self.env.stream).env_id

        def __exit__(self, *exc: object) -> None:
            current.pop(threading.current_thread().name)

    monkeypatch.setattr(
        engine_module,
        "wait_for_default_stream",
        lambda env, tensors: calls.append(("wait", env.env_id, threading.current_thread().name)),
    )
    monkeypatch.setattr(engine_module, "stream_context", Entered)
    monkeypatch.setattr(
        engine_module, "join_streams", lambda envs: calls.append(("join", len(envs), threading.current_thread().name))
    )
    original = VectorizedEngine.train_batch

    def record(self: VectorizedEngine, env: EnvRuntime, acc: TrainAccumulators, *batch: torch.Tensor) -> None:
        name = threading.current_thread().name
        entered.append((env.env_id, current.get(name, -1), name))
        original(self, env, acc, *batch)

    monkeypatch.setattr(VectorizedEngine, "train_batch", record)
    envs, _ = _tiny_engine_setup(3)
    for env in envs:
        env.stream = cast(torch.cuda.Stream, Stream(env.env_id))
    engine = VectorizedEngine(EngineConfig(env_workers=2))
    try:
        accs = engine.train_pass(envs, batches)
    finally:
        engine.close()
    assert len(entered) == 3 * len(batches)
    assert all(env_id == stream_of and thread.startswith("esper-env") for env_id, stream_of, thread in entered)
    waits = [call for call in calls if call[0] == "wait"]
    assert len(waits) == 3 * len(batches) and all(thread.startswith("esper-env") for *_, thread in waits)
    assert calls[-1] == ("join", 3, threading.current_thread().name)  # once, after every step, on the caller
    for got, want in zip(accs, expected):
        assert torch.equal(got.sums.close(), want.sums.close())
        assert torch.equal(got.host_grad_norm, want.host_grad_norm)


CUDA_RUN = {**RUN, "device": "cuda", "n_episodes": 1}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: env streams issued from worker threads")
def test_cuda_envs_on_worker_threads_reproduce_the_in_turn_run_and_themselves() -> None:
    """On CUDA (deterministic kernels, the default) each env's ops go onto its own stream from a worker thread: the
    run equals the in-turn run and itself, events and weights bit for bit."""
    runs = [recorded_run({**CUDA_RUN, "env_workers": workers}) for workers in (1, 2, 2)]
    (in_turn, in_turn_events), *threaded = runs
    for result, events in threaded:
        assert first_event_difference(events, in_turn_events) is None
        assert first_weight_difference(result.final_weights, in_turn.final_weights) is None
