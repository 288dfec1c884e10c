"""A fork server for the history walk: torch and tripwire imported once per job, a forked child per commit.

A cold commit spends about 2 s of its 3 s importing torch and tripwire in a fresh `python -P -m tripwire run`, and a
child forked after torch alone still spent about 1.7 s on what every recording imports and computes whatever its
tree (the map of installed distributions, the sync hooks) and what most loops import themselves (dynamo, sympy:
`PRELOADED`). A `ForkServer` is one process, started with the walk's environment (the CPU pin and the one-thread
settings set before torch is imported, as a worker's are) in a scratch folder, that imports torch and tripwire's
recording code, runs `tripwire.outside.record.warm` and `preload` for the rest, collects its garbage (`settle`) and
then, for each commit, forks: the child detaches from the server's pipes, sends its output to the commit's
`worker.log`, moves to its own scratch folder and runs exactly what the worker runs
(`tripwire.outside.commands.run_main`, with the same arguments), then exits with its code. Nothing of a tree is ever
imported by the server, so every child starts from the same state: the tree's modules are imported by the child alone
and die with it.

The protocol is one JSON line each way on the server's stdin and stdout: `{"argv", "cwd", "log"}` in, then
`{"pid": child}` and `{"code": exit code}` out. A child that runs past the walk's timeout is killed by its process
group (it is a session leader), exactly as a timed-out worker is. Where `os.fork` does not exist, or the server cannot
start, the walk runs each commit in a fresh process as before.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PIN_VARIABLE = "TRIPWIRE_FORKSERVER_PIN"  # the walk's --cpu-pin, for the server to apply before torch


class ForkServerError(RuntimeError):
    """The server died or answered something else than its protocol: the caller falls back to a fresh process."""


class ForkServer:
    """One server process (see the module docstring); `run` is called by one thread at a time."""

    def __init__(self, python: str, env: Mapping[str, str], cwd: Path) -> None:
        self._process = subprocess.Popen(
            [python, "-P", "-m", "tripwire.history.forkserver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=cwd,
            env=dict(env),
            text=True,
            start_new_session=True,
        )
        ready = self._read(timeout=300.0)
        if ready.get("ready") is not True:
            self.close()
            raise ForkServerError(f"the fork server did not start: {ready}")
        self.child: int | None = None

    def _read(self, timeout: float | None) -> dict[str, Any]:
        stdout = self._process.stdout
        assert stdout is not None
        if timeout is not None:
            ready, _, _ = select.select([stdout], [], [], timeout)
            if not ready:
                return {}
        line = stdout.readline()
        if not line:
            raise ForkServerError("the fork server exited")
        data = json.loads(line)
        if not isinstance(data, dict):
            raise ForkServerError(f"the fork server said {line.strip()!r}")
        return data

    def run(self, argv: list[str], cwd: Path, log: Path, timeout: float) -> int | None:
        """Run one commit's worker in a forked child; its exit code, or None when it ran past `timeout` (killed)."""
        stdin = self._process.stdin
        assert stdin is not None
        stdin.write(json.dumps({"argv": argv, "cwd": str(cwd), "log": str(log)}) + "\n")
        stdin.flush()
        self.child = int(self._read(timeout=60.0)["pid"])
        deadline = time.monotonic() + timeout
        try:
            while True:
                answer = self._read(timeout=max(0.0, deadline - time.monotonic()))
                if "code" in answer:
                    return int(answer["code"])
                if time.monotonic() >= deadline:
                    self.kill_child()
                    self._read(timeout=60.0)  # the server reports the killed child's code
                    return None
        finally:
            self.child = None

    def kill_child(self) -> None:
        """Kill the running child's process group (a no-op when none runs)."""
        if self.child is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.child, signal.SIGKILL)

    def close(self) -> None:
        self.kill_child()
        if self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait()
        for stream in (self._process.stdin, self._process.stdout):
            if stream is not None:
                stream.close()


def _child(request: Mapping[str, Any]) -> None:
    """In the forked child: detach, redirect, run the worker's command, exit with its code (never returns)."""
    code = 1
    try:
        os.setsid()  # its own process group, so a timeout kills whatever it started too
        # the server's pipes (fds 0 and 1) are replaced below: the child never reads a request or writes an answer
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own descriptors, kept for its life
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        os.chdir(request["cwd"])
        from tripwire.outside.commands import run_main

        code = run_main(list(request["argv"]))
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:  # the worker's own failure: its traceback goes to worker.log, as a fresh process's would
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


# The heavy parts of torch a loop imports itself: `torch.compile`, a `@torch.compiler.disable` at a module's top and
# `torch.use_deterministic_algorithms` import dynamo and inductor's config (with sympy and triton, about 2 s of a 3 s
# commit on esper-lite). They are torch's, never a tree's: imported once here, as every walk did until a recording
# stopped importing them itself (a walk then cost 1.5x the CPU: docs/measurements.md, "The cost of a history walk").
PRELOADED = ("torch._dynamo", "torch._inductor.config")


def preload() -> None:
    """Import `PRELOADED` in the server; one that fails to import here is left to fail in a child, as it would."""
    for name in PRELOADED:
        with contextlib.suppress(Exception):
            importlib.import_module(name)


def settle() -> None:
    """One full garbage collection, the server's last step before it forks. Until then the collector had last run a
    full pass early in torch's import: the long-lived objects counted since (the whole preloaded heap, about 320,000)
    were then far more than a quarter of those it had counted, so every child that built a few tens of thousands of
    objects of its own ran a full pass over the server's heap, and that pass writes every object's header: about
    14,000 pages copied on write and 0.25 s of CPU a commit, paid by every commit that crashes or is `n/a` (a child
    that trained esper-lite's PPO update ran no full pass either way). Collected here once, a child runs a full pass
    only when it builds a quarter of the heap again, as a process that had imported the same would. Nothing the child
    does changes: only when the collector runs."""
    gc.collect()


def serve() -> None:
    """The server's loop (see the module docstring)."""
    if os.environ.get(PIN_VARIABLE, "avx2") == "avx2":
        from tripwire.common.numerics import apply_portable_cpu_env

        apply_portable_cpu_env()  # before torch, as `python -m tripwire run` does; an explicit setting wins
    import torch  # noqa: F401 - imported once here, shared by every child

    import tripwire.outside.commands  # noqa: F401
    from tripwire.outside.record import warm

    warm()  # what every child would import and compute first, whatever its tree
    preload()  # what most loops import themselves, whatever their commit
    settle()

    answers = sys.stdout
    requests = sys.stdin
    print(json.dumps({"ready": True}), file=answers, flush=True)
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        print(json.dumps({"pid": pid}), file=answers, flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"code": os.waitstatus_to_exitcode(status)}), file=answers, flush=True)


if __name__ == "__main__":
    serve()
