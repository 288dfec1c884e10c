"""A persistent benchmark worker: one process per side of a paired A/B, timing units on request.

    python -m tripwire.bench.worker --suite workloads:paired_benchmarks [--device cpu]

The driver (`tripwire.bench.paired`) starts one worker per side with that side's tree first on `PYTHONPATH`, so
the suite's workloads import that tree's trainer. Requests and answers are JSON lines on stdin / stdout (the real
stdout is kept for the protocol; anything the trainer prints goes to stderr):

    {"op": "hello"}                          -> {"ok": true, "benchmarks": {name: settings}, "context": {...}}
    {"op": "run", "name": N, "units": k}     -> {"ok": true, "wall_ms": [...], "cpu_ms": [...], "cpus": n}  (k units
                                                on n CPUs)
    {"op": "fresh", "name": N, "warmup": k}  -> {"ok": true}  (a new workload instance, k discarded units)
    {"op": "proxies", "name": N}             -> {"ok": true, "proxies": {"aten_ops": n, "syncs": n}}
    {"op": "first", "name": N}               -> {"ok": true, "seconds": s}  (building and running its first unit)
    {"op": "quit"}                           -> the worker exits

A unit is `runs_per_unit` calls of the workload's `run()`, each after an untimed `prepare()`. The worker times
each unit on the wall clock (CUDA events on a GPU, after a synchronize) and on the process CPU clock; the driver
chooses which one it gates. A failing request answers `{"ok": false, "error": "one line"}`.

`--cpu N` (the driver passes the same N to both sides): a benchmark that computes on one thread in all (one torch
thread and no worker threads of its own: `PairedBench.workers`, declared or measured) runs on CPU N only, so base
and head always compute on the same core; a benchmark of more threads, torch's or its own, keeps every CPU the
process started with (pinning one of two env workers' threads to one core halves its rate).
Unpinned, the scheduler leaves each worker on a core of its own, and on a VM one core can run steadily slower than
the other: an unchanged tree then reads as a paired change of up to 20 % that no number of blocks removes.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping
from typing import IO, Any

from tripwire.bench.paired_spec import PairedBench, Workload

PARALLEL_RATIO = 1.3  # CPU time over wall time from which an undeclared workload counts as computing on threads
PARALLELISM_UNITS = 3  # warm units timed to measure it


def load_suite(spec: str) -> Mapping[str, PairedBench]:
    """`module:function` -> the function's `name -> PairedBench` mapping."""
    module_name, _, function_name = spec.partition(":")
    if not module_name or not function_name:
        raise ValueError(f"--suite {spec!r}: expected module:function, e.g. workloads:paired_benchmarks")
    factory: Callable[[], Mapping[str, PairedBench]] = getattr(importlib.import_module(module_name), function_name)
    suite = factory()
    for name, bench in suite.items():
        if not isinstance(bench, PairedBench):
            raise TypeError(f"{spec}: {name!r} is a {type(bench).__name__}, not a tripwire PairedBench")
    return suite


def cpu_model() -> str:
    """The CPU model from /proc/cpuinfo (Linux), else platform.processor() or the architecture."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def context(device: str, cpu: int | None = None) -> dict[str, str]:
    """Where this side runs: the torch build, its threads, the CPU and the source tree of the trainer."""
    import torch

    return {
        "torch": torch.__version__,
        "threads": str(torch.get_num_threads()),
        "device": device,
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "pid": str(os.getpid()),
        "aslr": aslr_state(),
        "single_thread_cpu": "unpinned" if cpu is None else str(cpu),
    }


def aslr_state() -> str:
    """ "off" when this process runs without address-space randomization (the driver asks for that), else "on"."""
    try:
        with open("/proc/self/personality", encoding="ascii") as handle:
            return "off" if int(handle.read().strip(), 16) & 0x0040000 else "on"
    except (OSError, ValueError):
        return "unknown"


class UnitTimer:
    """Times one unit: wall clock (CUDA events after a synchronize on a GPU) and process CPU time."""

    def __init__(self, device: str) -> None:
        import torch

        self.cuda = device.startswith("cuda") and torch.cuda.is_available()
        self.device = device

    def time(self, workload: Workload, runs: int) -> tuple[float, float]:
        import torch

        wall = cpu = 0.0
        for _ in range(runs):
            workload.prepare()
            if self.cuda:
                torch.cuda.synchronize(self.device)
                start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start_event.record()
            cpu_start, wall_start = time.process_time_ns(), time.perf_counter_ns()
            workload.run()
            if self.cuda:
                end_event.record()
                end_event.synchronize()
                wall += float(start_event.elapsed_time(end_event))
            else:
                wall += (time.perf_counter_ns() - wall_start) / 1e6
            cpu += (time.process_time_ns() - cpu_start) / 1e6
        return wall, cpu


class Worker:
    """Holds the suite and one live workload per benchmark; answers the driver's requests."""

    def __init__(self, suite: Mapping[str, PairedBench], device: str, cpu: int | None = None) -> None:
        self.suite = suite
        self.device = device
        self.cpu = cpu
        self.timer = UnitTimer(device)
        self.live: dict[str, Workload] = {}
        self.default_threads: int | None = None
        self.started_on = set(os.sched_getaffinity(0)) if cpu is not None else set()
        self.parallelism: dict[str, float] = {}  # CPU time over wall time of benchmarks with undeclared workers
        self.first_unit_s: dict[str, float] = {}  # the first unit of each benchmark: building it, compiling it
        if cpu is not None and cpu not in self.started_on:
            raise ValueError(f"--cpu {cpu} is not a CPU this process may use (allowed: {sorted(self.started_on)})")

    def bench(self, name: str) -> PairedBench:
        if name not in self.suite:
            raise KeyError(f"no paired benchmark {name!r} on this side (it has {', '.join(sorted(self.suite))})")
        return self.suite[name]

    def set_threads(self, name: str, bench: PairedBench) -> None:
        import torch

        if self.default_threads is None:
            self.default_threads = torch.get_num_threads()
        torch.set_num_threads(bench.threads or self.default_threads)
        if self.cpu is not None:
            wanted = self.placement(name, bench)
            if os.sched_getaffinity(0) != wanted:
                os.sched_setaffinity(0, wanted)

    def placement(self, name: str, bench: PairedBench) -> set[int]:
        """The CPUs a benchmark computes on: the shared CPU when it runs one thread in all (one torch thread and
        one worker of its own), else every CPU the process started with. Undeclared workers are measured."""
        assert self.cpu is not None
        if bench.threads != 1:
            return self.started_on
        workers = bench.workers
        if workers is None:
            if name not in self.parallelism:
                self.parallelism[name] = self.measure_parallelism(bench)
            workers = 2 if self.parallelism[name] >= PARALLEL_RATIO else 1
        return {self.cpu} if workers == 1 else self.started_on

    def measure_parallelism(self, bench: PairedBench) -> float:
        """Process CPU time over wall time of a warm unit on every CPU: about 1 for one thread in all, more for a
        workload that computes on threads of its own. The most of PARALLELISM_UNITS units: another process taking
        a core lowers the ratio of a unit it overlaps (it read as one thread, and was pinned), never raises it."""
        if os.sched_getaffinity(0) != self.started_on:
            os.sched_setaffinity(0, self.started_on)
        workload = bench.make_warm(1)
        ratios = []
        for _ in range(PARALLELISM_UNITS):
            wall, cpu = self.timer.time(workload, bench.runs_per_unit)
            ratios.append(cpu / wall if wall > 0 else 1.0)
        return max(ratios)

    def hello(self) -> dict[str, Any]:
        settings = {
            name: {
                "units": dict(bench.units),
                "runs_per_unit": bench.runs_per_unit,
                "tolerance": bench.tolerance,
                "threads": bench.threads,
                "workers": bench.workers,
                "proxies": bench.proxies,
            }
            for name, bench in self.suite.items()
        }
        return {"benchmarks": settings, "context": context(self.device, self.cpu)}

    def run(self, name: str, units: int) -> dict[str, Any]:
        bench = self.bench(name)
        self.set_threads(name, bench)
        if name not in self.live:
            self.live[name] = self.first_instance(name, bench)
        walls, cpus = [], []
        for _ in range(units):
            wall, cpu = self.timer.time(self.live[name], bench.runs_per_unit)
            walls.append(wall)
            cpus.append(cpu)
        return {"wall_ms": walls, "cpu_ms": cpus, "cpus": len(os.sched_getaffinity(0))}

    def first_instance(self, name: str, bench: PairedBench) -> Workload:
        """The benchmark's first instance, built and run once: that one unit's wall time, what a compiled workload's
        first call costs to compile, is kept apart (`first_unit_s`), never among the measured units."""
        start = time.perf_counter()
        workload = bench.make()
        for _ in range(bench.runs_per_unit):
            workload.prepare()
            workload.run()
        self.first_unit_s[name] = time.perf_counter() - start
        return workload

    def fresh(self, name: str, warmup: int) -> dict[str, Any]:
        """Replace the live instance with a freshly built one and warm it up (untimed): its memory layout, and
        the timing luck that comes with it, is drawn anew, so that one instance's layout cannot bias a side."""
        bench = self.bench(name)
        self.set_threads(name, bench)
        self.live.pop(name, None)
        self.live[name] = bench.make_warm(warmup)
        return {}

    def proxies(self, name: str) -> dict[str, Any]:
        """Aten ops and host syncs of one `run()`, each on its own freshly built workload."""
        from tripwire.bench.ops import OpCounter
        from tripwire.sync.counter import SyncCounter

        bench = self.bench(name)
        self.set_threads(name, bench)
        counted = bench.make()
        counted.prepare()
        with OpCounter() as ops:
            counted.run()
        counted = bench.make()
        counted.prepare()
        with SyncCounter() as syncs:
            counted.run()
        return {"proxies": {"aten_ops": ops.total, "syncs": syncs.total}}

    def answer(self, request: Mapping[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "hello":
            return self.hello()
        if op == "run":
            return self.run(str(request["name"]), int(request.get("units", 1)))
        if op == "first":
            return {"seconds": self.first_unit_s.get(str(request["name"]))}
        if op == "proxies":
            return self.proxies(str(request["name"]))
        if op == "fresh":
            return self.fresh(str(request["name"]), int(request.get("warmup", 0)))
        raise ValueError(f"unknown request op {op!r}")


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:400]


def serve(worker: Worker, requests: IO[str], answers: IO[str]) -> None:
    for line in requests:
        request = json.loads(line)
        if request.get("op") == "quit":
            return
        try:
            answer = {"ok": True, **worker.answer(request)}
        except Exception as exc:  # every failure goes back to the driver as one line; the worker keeps serving
            answer = {"ok": False, "error": one_line(exc)}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


def protocol_stdout() -> IO[str]:
    """Keep the real stdout for the protocol and point fd 1 (and sys.stdout) at stderr for everything else."""
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return protocol


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tripwire.bench.worker", description=__doc__.splitlines()[0])
    parser.add_argument("--suite", required=True, help="module:function returning name -> PairedBench")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--cpu", type=int, help="run benchmarks of one thread in all on this CPU only (same on both sides)"
    )
    args = parser.parse_args(argv)
    answers = protocol_stdout()
    try:
        worker = Worker(load_suite(args.suite), args.device, args.cpu)
    except Exception as exc:  # the driver reads this line and names the side whose suite failed to load
        answers.write(json.dumps({"ok": False, "error": one_line(exc)}) + "\n")
        answers.flush()
        return 1
    answers.write(json.dumps({"ok": True, "ready": True}) + "\n")
    answers.flush()
    serve(worker, sys.stdin, answers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
