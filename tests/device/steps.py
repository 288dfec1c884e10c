"""The GPU check's steps (`check.py`), one per process: `python tests/device/steps.py STEP --device D --out DIR`.

Each prints one JSON verdict line last: `{"status": "passed" | "failed", "detail": "..."}`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests" / "guardrails"), str(ROOT / "tests"), str(ROOT / "benchmarks")]

EAGER = ("a_baseline", "b_lifecycle", "c_rollback", "g_preset_and_flags", "h_escrow_workers", "a_baseline@envs_4")
EAGER += ("a_baseline@save",)  # (a) writing its checkpoint: torch.save's copies to the host
EAGER += ("d_resume",)  # (d) resuming that checkpoint: load_state_dict's copies of it to the device
RESUMED = "a_baseline@save"  # the label whose checkpoint (d) resumes
GPU_TESTS = (
    "tests/kasmina/test_building.py",
    "tests/tolaria/test_engine_validation.py",
    "tests/tolaria/test_env_workers.py",
    "tests/tolaria/test_train_accumulators.py",
    "tests/tolaria/test_cuda_graphs.py",
    "tests/tolaria/test_make_reproducible.py",
    "tests/tripwire/sync/test_sync_references_and_uploads.py",
    "tests/tripwire/sync/test_sync_hot_path.py",
    "tests/tripwire/sync/test_crosscheck.py",
    "tests/tripwire/sync/test_saves_and_loads.py",
    "tests/tripwire/sync/test_reads_inside_builders.py",
    "tests/tripwire/sync/test_linalg_checks.py",
    "tests/tripwire/sync/test_scalers.py",
    "tests/tripwire/sync/test_packed_sequences.py",
    "tests/tripwire/gates/test_static_audit.py",
    # torch's sync detector against the count, one test of each of these files (the rest run on CPU in CI)
    "tests/tripwire/sync/test_tensor_moves.py::test_torchs_detector_flags_no_builder_move_tripwire_missed",
    "tests/tripwire/sync/test_indexed_copies.py::test_torchs_detector_flags_no_assignment_tripwire_missed",
    "tests/tripwire/sync/test_sequence_indices.py::test_torchs_detector_flags_no_index_upload_tripwire_missed",
    "tests/tripwire/sync/test_host_functions.py::test_torchs_detector_flags_none_of_the_host_reads_left_out",
)


def verdict(ok: bool, detail: str, **extra: Any) -> None:
    print(json.dumps({"status": "passed" if ok else "failed", "detail": detail, **extra}))


def _label_args(label: str) -> tuple[str, list[str]]:
    """The scenario a label names and its extra arguments (`--save`'s file named as the record names it)."""
    name, _, extra = label.partition("@")
    if extra == "save":
        return name, ["--save", "checkpoint.pt"]
    if name == "d_resume":
        return name, ["--resume", "checkpoint.pt"]
    return name, (["--envs", extra.split("_")[1]] if extra.startswith("envs_") else [])


def step_sync(args: argparse.Namespace) -> None:
    """Every eager scenario (and the compiled one) on the device: syncs per site, the cross-check, the GPU's budgets."""
    import torch
    from guardrail_scenarios import HOT_REGIONS, SCENARIOS, scenario_config, single_threaded

    from esper.nissa import InMemoryBackend, TelemetryHub
    from esper.simic.training.vectorized import run_training
    from tripwire.common.context import capture_context
    from tripwire.compile.counter import CompileCounter
    from tripwire.gates.goldens import GoldenStore
    from tripwire.sync.counter import SyncCounter

    labels = ["a_baseline"] if args.quick else [*EAGER, "f_compiled"]
    store = GoldenStore(args.out / "baselines", update=True)
    recorded: dict[str, Any] = {}
    lines, missed = [], 0
    for label in labels:
        name, extra = _label_args(label)
        work = args.out / "work" / label
        work.mkdir(parents=True, exist_ok=True)
        files = args.out / "work" / (RESUMED if "--resume" in extra else label)  # (d) reads what (a) wrote
        written = [str(files / value) if value.endswith(".pt") else value for value in extra]
        config, controller = scenario_config(SCENARIOS[name], work, "--device", args.device, *written)
        hub = TelemetryHub()
        backend = InMemoryBackend()
        hub.add_backend(backend)
        torch._dynamo.reset()
        with single_threaded(), CompileCounter() as compiles, SyncCounter(cuda_cross_check=True) as counter:
            run_training(config, controller=controller, hub=hub)
        hub.close()
        sites: Counter[str] = Counter()
        for counts in counter.site_keys_by_region().values():
            sites.update(counts)
        check = counter.cross_check()
        missed += len(check.missed) if check is not None else 0
        events = Counter(event.event_type.name for event in backend.events)
        recorded[label] = {"args": extra, "total": counter.total, "sites": dict(sorted(sites.items()))}
        recorded[label] |= {"events": dict(sorted(events.items())), "compile_events": compiles.total}
        if check is not None:
            recorded[label] |= {"torch_warnings": check.warned, "missed": check.missed, "unflagged": check.unflagged}
        if not extra:
            store.check_sync_budget(name, counter, capture_context(config.device), HOT_REGIONS)
        cross = check.format().replace("\n", "; ") if check is not None else counter.cross_check_note
        lines.append(f"{label}: {counter.total} syncs, {compiles.total} compilation events; {cross}")
    device = capture_context(args.device)["device"]
    out = args.out / "device" / f"{device.replace(':', '-').replace(' ', '_')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    body = {"format": "tripwire-device-syncs/1", "device": device, "torch": torch.__version__, "scenarios": recorded}
    out.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print("\n".join(lines))
    verdict(missed == 0, f"{len(labels)} scenarios; lines torch flagged and tripwire missed: {missed}; {out.name}")


def step_trajectory(args: argparse.Namespace) -> None:
    """(internal) One run of a scenario on the device in this process, its trajectory saved to `--save`."""
    from guardrail_scenarios import SCENARIOS, run_scenario

    run = run_scenario(SCENARIOS[args.scenario], args.save.parent, "--device", args.device)
    run.trajectory.save(args.save)
    print(f"saved {args.save}: {len(run.trajectory)} checkpoints")


def step_bitwise(args: argparse.Namespace) -> None:
    """a_baseline twice, in two processes: identical on the device; its trajectory golden under the device's key."""
    from tripwire.bitwise.trajectory import Trajectory, compare_trajectories
    from tripwire.gates.goldens import GoldenStore

    saved = [args.out / "work" / "bitwise" / f"run{index}.json" for index in (1, 2)]
    for path in saved:
        path.parent.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, __file__, "trajectory", "--device", args.device, "--out", str(args.out)]
        subprocess.run([*command, "--scenario", "a_baseline", "--save", str(path)], check=True, cwd=ROOT)
    first, second = (Trajectory.load(path) for path in saved)
    report = compare_trajectories(first, second, source="first process")
    GoldenStore(args.out / "baselines", update=True).check_trajectory("a_baseline", first)
    detail = f"two processes: {report.total} checkpoints identical" if report.ok else report.format().splitlines()[0]
    verdict(report.ok, detail)


def _tripwire_plugin() -> list[str]:
    """`-p tripwire.gates.pytest_plugin` where tripwire runs from the source tree (the device image): nothing
    installed there registers its pytest entry point, and the tests need its markers and fixtures."""
    import importlib.metadata

    registered = any(point.name == "tripwire" for point in importlib.metadata.entry_points(group="pytest11"))
    return [] if registered else ["-p", "tripwire.gates.pytest_plugin"]


def step_tests(args: argparse.Namespace) -> None:
    """The tests that take a CUDA path when there is one (run on any device: they skip theirs without CUDA)."""
    command = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *_tripwire_plugin(), *GPU_TESTS]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    print(done.stdout[-4000:], done.stderr[-2000:])
    tail = [line for line in done.stdout.splitlines() if " passed" in line or " failed" in line][-1:]
    verdict(done.returncode == 0, tail[0] if tail else f"pytest exit {done.returncode}")


def step_timer(args: argparse.Namespace) -> None:
    """CUDATimer against the wall clock around `synchronize`, on work of four lengths (on CPU: its stop reports the
    sync the GPU run has)."""
    import torch

    from tripwire.sync.counter import SyncCounter
    from tripwire.timing import CUDATimer

    if not args.device.startswith("cuda"):
        with SyncCounter() as counter:
            timer = CUDATimer(args.device)
            timer.start()
            torch.ones(64, 64).sum()
            timer.stop()
        verdict(
            counter.counts_by_kind() == {"timer_sync": 1},
            f"perf_counter fallback; reported {dict(counter.counts_by_kind())}",
        )
        return
    device = torch.device(args.device)
    a = torch.randn(2048, 2048, device=device)
    rows = []
    for matmuls in (1, 10, 100, 1000):
        pairs = []
        for _ in range(7):
            torch.cuda.synchronize(device)
            start = time.perf_counter()
            timer = CUDATimer(device)
            timer.start()
            for _ in range(matmuls):
                a @ a
            timed = timer.stop()
            torch.cuda.synchronize(device)
            pairs.append((timed, (time.perf_counter() - start) * 1000))
        timed_ms, wall_ms = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
        rows.append((matmuls, timed_ms, wall_ms, timed_ms / wall_ms))
        print(f"{matmuls:5d} matmuls: CUDATimer {timed_ms:9.3f} ms, wall {wall_ms:9.3f} ms")
    long_enough = [ratio for _, timed, _, ratio in rows if timed >= 3.0]
    ok = bool(long_enough) and all(0.95 <= ratio <= 1.02 for ratio in long_enough)
    verdict(ok, "CUDATimer/wall from 3 ms up: " + ", ".join(f"{r:.3f}" for r in long_enough))


def _epochs_per_s(make: Any, n_envs: int, epochs: int, device: str) -> float:
    """env-epochs/s of a workload's `run()` (one epoch of every env), its set-up and first epoch untimed."""
    import torch

    workload = make()
    workload.prepare()
    workload.run()
    elapsed = 0.0
    for _ in range(epochs):
        workload.prepare()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        workload.run()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        elapsed += time.perf_counter() - start
    return n_envs * epochs / elapsed


RATE_AIMS = {"4 envs / 1 env": 3.0, "1 env / one CPU core": 10.0}  # issue 55's targets on an H100/H200


def rate_variants(quick: bool) -> dict[str, tuple[int, dict[str, Any]]]:
    """The rate step's runs of ours: label -> (envs, TrainingConfig fields); the quick dry run keeps three."""
    from esper.leyline.options import AmpMode, CompileBackend, CompileMode

    variants: dict[str, tuple[int, dict[str, Any]]] = {"eager 1 env": (1, {}), "eager 4 envs": (4, {})}
    variants |= {"4 envs on 4 worker threads": (4, {"env_workers": 4})}
    if not quick:
        variants |= {"bf16 4 envs": (4, {"amp": AmpMode.BF16}), "preload 4 envs": (4, {"gpu_preload": True})}
        variants |= {"preload 4 envs on 4 worker threads": (4, {"gpu_preload": True, "env_workers": 4})}
        variants |= {"inductor 4 envs": (4, {"compile": CompileBackend.INDUCTOR})}
        # the train step compiled and recorded as CUDA graphs; the timed epochs include the captures of new structures
        step = {"compile_step": CompileBackend.INDUCTOR, "compile_mode": CompileMode.REDUCE_OVERHEAD}
        variants |= {f"compiled step (reduce-overhead) {n} env{'s' * (n > 1)}": (n, step) for n in (1, 4)}
        # the eager step captured whole (--cuda-graphs), captures included; envs in turn
        variants |= {f"cuda graphs {n} env{'s' * (n > 1)}": (n, {"cuda_graphs": True}) for n in (1, 4)}
        variants |= {"cuda graphs, preload 4 envs": (4, {"cuda_graphs": True, "gpu_preload": True})}
    return variants


def step_rate(args: argparse.Namespace) -> None:
    """Throughput in env-epochs/s, side by side in one process: ours at 1 and 4 envs (eager, bf16, preloaded,
    inductor, 4 envs on 4 worker threads, each env on its own stream, and the train step compiled with inductor's
    CUDA graphs), the plain loop, ours on one CPU core of this machine, and the original when `--original` names its
    source folder; then the two aims (RATE_AIMS)."""
    import dataclasses

    import torch

    from esper.nissa import TelemetryHub
    from workloads import GATE, ORIGINAL, EpochWorkload, PlainLoopWorkload, bench_config

    size, epochs = (GATE, 2) if args.quick else (ORIGINAL, 8)
    variants = rate_variants(args.quick)
    rates: dict[str, float] = {}
    threads = torch.get_num_threads()

    def record(label: str, rate: float) -> None:  # printed at once: a step past its limit keeps what it measured
        rates[label] = rate
        print(f"{label}: {rate:.2f} env-epochs/s", flush=True)

    def ours(labels: list[str]) -> None:
        for label in labels:
            n_envs, options = variants[label]
            config = dataclasses.replace(bench_config(n_envs, size, device=args.device), **options)
            torch.set_num_threads(1 if config.env_workers > 1 else threads)  # as the CLI sets it for env workers
            make = partial(EpochWorkload, config, TelemetryHub(), episodes=True)
            record(f"ours, {label}", _epochs_per_s(make, n_envs, epochs, args.device))
        torch.set_num_threads(threads)

    quick = list(rate_variants(quick=True))
    ours(quick)  # the figures the aims need first, the compiling variants last
    torch.set_num_threads(1)
    one_core = partial(EpochWorkload, bench_config(1, size), TelemetryHub(), episodes=True)
    record("ours, 1 env on one CPU core", _epochs_per_s(one_core, 1, epochs, "cpu"))
    torch.set_num_threads(threads)
    for n_envs in (1, 4):
        plain = partial(PlainLoopWorkload, bench_config(n_envs, size, device=args.device), TelemetryHub())
        record(f"plain loop, {n_envs} env(s)", _epochs_per_s(plain, n_envs, epochs, args.device))
    ours([label for label in variants if label not in quick])
    failed: list[str] = []
    if args.original is not None:
        for label, rate in _original_rates(args, epochs, failed).items():
            record(label, rate)
    four = max(rate for label, rate in rates.items() if label.startswith("ours") and "4 envs" in label)
    # one env at its best on the device (eager, or with its step captured): what the envs and the CPU core are held to
    one = max(rate for label, rate in rates.items() if label.startswith("ours") and label.endswith(" 1 env"))
    achieved = {"4 envs / 1 env": four / one, "1 env / one CPU core": one / rates["ours, 1 env on one CPU core"]}
    aims = "; ".join(
        f"{name} {value:.2f}x (aim {RATE_AIMS[name]:.0f}x: {'met' if value >= RATE_AIMS[name] else 'not met'})"
        for name, value in achieved.items()
    )
    detail = "; ".join(f"{label} {rate:.1f}" for label, rate in rates.items())
    verdict(not failed, "; ".join([*failed, f"{detail}. {aims}"]), rates=rates, aims=achieved)


def _original_rates(args: argparse.Namespace, epochs: int, failed: list[str]) -> dict[str, float]:
    """The original's epochs on the device, in a process that imports its `esper` (its own source first on the path);
    a run that fails is said in `failed`."""
    rates = {}
    for n_envs in (1, 4):
        code = (
            "import sys, json; sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
            "from original_workloads import OriginalEpochWorkload\n"
            f"make = lambda: OriginalEpochWorkload({n_envs}, device=sys.argv[3])\n"
            f"import steps; print(json.dumps(steps._epochs_per_s(make, {n_envs}, {epochs}, sys.argv[3])))"
        )
        # The original's src/ goes first, so `import esper` is its own; the path keeps what the check runs from
        # (tripwire's source and the packed wheels on the device image), which the workload's harness side needs.
        command = [sys.executable, "-c", code, str(args.original), str(ROOT / "benchmarks"), args.device]
        done = subprocess.run(command, cwd=Path(__file__).parent, capture_output=True, text=True, check=False)
        if done.returncode:
            print(done.stderr[-2000:])
            failed.append(f"original, {n_envs} env(s): exit {done.returncode}, {done.stderr.strip()[-160:]}")
            continue
        rates[f"original, {n_envs} env(s)"] = float(json.loads(done.stdout.strip().splitlines()[-1]))
    return rates


def step_ab(args: argparse.Namespace) -> None:
    """The paired A/B on the device: an A/A (this tree against itself) must pass, a 5 % slowdown must not. The
    CPU dry run (`--quick`) checks that both run to a verdict: its few blocks cannot decide either (an A/A read
    +3.1 % [+1.2 %, +6 %] once on a shared 2-core CI machine); the instruction-count A/B in the suite is the
    deterministic guard that a slowdown is caught."""
    outcomes = []
    budget = "5" if args.quick else "20"
    for label, extra in (("aa", []), ("slow", ["--head-env", "ESPER_BENCH_SLOWDOWN=train_pass:0.05"])):
        command = [sys.executable, "-m", "tripwire", "bench-ab", "--base", str(ROOT), "--head", str(ROOT)]
        command += [
            "--device",
            args.device,
            "-k",
            "train_pass",
            "--budget-s",
            budget,
            "--out",
            str(args.out / f"ab-{label}"),
        ]
        if args.quick:
            command += ["--min-blocks", "4", "--max-blocks", "4"]
        done = subprocess.run([*command, *extra], cwd=ROOT, capture_output=True, text=True, check=False)
        print(done.stdout[-3000:], done.stderr[-1500:])
        outcomes.append(
            (label, done.returncode, next((row for row in done.stdout.splitlines() if "train_pass" in row), ""))
        )
    (_, aa_code, aa_line), (_, slow_code, slow_line) = outcomes
    if args.quick:  # the dry run's 4 blocks of 5 s resolve neither 5 % nor an A/A's spread on a shared CPU: each
        # pair must end in a verdict (0 same, 1 slower) on a measured row; the verdicts themselves are the device's
        ok = {aa_code, slow_code} <= {0, 1} and bool(aa_line) and bool(slow_line)
    else:
        ok = aa_code == 0 and slow_code == 1
    verdict(ok, f"A/A exit {aa_code} ({aa_line.strip()[:90]}); 5 % slower exit {slow_code} ({slow_line.strip()[:90]})")


def step_bench(args: argparse.Namespace) -> None:
    """The benchmark suite's baseline on the device, `--save`d under the output folder (quick: its collection only)."""
    if args.quick:
        command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "benchmarks"]
    else:
        command = [sys.executable, "-m", "tripwire.bench", "--suite", "benchmarks", "--device", args.device]
        command += ["--save", str(args.out / "baselines"), "--out", str(args.out / "bench-run")]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    print(done.stdout[-3000:], done.stderr[-1500:])
    verdict(
        done.returncode == 0,
        f"exit {done.returncode}" + ("" if args.quick else f"; {args.out / 'baselines' / 'bench'}"),
    )


# The runs whose host time the profile step splits (issue 55: on the H200 the GPU waits on the host); on a CPU only the
# eager one (a CUDA graph needs a GPU)
PROFILED = ("eager 1 env", "cuda graphs 1 env", "cuda graphs 4 envs")


def step_profile(args: argparse.Namespace) -> None:
    """Where an epoch's host time goes: each of PROFILED at the original's sizes under cProfile, its captures and
    warm-ups in two untimed epochs first; per run, ms of wall time per env-epoch and its functions by own time and by
    cumulative time, in `profile/<run>.txt` (a wait shows as the own time of the call that waits)."""
    import cProfile
    import dataclasses
    import io
    import pstats

    import torch

    from esper.nissa import TelemetryHub
    from workloads import GATE, ORIGINAL, EpochWorkload, bench_config

    size, epochs = (GATE, 1) if args.quick else (ORIGINAL, 3)
    variants = rate_variants(quick=False)
    on_gpu = args.device.startswith("cuda")
    folder = args.out / "profile"
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for label in (label for label in PROFILED if on_gpu or "cuda graphs" not in label):
        n_envs, options = variants[label]
        config = dataclasses.replace(bench_config(n_envs, size, device=args.device), **options)
        workload = EpochWorkload(config, TelemetryHub(), episodes=True)
        for _ in range(2):  # a graph's warm-up step, then its capture
            workload.prepare()
            workload.run()
        profiler, elapsed = cProfile.Profile(), 0.0
        for _ in range(epochs):
            workload.prepare()
            if on_gpu:
                torch.cuda.synchronize()
            start = time.perf_counter()
            profiler.enable()
            workload.run()
            profiler.disable()
            if on_gpu:
                torch.cuda.synchronize()
            elapsed += time.perf_counter() - start
        per_env_epoch = 1000 * elapsed / (epochs * n_envs)
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        text.write(
            f"{label}: {per_env_epoch:.1f} ms per env-epoch under cProfile, {epochs} epochs of {n_envs} env(s)\n"
        )
        stats.sort_stats("tottime").print_stats(40)
        stats.sort_stats("cumulative").print_stats(40)
        (folder / f"{label.replace(' ', '_')}.txt").write_text(text.getvalue(), encoding="utf-8")
        lines.append(f"{label} {per_env_epoch:.1f} ms per env-epoch")
        print(text.getvalue()[:3000], flush=True)
    verdict(bool(lines), "; ".join(lines) + "; profile/*.txt")


# What the graph_threads step's backstop allows a child for its imports (torch, the trainer), before the hang dump it
# arms after them: a loaded 2-core CI machine took over 5 s
_IMPORTS_S = 30.0


def step_graph_threads(args: argparse.Namespace) -> None:
    """`--cuda-graphs` with env worker threads, the pairing the option refuses: its first GPU run (2026-12-04) did not
    finish in 300 s and printed nothing. 4 envs run a few epochs with graphs in turn, then on 4 threads, each in a
    child process whose every thread's Python stack is dumped (`faulthandler`) if it outlives its share of the
    step's limit, which is what a hang needs to be diagnosed. Passed when the threaded run finishes with the in-turn
    run's bits (every env's model) and no capture failed; either way its rate and graph counts are printed."""
    from tripwire.bitwise.digest import combined_digest, short

    size, epochs, n_envs = ("GATE", 2, 2) if args.quick else ("ORIGINAL", 4, 4)
    limit = float(os.environ.get("DEVICE_STEP_LIMIT", "90"))
    runs: dict[str, dict[str, Any]] = {}
    for workers in (1, n_envs):
        code = "import sys; sys.path[:0] = sys.argv[1:3]\nimport steps; steps._graph_threads_child(*sys.argv[3:])"
        command = [sys.executable, "-c", code, str(ROOT / "benchmarks"), str(Path(__file__).parent)]
        command += [size, str(epochs), str(n_envs), str(workers), args.device, str(limit / 2 - 5)]
        try:
            backstop = limit / 2 + _IMPORTS_S
            done = subprocess.run(command, capture_output=True, text=True, timeout=backstop, check=False)
        except subprocess.TimeoutExpired as exc:  # faulthandler exits first; this is the backstop
            print((exc.stderr or b"")[-6000:] if isinstance(exc.stderr, bytes) else exc.stderr)
            verdict(False, f"{workers} worker thread(s): killed after {backstop:.0f} s")
            return
        print(done.stdout[-3000:], done.stderr[-8000:])
        if done.returncode:
            if "Thread 0x" in done.stderr:  # faulthandler's dump
                verdict(
                    False,
                    f"{workers} worker thread(s): no end in {limit / 2 - 5:.0f} s; every thread's stack in the log",
                )
            else:
                verdict(False, f"{workers} worker thread(s): exit {done.returncode}, {done.stderr.strip()[-200:]}")
            return
        runs["in turn" if workers == 1 else f"{workers} threads"] = json.loads(done.stdout.strip().splitlines()[-1])
    turn_run, thread_run = runs.values()
    same = turn_run["digests"] == thread_run["digests"]
    failures = turn_run["failures"] + thread_run["failures"]
    detail = "; ".join(
        f"{label}: {run['rate']:.1f} env-epochs/s, {run['captures']} captures, {run['replays']} replays, "
        f"{len(run['failures'])} failures"
        for label, run in runs.items()
    )
    fingerprint = short(combined_digest({str(env): digest for env, digest in enumerate(thread_run["digests"])}))
    verdict(
        same and not failures,
        f"{detail}; models {'equal' if same else 'DIFFER'} ({fingerprint}){'; ' if failures else ''}"
        + "; ".join(failures)[:300],
        runs=runs,
    )


def _graph_threads_child(size: str, epochs: str, n_envs: str, workers: str, device: str, dump_after: str) -> None:
    """One run of `step_graph_threads`: prints {rate, captures, replays, failures, digests} as its last line."""
    import dataclasses
    import faulthandler

    import torch

    import workloads
    from esper.nissa import TelemetryHub
    from esper.tolaria.graphs import GraphedSteps
    from tripwire.bitwise.digest import combined_digest, state_digest

    # Armed after the imports: armed before, a dump taken inside torch's import is over faulthandler's 100 frames and
    # loses this function's own; the parent's backstop allows the imports `_IMPORTS_S` on top
    faulthandler.dump_traceback_later(float(dump_after), exit=True)  # every thread's stack, then exit 1
    envs, threads = int(n_envs), int(workers)
    config = dataclasses.replace(
        workloads.bench_config(envs, getattr(workloads, size), device=device), env_workers=threads
    )
    torch.set_num_threads(1 if threads > 1 else torch.get_num_threads())
    workload = workloads.EpochWorkload(config, TelemetryHub(), episodes=True)
    engine = workload.parts.engine
    engine.graphs = graphs = GraphedSteps()  # past the config's refusal: this pairing is what the step tries
    start = time.perf_counter()
    for _ in range(int(epochs)):
        workload.prepare()
        workload.run()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    rate = envs * int(epochs) / (time.perf_counter() - start)
    digests = [combined_digest(state_digest(runtime.model.state_dict())) for runtime in workload.runtimes]
    faulthandler.cancel_dump_traceback_later()
    report = {"rate": rate, "captures": graphs.captures, "replays": graphs.replays}
    print(json.dumps({**report, "failures": graphs.failures, "digests": digests}))


STEPS = {name.removeprefix("step_"): value for name, value in dict(globals()).items() if name.startswith("step_")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("step", choices=sorted(STEPS))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--original", type=Path)
    parser.add_argument("--scenario", default="a_baseline")
    parser.add_argument("--save", type=Path)
    args = parser.parse_args()
    if args.device.startswith("cuda"):
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    STEPS[args.step](args)


if __name__ == "__main__":
    main()
