"""Promises that a module loads without a heavy package (torch, numpy, ...), checked in fresh interpreters.

A project declares its promises once, in `pyproject.toml` (default table `[tool.tripwire.loads-without]`): module name
-> the top-level packages importing it must not load, e.g. `"pkg.config" = ["torch", "numpy"]`. `read_promises`
reads that table (a malformed one is a one-line `GoldenFileError` naming the key and the fix), and
`check_loads_without` imports each module in its own fresh interpreter (`python -P`, the given `src` first on
`PYTHONPATH`) with a `sys.meta_path` blocker that refuses the forbidden packages and records the innermost project
frame that asked for one. It returns one line per broken promise, empty when every promise holds:

    pkg.config loads torch (src/pkg/config.py:12: import torch); its promise is declared in pyproject.toml [...]

A module that fails to import for another reason is one line too (`pkg.gone fails to import: ...`). An import that
is attempted and caught (`try: import torch except ImportError`) still counts: where torch is installed it loads
(asking `importlib.util.find_spec("torch")` whether it is installed does not load it, and does not count).
One interpreter per module, because `sys.modules` cannot be reset: what one import loaded would hide what the next
loads. They run a few at a time on a thread pool. This module imports no torch: only the standard library and
`tripwire.common.errors`, and never the project it checks.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from tripwire.common.errors import GoldenFileError

TABLE: tuple[str, ...] = ("tool", "tripwire", "loads-without")
MODULE_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
PACKAGE_NAME = re.compile(r"[A-Za-z_]\w*")
MARKER = "tripwire-loads-without:"
T = TypeVar("T")


def table_name(table: Sequence[str] = TABLE) -> str:
    """`[tool.tripwire.loads-without]`, as the table is written in the file."""
    return "[" + ".".join(table) + "]"


def declared_in(pyproject: Path | str = "pyproject.toml", table: Sequence[str] = TABLE) -> str:
    """Where the promises live, as failure lines name it: `pyproject.toml [tool.tripwire.loads-without]`."""
    return f"{Path(pyproject).name} {table_name(table)}"


def read_promises(pyproject: Path, table: Sequence[str] = TABLE) -> dict[str, tuple[str, ...]]:
    """{module: packages it must load without} from `table` of `pyproject`; a malformed table raises a one-line
    `GoldenFileError` that names the file, the key and the fix."""
    where = f"{pyproject} {table_name(table)}"
    example = '"pkg.module" = ["torch"]'
    try:
        data: Any = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GoldenFileError(f"{pyproject}: does not exist: it should declare {table_name(table)}") from None
    except tomllib.TOMLDecodeError as error:
        raise GoldenFileError(f"{pyproject}: not valid TOML ({_one_line(str(error))})") from None
    except UnicodeDecodeError:
        raise GoldenFileError(f"{pyproject}: not UTF-8 text") from None
    for part in table:
        if not isinstance(data, dict) or part not in data:
            raise GoldenFileError(f"{pyproject}: no {table_name(table)} table: declare each promise as {example}")
        data = data[part]
    if not isinstance(data, dict):
        raise GoldenFileError(f"{where} is not a table: declare each promise as {example}")
    if not data:
        raise GoldenFileError(f"{where} declares no module: declare each promise as {example}")
    promises: dict[str, tuple[str, ...]] = {}
    for module, packages in data.items():
        if isinstance(packages, dict):
            inner = next(iter(packages), "...")
            raise GoldenFileError(
                f'{where}: "{module}" is a table, not a list: quote a dotted module name ("{module}.{inner}" = [...])'
            )
        if not MODULE_NAME.fullmatch(module):
            raise GoldenFileError(f'{where}: "{module}" is not a module name: write its dotted import path')
        if not isinstance(packages, list) or not packages or not all(isinstance(p, str) for p in packages):
            raise GoldenFileError(
                f'{where}: "{module}" must be a non-empty list of package names, e.g. ["torch"], not {packages!r}'
            )
        bad = [p for p in packages if not PACKAGE_NAME.fullmatch(p)]
        if bad:
            raise GoldenFileError(
                f'{where}: "{module}" names {bad[0]!r}, not a top-level package: write "torch", not "torch.nn"'
            )
        promises[module] = tuple(dict.fromkeys(packages))
    return promises


# Runs in the fresh interpreter: argv = module, comma-separated forbidden packages, project root ("" for any file
# outside the interpreter's own prefixes). Prints MARKER + one JSON object: {} when the promise holds.
PROBE = r"""
import importlib, json, os, sys, traceback
module, forbidden, root = sys.argv[1], set(sys.argv[2].split(",")), sys.argv[3]
norm = lambda p: os.path.normcase(os.path.abspath(p)) + os.sep
root = norm(root) if root else ""
outside = tuple({norm(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)})

def ours(name):
    if name.startswith("<"):
        return False
    name = os.path.normcase(os.path.abspath(name))
    return name.startswith(root) if root else not name.startswith(outside)

def where(frames):
    mine = [f for f in frames if ours(f.filename)]
    return [mine[-1].filename, mine[-1].lineno, (mine[-1].line or "").strip()] if mine else None

attempts = []
class Blocker:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top not in forbidden:
            return None
        stack = traceback.extract_stack()[:-1]
        # an import statement (_find_and_load_unlocked -> _find_spec -> here), not importlib.util.find_spec asking
        # whether the package is installed (find_spec -> _find_spec -> here)
        if "_find_and_load_unlocked" not in [f.name for f in stack[-3:]]:
            return None
        attempts.append([top, where(stack)])
        raise ModuleNotFoundError(f"{top} is blocked: {module} promises to load without it", name=name)

result = {}
early = sorted(p for p in forbidden if p in sys.modules)
if early:
    result = {"loaded": early[0], "where": None, "early": True}
else:
    sys.meta_path.insert(0, Blocker())
    try:
        importlib.import_module(module)
    except BaseException as error:
        frames = traceback.extract_tb(error.__traceback__)
        result = {"error": f"{type(error).__name__}: {error}", "where": where(frames)}
    leaked = sorted(p for p in forbidden if p in sys.modules)
    if attempts:
        result = {"loaded": attempts[0][0], "where": attempts[0][1]}
    elif leaked and "error" not in result:
        result = {"loaded": leaked[0], "where": None}
sys.stdout.write("\n" + MARKER + json.dumps(result) + "\n")
""".replace("MARKER", repr(MARKER))


def check_loads_without(
    promises: Mapping[str, Sequence[str]],
    src: Path | None = None,
    *,
    declared: str | None = None,
    jobs: int | None = None,
    timeout: float = 120.0,
) -> list[str]:
    """One line per broken promise (sorted by module), empty when each module loads without its packages.

    Each module is imported in its own fresh interpreter; `src` (the folder holding the top-level packages) goes
    first on `PYTHONPATH`, and frames under it are the ones a failure names (relative to `src`'s parent). Without
    `src` the modules are found as the interpreter finds them, and any frame outside its own prefixes is named.
    `declared` is where the promises live, for the message (default: `pyproject.toml [tool.tripwire.loads-without]`);
    `jobs` how many interpreters run at once (default: twice the CPU count, at most 8: each spends part of its
    time starting up and reading files).
    """
    source = declared or declared_in()

    def probe(module: str, root: Path | None, env: Mapping[str, str]) -> str | None:
        return _probe(module, tuple(promises[module]), root, env, timeout, source)

    return [line for line in map_probes(sorted(promises), probe, src, jobs) if line]


def map_probes(
    modules: Sequence[str],
    probe: Callable[[str, Path | None, Mapping[str, str]], T],
    src: Path | None = None,
    jobs: int | None = None,
) -> list[T]:
    """`probe(module, root, env)` for each module, a few at a time on a thread pool, in order: `root` is `src`
    resolved and `env` the environment with it first on `PYTHONPATH` (each probe starts its own interpreter there).
    `jobs` defaults to twice the CPU count, at most 8: each interpreter spends part of its time starting up."""
    env = dict(os.environ)
    root = src.resolve() if src is not None else None
    if root is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [env.get("PYTHONPATH")])])
    workers = max(1, min(len(modules), jobs or min(2 * (os.cpu_count() or 1), 8)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda module: probe(module, root, env), modules))


def probe_module(
    module: str, packages: Sequence[str], root: Path | None, env: Mapping[str, str], timeout: float
) -> dict[str, Any] | str:
    """Import `module` in a fresh interpreter that refuses `packages` (`PROBE`): its report, `{}` when it loaded
    without them, `{"loaded": package, "where": frame}` or `{"error": ...}`; a string when it could not be checked."""
    command = [sys.executable, "-P", "-c", PROBE, module, ",".join(packages), str(root or "")]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, env=dict(env), cwd=root, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return f"importing it took over {timeout:g} s"
    reports = [line for line in done.stdout.splitlines() if line.startswith(MARKER)]
    if not reports:
        last = done.stderr.strip().splitlines()[-1:] or ["no output"]
        return f"its interpreter exited with {done.returncode} ({last[0]})"
    result: dict[str, Any] = json.loads(reports[-1].removeprefix(MARKER))
    return result


def _probe(
    module: str, packages: tuple[str, ...], root: Path | None, env: Mapping[str, str], timeout: float, source: str
) -> str | None:
    suffix = f"; its promise is declared in {source}"
    result = probe_module(module, packages, root, env, timeout)
    if isinstance(result, str):
        return f"{module} could not be checked: {result}{suffix}"
    if "loaded" in result:
        if result.get("early"):
            at = "already loaded when the interpreter started, before the import"
        else:
            at = frame_text(result["where"], root) or "no project frame on the import stack"
        return f"{module} loads {result['loaded']} ({at}){suffix}"
    if "error" in result:
        frame = frame_text(result["where"], root)
        return f"{module} fails to import: {_one_line(result['error'])}{f' ({frame})' if frame else ''}{suffix}"
    return None


def frame_text(frame: list[Any] | None, root: Path | None) -> str | None:
    """`src/pkg/mod.py:12: import torch` for a probe's [filename, line, source]."""
    if not frame:
        return None
    filename, lineno, code = frame
    path = Path(filename)
    base = root.parent if root is not None else Path.cwd()
    if path.is_relative_to(base):
        path = path.relative_to(base)
    return f"{path.as_posix()}:{lineno}" + (f": {code}" if code else "")


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
