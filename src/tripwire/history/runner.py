"""One result per commit: each in its own worktree and its own process, cached, several at a time.

A commit's worker is `python -P -m tripwire run SCENARIO --root WORKTREE --commit SHA --out FOLDER`, run by a fork
server's child (`tripwire.history.forkserver`: torch and tripwire imported once per job, the same command and
environment; a fresh process where fork does not exist or the server fails): `-P` keeps the
current folder off `sys.path`, the worker runs in a scratch folder, and `record` puts the tree's own import roots
first, so the tree's code is what runs and nothing beside the scenario or the harness can shadow the standard
library. Results are cached under `OUT/results/<key>/<sha>/`, the key covering the scenario file, tripwire's
version, the CPU pin and the Python and torch the workers run: a second walk over the same commits runs nothing. A
worker that dies without writing its result (a segfault, a timeout) leaves a `crash` result saying so; one stopped
by `Runner.stop` (Ctrl-C) leaves nothing, so the next walk runs that commit again.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import tripwire
from tripwire.common.errors import TripwireError
from tripwire.history.commits import Commit, Worktrees
from tripwire.history.forkserver import PIN_VARIABLE, ForkServer, ForkServerError
from tripwire.history.reuse import Reuse
from tripwire.outside.result import Result

# (commit, what happened: "cached" or "ran", the result, seconds the worker took)
Progress = Callable[[Commit, str, Result, float], None]


@dataclass(frozen=True)
class WalkSettings:
    """Where and how the commits run."""

    repo: Path
    scenario: Path
    out: Path
    jobs: int = 1
    cpu_pin: str = "avx2"
    timeout: float = 900.0
    keep_trees: bool = False
    python: str = sys.executable
    fork_server: bool = hasattr(os, "fork")  # False: a fresh process per commit
    reuse: bool = True  # False: run every commit, even one whose closure an earlier run's equals


def cache_key(settings: WalkSettings) -> str:
    """What a cached result depends on, besides its commit: the scenario, tripwire's own code, the pin, Python and
    torch."""
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "none"
    parts = [settings.scenario.read_bytes(), _own_code(), settings.cpu_pin.encode()]
    parts += [settings.python.encode(), torch_version.encode()]
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:12]


# tripwire's code that only reads results (comparison, reports, the other gates): a change there records nothing anew.
_NOT_RECORDING = (
    "history/",
    "bench/",
    "gates/",
    "outside/compare.py",
    "bitwise/magnitude.py",
    "bitwise/tensor_diff.py",
    "telemetry/snapshot.py",
)


def _own_code() -> bytes:
    """A digest of the source of tripwire's recording side: a changed recorder records anew."""
    root = Path(tripwire.__file__).parent
    digest = hashlib.sha256(tripwire.__version__.encode())
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if not name.startswith(_NOT_RECORDING):
            digest.update(name.encode() + b"\0" + path.read_bytes())
    return digest.digest()


class Runner:
    """Results of commits, from the cache or from workers (`jobs` at a time)."""

    def __init__(self, settings: WalkSettings, progress: Progress | None = None) -> None:
        if not settings.scenario.is_file():
            raise TripwireError(f"{settings.scenario}: no such scenario file")
        self.settings = settings
        self.key = cache_key(settings)
        self.cache = settings.out / "results" / self.key
        self.worktrees = Worktrees(settings.repo, settings.out / "trees", keep=settings.keep_trees)
        self.progress = progress
        self.seconds: dict[str, float] = {}  # per commit: the worker's wall time (cached: as first recorded)
        self.asked: dict[str, Result] = {}  # every commit a caller asked for, with its result
        self._running: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()
        self._stopping = False
        self._idle_servers: list[ForkServer] = []
        self._busy_servers: set[ForkServer] = set()
        self._no_server = not settings.fork_server
        self.reuse = Reuse(settings.repo) if settings.reuse else None
        self._learned_cache = False
        self._finished = False  # a commit of this walk has finished (run or reused)

    def close(self) -> None:
        """Shut the fork servers down (the walk calls it when it ends, however it ends)."""
        with self._lock:
            servers = [*self._idle_servers, *self._busy_servers]
            self._idle_servers.clear()
        for server in servers:
            server.close()
        self.worktrees.close()

    def stop(self) -> None:
        """Kill every running worker (each in its own session, so a terminal's Ctrl-C does not reach them) and run
        no more; the commits they ran leave no result, so the next walk runs them again."""
        with self._lock:
            self._stopping = True
            running = list(self._running)
            busy = list(self._busy_servers)
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        for server in busy:
            server.kill_child()

    def folder(self, commit: Commit) -> Path:
        return self.cache / commit.sha

    def cached(self, commit: Commit) -> Result | None:
        folder = self.folder(commit)
        if not (folder / "result.json").exists():
            return None
        try:
            result = Result.load(folder, values=False)
        except TripwireError:
            return None
        self.seconds[commit.sha] = _walk_seconds(folder)
        return result

    def results(self, commits: Iterable[Commit]) -> dict[str, Result]:
        """Every commit's result, running the uncached ones on `jobs` workers (see `_schedule`)."""
        commits = list(commits)
        done: dict[str, Result] = {}
        missing = []
        for commit in commits:
            result = self.cached(commit)
            if result is None:
                missing.append(commit)
            else:
                done[commit.sha] = result
                self._report(commit, "cached", result)
        jobs = max(1, min(self.settings.jobs, len(missing)))
        if missing:
            self._learn_cache()
            pool = ThreadPoolExecutor(max_workers=jobs)
            pending, condition = list(missing), threading.Condition()
            running: dict[str, str | None] = {}  # sha -> its predicted signature
            futures = [pool.submit(self._schedule, pending, running, condition, done) for _ in range(jobs)]
            try:
                for future in futures:
                    future.result()
            except KeyboardInterrupt:
                self.stop()
                with condition:
                    condition.notify_all()
                raise
            finally:
                with condition:  # whatever ended the walk, no job starts another commit
                    pending.clear()
                    condition.notify_all()
                pool.shutdown(wait=True, cancel_futures=True)
        self.asked.update(done)
        return done

    def _schedule(
        self,
        pending: list[Commit],
        running: dict[str, str | None],
        condition: threading.Condition,
        done: dict[str, Result],
    ) -> None:
        """One job's loop: take the first pending commit, in walk order, that is not predicted to share the result
        of a commit running now (`Reuse.predict`: the same answers to the closure learned last), run it or reuse a
        result for it, and repeat. A commit so predicted waits for that run, then is most likely reused."""
        while True:
            with condition:
                while True:
                    if self._stopping:
                        raise KeyboardInterrupt
                    if not pending:
                        return
                    busy = {guess for guess in running.values() if guess is not None}
                    # until a first run has taught a closure, one commit at a time: what it read decides how many
                    # of the others run at all
                    first = self.reuse is not None and running and not self.reuse.learned and not self._finished
                    picked = None if first else self._pick(pending, busy)
                    if picked is not None:
                        break
                    condition.wait(timeout=1.0)
                commit, guess = picked
                pending.remove(commit)
                running[commit.sha] = guess
            try:
                done[commit.sha] = self._run(commit)
            finally:
                with condition:
                    running.pop(commit.sha, None)
                    self._finished = True
                    condition.notify_all()

    def _pick(self, pending: list[Commit], busy: set[str]) -> tuple[Commit, str | None] | None:
        """The first pending commit whose prediction no running commit shares, with its prediction."""
        for commit in pending:
            guess = None if self.reuse is None else self.reuse.predict(commit.sha)
            if guess is None or guess not in busy:
                return commit, guess
        return None

    def result(self, commit: Commit) -> Result:
        """One commit's result (cached, or run now)."""
        result = self.cached(commit)
        if result is not None:
            self._report(commit, "cached", result)
        else:
            result = self._run(commit)
        self.asked[commit.sha] = result
        return result

    def _report(self, commit: Commit, what: str, result: Result) -> None:
        if self.progress is not None:
            self.progress(commit, what, result, self.seconds.get(commit.sha, 0.0))

    def _run(self, commit: Commit) -> Result:
        if self._stopping:
            raise KeyboardInterrupt
        folder = self.folder(commit)
        folder.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        source = self._reusable(commit)
        if source is not None:
            return self._reuse(commit, source, start)
        tree = self.worktrees.add(commit)
        try:
            code, tail = self._work(commit, tree, folder)
        except KeyboardInterrupt:
            self.stop()
            raise
        finally:
            self.worktrees.remove(tree, discard=self._stopping)
        if self._stopping and (code < 0 or not (folder / "result.json").exists()):
            shutil.rmtree(folder, ignore_errors=True)  # killed by stop(): whatever it left is not a result
            raise KeyboardInterrupt
        self._keep_seconds(commit, folder, start)
        if not (folder / "result.json").exists():
            cause = f"the worker exited with code {code} before writing a result" + (f": {tail}" if tail else "")
            Result(self._scenario_name(), "crash", cause, source={"commit": commit.sha}).save(folder)
        result = Result.load(folder, values=False)
        if self.reuse is not None:
            self.reuse.learn(commit.sha, folder / "closure.json")
        self._report(commit, "ran", result)
        return result

    def _keep_seconds(self, commit: Commit, folder: Path, start: float) -> None:
        """The worker's wall time since `start`, into the cache (walk.json) and this walk's table as one number, to
        the millisecond: a later walk over the cache reads and reports exactly what this walk reported."""
        seconds = round(time.perf_counter() - start, 3)
        (folder / "walk.json").write_text(json.dumps({"seconds": seconds}) + "\n", encoding="utf-8")
        self.seconds[commit.sha] = seconds

    def _reusable(self, commit: Commit) -> str | None:
        """The commit whose result stands for `commit`'s, or None (reuse off, or no closure answers the same)."""
        if self.reuse is None:
            return None
        self._learn_cache()
        return self.reuse.find(commit.sha)

    def _learn_cache(self) -> None:
        """Learn the closures of the results an earlier walk left in this cache (once, when something must run)."""
        with self._lock:
            if self.reuse is None or self._learned_cache:
                return
            self._learned_cache = True
            for folder in sorted(self.cache.iterdir()) if self.cache.is_dir() else ():
                if (folder / "result.json").is_file() and (folder / "closure.json").is_file():
                    self.reuse.learn(folder.name, folder / "closure.json")

    def _reuse(self, commit: Commit, source: str, start: float) -> Result:
        """Copy `source`'s result as `commit`'s: the same files, its `source` naming both commits."""
        folder, origin = self.folder(commit), self.cache / source
        for name in _RESULT_FILES:
            if (origin / name).is_file():
                shutil.copyfile(origin / name, folder / name)
            else:
                (folder / name).unlink(missing_ok=True)
        data = json.loads((origin / "result.json").read_text(encoding="utf-8"))
        data["source"] = {**data.get("source", {}), "commit": commit.sha, "reused_from": source}
        partial = folder / "result.json.partial"
        partial.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        partial.replace(folder / "result.json")  # last: a copy cut short is not a result
        self._keep_seconds(commit, folder, start)
        result = Result.load(folder, values=False)
        self._report(commit, "reused", result)
        return result

    def _server(self) -> ForkServer | None:
        """An idle fork server, started on first need; None when fork servers are off or one failed to start."""
        with self._lock:
            if self._no_server:
                return None
            if self._idle_servers:
                server = self._idle_servers.pop()
                self._busy_servers.add(server)
                return server
        try:
            env = _env() | {PIN_VARIABLE: self.settings.cpu_pin}
            server = ForkServer(self.settings.python, env, Path(tempfile.gettempdir()))
        except (ForkServerError, OSError, ValueError):
            with self._lock:
                self._no_server = True  # every commit runs in a fresh process instead
            return None
        with self._lock:
            self._busy_servers.add(server)
        return server

    def _release(self, server: ForkServer, healthy: bool) -> None:
        with self._lock:
            self._busy_servers.discard(server)
            if healthy and not self._stopping:
                self._idle_servers.append(server)
                return
        server.close()

    def _work(self, commit: Commit, tree: Path, folder: Path) -> tuple[int, str]:
        """Run the worker; `(exit code, last line of its error output)`. Its output goes to `worker.log`."""
        settings = self.settings
        arguments = [str(settings.scenario.resolve()), "--root", str(tree), "--commit", commit.sha]
        arguments += ["--closure"] if self.reuse is not None else []
        arguments += [
            "--out",
            str(folder),
            "--cpu-pin",
            settings.cpu_pin,
            "--values-store",
            str(self.cache / "tensors"),
        ]
        log = folder / "worker.log"
        server = self._server()
        if server is not None:
            healthy = False
            try:
                with tempfile.TemporaryDirectory(prefix="tripwire-worker-") as scratch:
                    code = server.run(arguments, Path(scratch), log, settings.timeout)
                healthy = True
            except (ForkServerError, OSError, ValueError):
                code = -1  # the server broke: this commit runs in a fresh process below
            finally:
                self._release(server, healthy)
            if healthy:
                if code is None:
                    return -9, f"timed out after {settings.timeout:.0f} s"
                return code, _last_line(log) if code else ""
        command = [settings.python, "-P", "-m", "tripwire", "run", *arguments]
        with tempfile.TemporaryDirectory(prefix="tripwire-worker-") as scratch, log.open("w") as output:
            process = subprocess.Popen(
                command, cwd=scratch, stdout=output, stderr=subprocess.STDOUT, start_new_session=True, env=_env()
            )
            with self._lock:
                self._running.add(process)
            try:
                code = process.wait(timeout=settings.timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                return -9, f"timed out after {settings.timeout:.0f} s"
            except KeyboardInterrupt:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                raise
            finally:
                with self._lock:
                    self._running.discard(process)
        return code, _last_line(log) if code else ""

    def _scenario_name(self) -> str:
        return self.settings.scenario.stem


# what a result folder holds besides result.json (`Result.save`); a reused result copies each one there is
_RESULT_FILES = ("trajectory.json", "payloads.json", "values.pt", "payload_values.pt", "traceback.txt")


def _last_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip()[:200] if lines else ""


def _env() -> dict[str, str]:
    """The worker's environment: ours, with the one-thread and hash-seed pins a bitwise comparison needs."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    env.setdefault("PYTHONHASHSEED", "0")
    return env


def _walk_seconds(folder: Path) -> float:
    try:
        return float(json.loads((folder / "walk.json").read_text(encoding="utf-8"))["seconds"])
    except (OSError, ValueError, KeyError):
        return 0.0
