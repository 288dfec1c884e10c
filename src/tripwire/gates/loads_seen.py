"""What each module loads, seen by importing it: a module that loaded without torch keeps doing so, however (or
whether) its docstring words the promise.

`tripwire.gates.loads_without` checks the promises a project declares. A promise nobody declared, or worded so that
no check reads it ("never touches the tensor library"), was kept by nothing: an `import torch` added there passed.
This module keeps the promise by behaviour instead:

- `observe(modules, packages, src)` imports every module of the source packages (`source_modules`) in a fresh
  interpreter that refuses `packages` (the same probe). A module that asks for none loads without all of them. One
  that asks for a package is seen to load it; that package is then allowed and the module probed again, to learn the
  rest, unless the package is `costly` (torch: every probe after it would pay its import, and a module that loads torch
  loads numpy with it). What was not seen is not claimed.
- The golden (`golden_of`, a JSON file such as `baselines/loads_seen.json`) lists, for each module, the packages it
  was seen to load without.
- `check_seen(golden, src)` imports each listed module refusing its listed packages: one line per module that now
  loads one, naming the line that asked. A listed module that no longer exists (moved or renamed) is a note, not a
  failure: its successor was never seen, so record again to keep its promise.

This module imports no torch, as `loads_without` does: only the standard library and tripwire's own, and never the
project it checks.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tripwire.common.errors import GoldenFileError
from tripwire.gates.loads_without import frame_text, map_probes, probe_module

SKIPPED_PARTS = frozenset({"__pycache__", "build"})


def source_modules(src: Path, packages: Iterable[str]) -> list[str]:
    """Every module of `packages` under `src`, by dotted name (a package by its own name); `__main__` modules, which
    run when imported, are left out."""
    found = []
    for package in packages:
        for path in sorted((src / package).rglob("*.py")):
            parts = path.relative_to(src).with_suffix("").parts
            if SKIPPED_PARTS & set(parts) or parts[-1] == "__main__" or ".egg-info" in str(path):
                continue
            found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return sorted(found)


def observe(
    modules: Sequence[str],
    packages: Sequence[str],
    src: Path | None = None,
    *,
    costly: Sequence[str] = ("torch",),
    jobs: int | None = None,
    timeout: float = 120.0,
) -> dict[str, tuple[str, ...]]:
    """{module: the packages of `packages` it was seen to load without} (module docstring); a module that fails to
    import, or could not be probed, is seen to load without nothing."""

    def seen(module: str, root: Path | None, env: Mapping[str, str]) -> tuple[str, ...]:
        refused = list(packages)
        while refused:
            result = probe_module(module, refused, root, env, timeout)
            if isinstance(result, str) or "error" in result:
                return ()
            if "loaded" not in result:
                return tuple(refused)
            package = str(result["loaded"])
            refused.remove(package)
            if package in costly:
                return ()
        return ()

    results = map_probes(modules, seen, src, jobs)
    return {module: without for module, without in zip(modules, results, strict=True) if without}


def golden_of(seen: Mapping[str, Sequence[str]], packages: Sequence[str]) -> dict[str, Any]:
    """The golden form: the packages probed and, per module, those it loads without (sorted, for diffs)."""
    return {"packages": list(packages), "modules": {module: sorted(seen[module]) for module in sorted(seen)}}


def golden_text(golden: Mapping[str, Any]) -> str:
    """`golden_of`'s JSON, one module per line, for diffs."""
    rows = [f"  {json.dumps(module)}: {json.dumps(packages)}" for module, packages in golden["modules"].items()]
    return f'{{"packages": {json.dumps(golden["packages"])},\n "modules": {{\n' + ",\n".join(rows) + "\n }\n}\n"


def read_golden(data: Any, where: str) -> dict[str, tuple[str, ...]]:
    """{module: packages} of a parsed golden; a malformed one is a one-line `GoldenFileError`."""
    modules = data.get("modules") if isinstance(data, dict) else None
    if not isinstance(modules, dict) or not all(
        isinstance(packages, list) and all(isinstance(p, str) for p in packages) for packages in modules.values()
    ):
        raise GoldenFileError(f"{where}: not a loads-seen golden (a 'modules' object of package lists): record again")
    return {str(module): tuple(packages) for module, packages in modules.items()}


def check_seen(
    golden: Mapping[str, Sequence[str]],
    src: Path | None = None,
    *,
    source: str = "the golden",
    jobs: int | None = None,
    timeout: float = 120.0,
) -> tuple[list[str], list[str]]:
    """(failures, notes): one failure per module of `golden` that now loads a package it was seen to load without,
    one note per module that no longer exists."""

    def check(module: str, root: Path | None, env: Mapping[str, str]) -> tuple[str | None, str | None]:
        result = probe_module(module, golden[module], root, env, timeout)
        if isinstance(result, str):
            return f"{module} could not be checked: {result}", None
        if "loaded" in result:
            at = frame_text(result.get("where"), root) or "no project frame on the import stack"
            return (
                f"{module} loads {result['loaded']} ({at}); it loaded without it when {source} was recorded: "
                "whatever its docstring says, that was a promise kept; if the change is meant, record the golden again",
                None,
            )
        if "error" in result:
            error = str(result["error"])
            parts = module.split(".")
            names = {".".join(parts[:end]) for end in range(1, len(parts) + 1)}
            if error.startswith("ModuleNotFoundError") and any(f"'{name}'" in error for name in names):
                return None, f"{module} no longer exists (moved or renamed?): record {source} again to keep its promise"
            return f"{module} fails to import: {' '.join(error.split())[:300]}", None
        return None, None

    outcomes = map_probes(sorted(golden), check, src, jobs)
    failures = [failure for failure, _ in outcomes if failure]
    notes = [note for _, note in outcomes if note]
    return failures, notes
