"""The GPU check in one command: what the first device run did by hand, as a driver with a deadline.

    python tests/device/check.py --device cuda --out build/gpu          # on the device machine (nox -s gpu)
    python tests/device/check.py --device cpu --quick --out build/gpu   # the dry run CI makes

Steps, in order of value, each in its own process with its own limit under one deadline (`--deadline`, default 480 s,
inside the 8 minutes a device session allows):

- `sync`: every eager scenario (and the compiled one) on the device under `SyncCounter(cuda_cross_check=True)`:
  syncs per site, torch's warnings named at their lines and compared (`missed` must be 0), the GPU's sync budgets
  (`baselines/sync_budgets/` under the device's context) and `device/<device>.json`, the recorded run the CPU
  accounting is checked against (`tests/guardrails/test_device_accounting.py`);
- `bitwise`: a_baseline twice, in two processes: identical (deterministic kernels are the default), and its
  trajectory golden under the device's context;
- `tests`: the tests that take a CUDA path when one exists;
- `timer`: `CUDATimer` against the wall clock around `synchronize`, on work of four lengths;
- `rate`: throughput, env-epochs/s: ours at 1 and 4 envs (eager, bf16, `--gpu-preload`, inductor), and the
  original when `--original PATH` names a checkout (esper-lite 11ebe0f6's `src`);
- `graph_threads`: `--cuda-graphs` with env worker threads, the pairing the option refuses until a GPU run shows it
  works: 4 envs in turn, then on 4 threads, the same bits asked of both; a run that hangs dumps every thread's stack;
- `profile`: where an epoch's host time goes, under cProfile: 1 env eager and with `--cuda-graphs`, 4 envs with
  graphs, each run's functions by own and cumulative time in `profile/<run>.txt`;
- `ab`: the paired A/B on the device: A/A, and a 5 % train-pass slowdown it must call a regression;
- `bench`: the benchmark suite's `--save` (`baselines/bench/<device>.json`).

Everything goes under `--out`: `summary.txt` (printed at the end), `summary.json`, a log per step, and `baselines/`
laid out as the repository's, for review and copying; with `--archive FILE`, also one .tar.gz of it, rewritten after
every step. On the lent device machine, whose image lacks some of the test tools and where nothing of the project is
built, `tests/device/on_device.sh` runs it from the source tree with the wheels `nox -s gpu_pack` made here
(`tests/device/rehearse.py` dry-runs exactly that in an environment of the image's packages).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STEPS = ("sync", "bitwise", "tests", "timer", "rate", "graph_threads", "profile", "ab", "bench")
LIMITS = {
    "sync": 150,
    "bitwise": 120,
    "tests": 90,
    "timer": 40,
    "rate": 200,
    "ab": 120,
    "bench": 150,
    "graph_threads": 90,
    "profile": 90,
}
ARCHIVE_FILE_LIMIT = 4 * 2**20  # a file in the archive at most (scenario work folders can hold large telemetry)
QUICK_LIMITS = {
    "sync": 150,
    "bitwise": 120,
    "tests": 240,
    "timer": 30,
    "rate": 120,
    "ab": 150,
    "bench": 60,
    "graph_threads": 120,
    "profile": 60,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tests/device/check.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (the device run) or cpu (a dry run)")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "gpu")
    parser.add_argument("--steps", nargs="*", default=list(STEPS), choices=STEPS, help="which steps (default: all)")
    parser.add_argument("--deadline", type=float, default=480.0, help="seconds for every step together")
    parser.add_argument("--quick", action="store_true", help="small sizes: a dry run that checks the check runs")
    parser.add_argument("--original", type=Path, help="the original's source folder, for the rate step")
    parser.add_argument("--archive", type=Path, help="also pack the folder into this .tar.gz after every step")
    args = parser.parse_args(argv)
    if args.original is not None:  # the rate step runs the original from another folder: a relative path misses it
        args.original = args.original.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    summary: list[str] = [_environment(args.device)]
    results: dict[str, dict[str, object]] = {}
    started = time.monotonic()
    for step in args.steps:
        left = args.deadline - (time.monotonic() - started)
        limit = min((QUICK_LIMITS if args.quick else LIMITS)[step], left)
        if limit < 20:
            results[step] = {"status": "skipped", "detail": f"{left:.0f} s left of the deadline"}
            summary.append(f"{step:8s} skipped: {left:.0f} s left of the deadline")
            continue
        results[step] = _run_step(step, args, limit)
        summary.append(
            f"{step:8s} {results[step]['status']:7s} {results[step]['seconds']:5.0f} s  {results[step]['detail']}"
        )
        _write_summary(args, summary, results)
    summary.append(f"all steps in {time.monotonic() - started:.0f} s (deadline {args.deadline:.0f} s)")
    sys.stdout.write(_write_summary(args, summary, results))
    return 0 if all(result["status"] in ("passed", "skipped") for result in results.values()) else 1


def _write_summary(args: argparse.Namespace, summary: list[str], results: dict[str, dict[str, object]]) -> str:
    """summary.txt and summary.json as they stand, and the archive: a step past the call's limit loses only itself."""
    text = "\n".join(summary) + "\n"
    (args.out / "summary.txt").write_text(text, encoding="utf-8")
    (args.out / "summary.json").write_text(json.dumps(results, indent=1, sort_keys=True), encoding="utf-8")
    if args.archive is not None:
        pack_folder(args.out, args.archive)
    return text


def pack_folder(folder: Path, archive: Path, largest: int = ARCHIVE_FILE_LIMIT) -> list[str]:
    """`folder` as one .tar.gz, whole or not at all (a device call brings back 8 files, 16 MiB each): files over
    `largest` bytes stay out, and are named in the archive's `left_out.txt`; the archive never packs itself. Returns
    what stayed out."""
    left_out: list[str] = []
    partial = archive.with_name(archive.name + ".partial")
    itself = {f"{folder.name}/{path.resolve().relative_to(folder.resolve())}" for path in (archive, partial)
              if path.resolve().is_relative_to(folder.resolve())}  # fmt: skip

    def keep(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if member.name in itself:
            return None
        if member.isfile() and member.size > largest:
            left_out.append(f"{member.name} ({member.size} bytes)")
            return None
        return member

    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(partial, "w:gz") as tar:
        tar.add(folder, arcname=folder.name, filter=keep)
        if left_out:
            note = ("\n".join(left_out) + "\n").encode()
            info = tarfile.TarInfo(f"{folder.name}/left_out.txt")
            info.size = len(note)
            tar.addfile(info, io.BytesIO(note))
    os.replace(partial, archive)
    return left_out


def _environment(device: str) -> str:
    import torch

    name = torch.cuda.get_device_name(0) if device.startswith("cuda") and torch.cuda.is_available() else "cpu"
    return (
        f"device {device} ({name}), torch {torch.__version__}, python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
    )


def _run_step(step: str, args: argparse.Namespace, limit: float) -> dict[str, object]:
    """One step in its own process: its last stdout line is its one-line verdict (JSON)."""
    log = args.out / f"{step}.log"
    command = [sys.executable, str(Path(__file__).with_name("steps.py")), step, "--device", args.device]
    command += ["--out", str(args.out)] + (["--quick"] if args.quick else [])
    command += ["--original", str(args.original)] if args.original else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    env |= {"PYTHONHASHSEED": "0", "CUBLAS_WORKSPACE_CONFIG": ":4096:8", "DEVICE_STEP_LIMIT": f"{limit:.0f}"}
    start = time.monotonic()
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=limit, check=False)
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as expired:
        output, code = f"{expired.stdout or ''}{expired.stderr or ''}\nTIMEOUT after {limit:.0f} s", -1
    log.write_text(output if isinstance(output, str) else str(output), encoding="utf-8")
    seconds = time.monotonic() - start
    verdict = next((line for line in reversed(output.splitlines()) if line.startswith("{")), "")
    try:
        result: dict[str, object] = json.loads(verdict)
    except json.JSONDecodeError:
        tail = output.strip().splitlines()[-1:] or ["no output"]
        result = {"status": "failed", "detail": f"exit {code}: {tail[0][:160]} (see {log.name})"}
    if code != 0 and result.get("status") == "passed":
        result["status"] = "failed"
    result["seconds"] = round(seconds, 1)
    return result


if __name__ == "__main__":
    sys.exit(main())
