"""Determinism context: the settings a bitwise golden depends on, captured, keyed and compared.

Bitwise results are only reproducible under the same torch build, device, CPU code paths, thread count, determinism
flags and Python release. The build is named in full: `torch` (the version, with its local tag such as `+cu130`),
`torch_build` (`cpu`, `cuda 13.0` or `rocm 6.2`: a CUDA wheel running on a CPU is not a CPU-only wheel), and the
`mkl` and `onednn` versions it ships. The CPU code paths are those of `tripwire.common.numerics`: ATen's dispatch level
(`torch.backends.cpu.get_cpu_capability()`) and the oneDNN and MKL pins. Under the portable pin they read
`AVX2` on every x86-64 CPU with AVX2, whatever its native ISA, so one golden serves all of them.

`python` is the interpreter's release, major and minor (`3.11`): a loop's own float arithmetic in Python changes
with it. Python 3.12's `sum()` of floats compensates its rounding, so `sum([0.1] * 10)` is `1.0` there and
`0.9999999999999999` on 3.11; a reward summed from its terms differs in its last bits. A patch release keeps them.

`cpu_pin` says whether the portable pin was in force (`avx2`) or not (`native`). The pin changes the CPU
kernels from the first operation on, so even a model's initial weights differ between a pinned and a native run:
pinned and native results never compare bitwise, whatever the machine.

A golden records this context; on a machine whose context differs, comparing against it would fail falsely,
so `mismatches()` lists the differences, each with what it means. The gate then does not pass blindly: it says
which setting differs, and under CI it fails unless the run compared base and head on the same machine
(`--against`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
from collections.abc import Mapping
from typing import Any

import torch

from tripwire.common.numerics import PORTABLE_LEVEL, cpu_numerics, is_pinned

KEY_CHARS = 10


def _device_name(device: torch.device) -> str:
    """`cpu`, or the CUDA device's product name (bitwise results differ between GPU models)."""
    if device.type == "cuda" and torch.cuda.is_available():
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return device.type


def torch_build() -> str:
    """`cuda 13.0`, `rocm 6.2` or `cpu`: what the installed torch wheel was built for (not what this machine has)."""
    if torch.version.hip:
        return f"rocm {torch.version.hip}"
    if torch.version.cuda:
        return f"cuda {torch.version.cuda}"
    return "cpu"


@functools.cache
def library_versions() -> dict[str, str]:
    """The MKL and oneDNN versions this torch build ships ("" when absent), from `torch.__config__.show()`."""
    shown = torch.__config__.show()
    mkl = re.search(r"Math Kernel Library Version ([0-9.]+)", shown)
    onednn = re.search(r"(?:MKL-DNN|oneDNN) v([0-9.]+)", shown)
    return {"mkl": mkl.group(1) if mkl else "", "onednn": onednn.group(1) if onednn else ""}


def capture_context(device: torch.device | str = "cpu") -> dict[str, Any]:
    """The determinism context of this process for work on `device` (plain JSON values, sorted keys)."""
    resolved = torch.device(device)
    context: dict[str, Any] = {
        "torch": torch.__version__,
        "torch_build": torch_build(),
        **library_versions(),
        "device": _device_name(resolved),
        "machine": platform.machine(),
        **cpu_numerics(),
        "threads": torch.get_num_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "python": ".".join(platform.python_version_tuple()[:2]),
    }
    context["cpu_pin"] = PORTABLE_LEVEL if is_pinned(context) else "native"
    if resolved.type == "cuda":
        context["cuda"] = torch.version.cuda
        context["cudnn_deterministic"] = bool(torch.backends.cudnn.deterministic)
        context["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
        context["tf32_matmul"] = bool(torch.backends.cuda.matmul.allow_tf32)
        context["tf32_cudnn"] = bool(torch.backends.cudnn.allow_tf32)
        context["cublas_workspace_config"] = os.environ.get("CUBLAS_WORKSPACE_CONFIG", "")
    return dict(sorted(context.items()))


def context_key(context: Mapping[str, Any]) -> str:
    """A short stable key for file names: `cpu-avx512-t1-<hash>`, readable and unique per context."""
    encoded = json.dumps(dict(sorted(context.items())), sort_keys=True).encode()
    digest = hashlib.sha256(encoded).hexdigest()[:KEY_CHARS]
    device = str(context.get("device", "dev")).split(":")[0]
    capability = str(context.get("cpu_capability", "na")).lower()
    return f"{device}-{capability}-t{context.get('threads', 'x')}-{digest}"


# What a differing setting means, for the reader of a golden that does not apply.
_MEANING = {
    "cpu_pin": "the portable pin changes CPU kernels from the first op, so even initial weights differ: run both "
    "sides pinned (`tripwire.apply_portable_cpu_env()` before torch starts) or both native",
    "torch": "another torch release computes other bits",
    "torch_build": "a CUDA or ROCm wheel and a CPU-only wheel of one release ship other CPU libraries",
    "mkl": "another MKL computes matmuls in another order",
    "onednn": "another oneDNN computes convolutions in another order",
    "cpu_capability": "ATen's vector width groups sums differently",
    "threads": "another thread count splits reductions differently",
    "device": "another device computes other bits",
    "python": "another Python release computes some float results in Python differently (3.12's sum() of floats "
    "compensates its rounding)",
    "changed_by_loop": "settings the loop set itself while it ran, [at the start, at the end]: what it computed after "
    "that depends on the values it set",
}


def imported_distributions() -> dict[str, str]:
    """`{distribution: version}` of every installed distribution a module imported so far belongs to (numpy,
    gymnasium, stable-baselines3, ...): what a result recorded from outside names beside torch, since a loop's own
    libraries change its numbers too. The standard library has none; tripwire itself is left out."""
    import importlib.metadata
    import sys

    owners = _owners()
    found: dict[str, str] = {}
    for name in {module.partition(".")[0] for module in list(sys.modules)}:
        for distribution in owners.get(name, ()):
            if distribution in found or distribution == "tripwire-gate":
                continue
            try:
                found[distribution] = importlib.metadata.version(distribution)
            except importlib.metadata.PackageNotFoundError:  # pragma: no cover - a stale mapping
                continue
    return dict(sorted(found.items()))


@functools.cache
def _owners() -> Mapping[str, list[str]]:
    """`importlib.metadata.packages_distributions()`, kept in tripwire's cache folder under a key naming every
    installed distribution's metadata folder and its modification time: reading every distribution's file list takes
    about 0.4 s, a tenth of a short recording; listing the metadata folders takes milliseconds. Any install, upgrade or
    removal changes the key. An unwritable cache folder only costs the time."""
    import hashlib
    import importlib.metadata
    import json
    import os
    import sys
    import tempfile

    signature = hashlib.sha256()
    for entry in sys.path:
        try:
            with os.scandir(entry or ".") as listing:
                found = sorted((item.name, item.stat().st_mtime_ns) for item in listing if item.name.endswith(_META))
        except OSError:  # not a folder (a zip), or gone
            continue
        signature.update(repr((os.path.abspath(entry or "."), found)).encode())
    folder = cache_folder()
    path = os.path.join(folder, f"owners-{signature.hexdigest()[:24]}.json")
    try:
        with open(path, encoding="utf-8") as cached:
            return dict(json.load(cached))
    except (OSError, ValueError):
        pass
    owners = importlib.metadata.packages_distributions()
    try:
        os.makedirs(folder, exist_ok=True)
        handle, partial = tempfile.mkstemp(dir=folder, prefix=".owners-", suffix=".json")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(owners, out)
        os.replace(partial, path)  # whole or not at all: a reader never sees half a map
    except OSError:
        pass
    return owners


_META = (".dist-info", ".egg-info", ".egg-link", ".pth")


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the platform has one, else every CPU)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def cache_folder() -> str:
    """Where tripwire keeps what it can recompute: `$TRIPWIRE_CACHE_DIR`, else `$XDG_CACHE_HOME/tripwire`, else
    `~/.cache/tripwire`."""
    import os

    chosen = os.environ.get("TRIPWIRE_CACHE_DIR")
    if chosen:
        return chosen
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tripwire")


def mismatches(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """`key: recorded -> current (what it means)` for every setting that differs (empty when the contexts match);
    a setting holding a mapping (`packages`) is compared entry by entry (`packages.gymnasium: '0.29.1' -> '1.0.0'`)."""
    keys = sorted(set(recorded) | set(current))
    lines: list[str] = []
    for key in keys:
        if recorded.get(key) == current.get(key):
            continue
        if isinstance(recorded.get(key), Mapping) and isinstance(current.get(key), Mapping):
            lines += [f"{key}.{line}" for line in mismatches(recorded[key], current[key])]
            continue
        meaning = f" ({_MEANING[key]})" if key in _MEANING else ""
        lines.append(f"{key}: {recorded.get(key, '<unset>')!r} -> {current.get(key, '<unset>')!r}{meaning}")
    return lines
