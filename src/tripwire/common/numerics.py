"""Portable CPU numerics: pin the kernel paths a bitwise golden depends on, so it verifies on other x86-64 CPUs.

One torch build computes different bits on CPUs with different instruction sets, because three libraries
inside it pick their code path from the CPU they find:

- ATen dispatches its vectorized kernels (elementwise math, reductions, softmax, norms, optimizers' foreach
  ops) by CPU capability: 16 floats per vector on AVX-512, 8 on AVX2, so sums are grouped differently.
  `ATEN_CPU_CAPABILITY=avx2` caps it.
- oneDNN (torch's `mkldnn`, the convolutions) JIT-compiles kernels for the widest ISA it finds.
  `ONEDNN_MAX_CPU_ISA=AVX2` caps it.
- MKL (matmul, linear layers) dispatches per CPU, vendor and cache sizes. Its conditional numerical
  reproducibility mode fixes the code branch: `MKL_CBWR=COMPATIBLE,STRICT` (SSE2 kernels, no alignment
  condition). The AVX2 branch is not enough: on an AMD CPU MKL still computes other bits than on an Intel one
  with `MKL_CBWR=AVX2` (and with `AVX2,STRICT`), measured in docs/portability.md.

With ATen and oneDNN at AVX2 and MKL on its compatible branch, the same torch version gives the same bits on
x86-64 CPUs with AVX2, Intel or AMD, with or without AVX-512 (docs/portability.md: how this was verified and
what stays unverified). The variables must be set before torch runs its first kernel, so they are set in the
environment (noxfile, `tests/conftest.py`) rather than from Python after `import torch`.

The pinned level is recorded in the determinism context (`tripwire.common.context`) in place of the machine's native
ISA. A machine that cannot honour the pin (no AVX2, another architecture) reports its own level and gets no
golden: the gate then compares base and head on that machine instead (`nox -s guardrails -- --against REF`).
This module loads no torch: the pin is set before torch starts.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from typing import Any

PORTABLE_LEVEL = "avx2"

# Per level: the environment that pins each library there. ATen takes a lower-case name; oneDNN and MKL
# upper case.
_LEVELS: dict[str, dict[str, str]] = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "COMPATIBLE,STRICT"},
}

# The variables whose values enter the determinism context (empty string when unset).
PIN_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR")


def portable_cpu_env(level: str = PORTABLE_LEVEL) -> dict[str, str]:
    """The environment variables that pin ATen, oneDNN and MKL to `level` (set them before torch starts), and
    inductor's cache folder for code compiled under the pin (`pinned_inductor_cache`)."""
    try:
        pin = dict(_LEVELS[level])
    except KeyError:
        raise ValueError(f"unknown portable CPU level {level!r}: choose one of {', '.join(sorted(_LEVELS))}") from None
    return {**pin, INDUCTOR_CACHE: pinned_inductor_cache(level)}


INDUCTOR_CACHE = "TORCHINDUCTOR_CACHE_DIR"


def pinned_inductor_cache(level: str = PORTABLE_LEVEL) -> str:
    """A cache folder of inductor's own for code compiled under the pin, beside its default one.

    Inductor's cache key does not include `ATEN_CPU_CAPABILITY`: measured with torch 2.14.1 on an AVX-512 machine,
    a model compiled under the AVX2 pin and run again natively from the same cache aborted the process
    (`malloc(): unaligned tcache chunk detected`). Keeping pinned and native compilations in separate folders
    avoids it. A cache folder the user set wins."""
    import getpass  # on use: `tempfile` imports `random`, which a tree's own `random.py` may shadow at import
    import tempfile

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container): inductor falls back the same way
        user = "unknown"
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in user)
    return os.path.join(tempfile.gettempdir(), f"torchinductor_{safe}_pinned_{level}")


def apply_portable_cpu_env(environ: Any = None, level: str = PORTABLE_LEVEL) -> dict[str, str]:
    """Set the pin in `environ` (default `os.environ`) where a variable is unset; returns what is in force.

    Call it before torch is imported (a `conftest.py` or a launcher script). An explicit setting wins, so a
    user who exports another level gets that level, and the context records it.
    """
    target = os.environ if environ is None else environ
    for name, value in portable_cpu_env(level).items():
        target.setdefault(name, value)
    return {name: str(target.get(name, "")) for name in PIN_VARIABLES}


def cpu_numerics() -> dict[str, Any]:
    """The CPU code paths in force in this process, for the determinism context.

    `cpu_capability` is what ATen actually dispatches to (the pinned level when the pin holds, the native
    level otherwise); the oneDNN and MKL entries are their pinning variables (they offer no query).
    """
    import torch

    return {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "onednn_max_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", ""),
        "mkl_cbwr": os.environ.get("MKL_CBWR", ""),
        "mkldnn_enabled": bool(torch.backends.mkldnn.enabled),
    }


def is_pinned(context: Mapping[str, Any], level: str = PORTABLE_LEVEL) -> bool:
    """True when `context` shows every library pinned at `level` (ATen honoured it on this CPU)."""
    wanted = portable_cpu_env(level)
    return (
        str(context.get("cpu_capability", "")).lower() == wanted["ATEN_CPU_CAPABILITY"]
        and context.get("onednn_max_isa") == wanted["ONEDNN_MAX_CPU_ISA"]
        and context.get("mkl_cbwr") == wanted["MKL_CBWR"]
    )


def pin_hint(level: str = PORTABLE_LEVEL) -> str:
    """How to run pinned, for messages: the variables as shell assignments."""
    machine = platform.machine()
    assignments = " ".join(f"{k}={v}" for k, v in portable_cpu_env(level).items() if k != INDUCTOR_CACHE)
    return f"run under nox (it sets {assignments}); {machine} machines without AVX2 cannot be pinned"
