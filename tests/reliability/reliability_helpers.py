"""Shared pieces of the reliability tests: tiny run arguments, strict events.jsonl reading, the warm launcher."""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TINY = ("--train-samples", "100", "--val-samples", "50", "--batch-size", "25", "--episode-length", "3")
SMALL_POLICY = ("--memory-size", "32")
WIRE_KEYS = {"event_id", "event_type", "timestamp", "env_id", "epoch", "severity", "data"}
ROUND_END = "throughput"  # the ANALYTICS_SNAPSHOT kind that is the last event of every round


def child_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def ppo_argv(telemetry: Path, run_name: str, save: Path, rounds: int = 3, *extra: str) -> list[str]:
    return [
        "ppo",
        "--task",
        "cifar_baseline",
        "--rounds",
        str(rounds),
        "--envs",
        "2",
        *TINY,
        "--telemetry-dir",
        str(telemetry),
        "--run-name",
        run_name,
        "--save",
        str(save),
        "--quiet",
        *SMALL_POLICY,
        *extra,
    ]


def complete_lines(path: Path, *, killed: bool = False) -> list[dict[str, Any]]:
    """Parse events.jsonl strictly: every line ends in a newline and is one JSON object with the wire keys.

    `killed`: the writer died of SIGKILL, which may cut its last line short, but only where Linux stops a write
    when a fatal signal is pending: at a page boundary (esper.nissa.backends). That fragment is dropped; one
    anywhere else fails.
    """
    raw = path.read_bytes() if path.exists() else b""
    if killed and raw and not raw.endswith(b"\n"):
        assert len(raw) % mmap.PAGESIZE == 0, f"{path}: the last line is cut at byte {len(raw)}, not a page boundary"
        raw = raw[: raw.rfind(b"\n") + 1]
    assert raw == b"" or raw.endswith(b"\n"), f"{path}: the last line is partial: {raw[-80:]!r}"
    events = []
    for number, line in enumerate(raw.decode().splitlines(), start=1):
        event = json.loads(line)  # a partial or interleaved line fails here, naming nothing else
        assert isinstance(event, dict) and set(event) >= WIRE_KEYS, f"{path}:{number}: not a complete event"
        events.append(event)
    return events


def line_count(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def rounds_in(events: list[dict[str, Any]]) -> int:
    """How many rounds ended (their last event, the throughput snapshot, is on disk)."""
    return sum(1 for e in events if e["event_type"] == "ANALYTICS_SNAPSHOT" and e["data"].get("kind") == ROUND_END)


def wait_for(predicate: Callable[[], bool], timeout: float, poll: float = 0.002) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll)
    return predicate()


class Launcher:
    """Client of fork_launcher.py: start CLI runs as forked processes, wait for their exit status."""

    def __init__(self) -> None:
        script = Path(__file__).with_name("fork_launcher.py")
        self.process = subprocess.Popen(
            [sys.executable, str(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        self._ask_raw()  # {"ready": pid}: the warm import is done

    def _ask_raw(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, f"fork launcher died (exit code {self.process.poll()})"
        reply: dict[str, Any] = json.loads(line)
        return reply

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._ask_raw()

    def start(self, argv: list[str], log: Path, path: tuple[Path, ...] = ()) -> int:
        """Fork one CLI run logging to `log`; `path`: folders the child puts first on sys.path (a user's loader)."""
        return int(self._ask({"run": argv, "log": str(log), "path": [str(folder) for folder in path]})["pid"])

    def wait(self, pid: int) -> int:
        return int(self._ask({"wait": pid})["returncode"])

    def run(self, argv: list[str], log: Path, path: tuple[Path, ...] = ()) -> int:
        return self.wait(self.start(argv, log, path))

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=30)
