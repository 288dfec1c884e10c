"""A warm launcher for kill tests: imports the trainer once, then forks one real CLI process per request.

Importing torch costs seconds on the shared test machine; ten kill points as ten cold `python -m
esper.scripts.train` processes would take over a minute. This launcher pays the import once and `os.fork()`s a
child per run that executes `esper.scripts.train.main(argv)` exactly as `python -m esper.scripts.train` does
(same argument parsing, same signal handlers, same exit code). Each child is a separate process that the test
kills for real with SIGKILL. Before serving, the parent runs one tiny training in-process so that the children
also inherit the one-time costs of a first run (lazy imports, kernel and data set initialisation); with
OMP_NUM_THREADS=1 that run leaves no worker thread behind (the telemetry hub's thread is joined on close).

Protocol, one JSON object per line on stdin, one reply per line on stdout:
    {"run": [argv...], "log": "/path/to/output"}  ->  {"pid": 1234}   (optional "path": folders put first on
                                                                         sys.path in the child, for a user's loader)
    {"wait": 1234}                                ->  {"pid": 1234, "returncode": -9}   (negative: killed by signal)
"""

from __future__ import annotations

import json
import os
import sys

import esper.scripts.train as train_cli
import esper.simic.training.vectorized  # noqa: F401  (the warm import: torch and the whole trainer)


def _child(argv: list[str], log: str, path: list[str]) -> None:
    sys.path[:0] = path
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    code = 1
    try:
        code = train_cli.main(argv)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _returncode(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


WARM_UP = ["ppo", "--rounds", "1", "--envs", "2", "--episode-length", "2", "--train-samples", "50"]
WARM_UP += ["--val-samples", "50", "--batch-size", "25", "--memory-size", "32", "--telemetry-level", "off", "--quiet"]


def serve() -> None:
    if train_cli.main(WARM_UP) != 0:
        raise SystemExit("fork launcher: the warm-up run failed")
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if "run" in request:
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                _child(list(request["run"]), str(request["log"]), list(request.get("path", [])))
            reply = {"pid": pid}
        else:
            pid, status = os.waitpid(int(request["wait"]), 0)
            reply = {"pid": pid, "returncode": _returncode(status)}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    serve()
