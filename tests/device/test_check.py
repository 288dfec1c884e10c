"""The GPU check's dry run, as CI makes it: every step on CPU at small sizes, one folder, one summary."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_gpu_check_runs_every_step_on_cpu_and_writes_one_folder(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(ROOT / "tests" / "device" / "check.py"), "--device", "cpu", "--quick"]
    command += ["--archive", str(tmp_path / "back" / "gpu.tar.gz")]  # what a device call brings back
    done = subprocess.run([*command, "--out", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    with tarfile.open(tmp_path / "back" / "gpu.tar.gz") as tar:
        packed = tar.getnames()
        summary = tar.extractfile(f"{tmp_path.name}/summary.json")
        assert summary is not None and json.loads(summary.read()) == json.loads((tmp_path / "summary.json").read_text())
    assert f"{tmp_path.name}/baselines/sync_budgets/a_baseline.json" in packed
    assert not any(name.startswith(f"{tmp_path.name}/back/gpu.tar.gz") for name in packed)  # not itself
    results = json.loads((tmp_path / "summary.json").read_text(encoding="utf-8"))
    steps = ("sync", "bitwise", "tests", "timer", "rate", "graph_threads", "profile", "ab", "bench")
    assert sorted(results) == sorted(steps)
    assert all(result["status"] == "passed" for result in results.values()), results
    assert (tmp_path / "summary.txt").read_text(encoding="utf-8") in done.stdout
    assert (tmp_path / "device" / "cpu.json").is_file()  # the recorded run the CPU accounting is checked against
    assert (tmp_path / "baselines" / "sync_budgets" / "a_baseline.json").is_file()
    assert "29 checkpoints identical" in results["bitwise"]["detail"]
    assert "eager 1 env" in results["profile"]["detail"] and (tmp_path / "profile" / "eager_1_env.txt").is_file()


def test_a_step_past_the_deadline_is_skipped_and_said(tmp_path: Path) -> None:
    command = [sys.executable, str(ROOT / "tests" / "device" / "check.py"), "--device", "cpu", "--quick"]
    command += ["--steps", "timer", "--deadline", "5", "--out", str(tmp_path)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and "timer    skipped: 5 s left of the deadline" in done.stdout


def test_every_run_of_the_device_rate_step_is_a_valid_config() -> None:
    """The full rate step runs only on a device; each of its runs must at least build there (a misspelt option
    value, `AmpMode.BFLOAT16`, once waited for the first GPU session to fail)."""
    sys.path[:0] = [str(ROOT / "tests" / "device"), str(ROOT / "benchmarks")]
    try:
        import dataclasses

        from steps import rate_variants

        from workloads import ORIGINAL, bench_config

        variants = rate_variants(quick=False)
    finally:
        del sys.path[:2]
    assert len(variants) > len(rate_variants(quick=True))
    for label, (n_envs, options) in variants.items():
        config = dataclasses.replace(bench_config(n_envs, ORIGINAL, device="cuda"), **options)
        config.validate()
        assert config.n_envs == n_envs, label


def test_the_archive_leaves_out_what_a_device_call_could_not_bring_back_and_says_so(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "device"))
    try:
        from check import pack_folder
    finally:
        sys.path.remove(str(ROOT / "tests" / "device"))
    folder = tmp_path / "gpu"
    (folder / "work").mkdir(parents=True)
    (folder / "summary.txt").write_text("sync passed\n")
    (folder / "work" / "events.jsonl").write_bytes(b"x" * 2048)
    archive = folder / "gpu.tar.gz"  # inside the folder it packs: never packed into itself
    archive.write_bytes(b"an earlier archive")
    assert pack_folder(folder, archive, largest=1024) == ["gpu/work/events.jsonl (2048 bytes)"]
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == ["gpu", "gpu/left_out.txt", "gpu/summary.txt", "gpu/work"]
        note = tar.extractfile("gpu/left_out.txt")
        assert note is not None and note.read() == b"gpu/work/events.jsonl (2048 bytes)\n"
    assert not (folder / "gpu.tar.gz.partial").exists()


def test_the_graph_threads_step_names_a_run_that_does_not_end_and_shows_its_threads(tmp_path: Path) -> None:
    """A hang (here: a run given 0.1 s) fails the step, and every thread's stack is in its output for diagnosis."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DEVICE_STEP_LIMIT": "10.2"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    command = [sys.executable, str(ROOT / "tests" / "device" / "steps.py"), "graph_threads", "--device", "cpu"]
    done = subprocess.run([*command, "--quick", "--out", str(tmp_path)], env=env, capture_output=True, text=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == "failed" and "no end in 0 s" in result["detail"], result
    assert "Thread 0x" in done.stdout and "_graph_threads_child" in done.stdout


def test_every_test_that_skips_without_cuda_is_run_by_the_devices_test_step() -> None:
    """A test that skips without CUDA proves nothing until the device check runs it: each is in `steps.GPU_TESTS`, its
    file whole or the test by its node id. Three of torch's-detector checks were written and never listed there."""
    spec = importlib.util.spec_from_file_location("device_steps", ROOT / "tests" / "device" / "steps.py")
    assert spec is not None and spec.loader is not None
    steps = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(steps)
    listed = set(steps.GPU_TESTS)
    missing = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        relative = path.relative_to(ROOT).as_posix()
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
                continue
            marks = [ast.unparse(decorator) for decorator in node.decorator_list]
            cuda_only = any("skipif" in mark and "cuda.is_available()" in mark for mark in marks)
            if cuda_only and relative not in listed and f"{relative}::{node.name}" not in listed:
                missing.append(f"{relative}::{node.name}")
    assert not missing, f"add to tests/device/steps.py GPU_TESTS: {missing}"
