"""How much host memory this process can still get: the machine's available memory and the process's own
address-space limit (`ulimit -v`), whichever is less. Every layer (the trainer's start-up estimate, a data loader
about to decode) can ask before it allocates: it needs no torch, torchvision or numpy."""

from __future__ import annotations

import os

__all__ = ["address_space_left", "gib", "machine_available", "memory_left"]


def gib(n_bytes: float) -> str:
    """`n_bytes` in the largest unit it reaches, one decimal: "3.4 GiB", "25.1 KiB"."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if n_bytes >= size:
            return f"{n_bytes / size:.1f} {unit}"
    return f"{n_bytes / 2**10:.1f} KiB"


def memory_left() -> tuple[int | None, bool]:
    """`(bytes, limited)`: the host memory this process can still get, the least of what the machine has available
    now (/proc/meminfo MemAvailable, else free pages) and what its address-space limit (`ulimit -v`, RLIMIT_AS) leaves
    above what it already maps (None when neither is known); and whether that limit is what bounds it."""
    machine, left = machine_available(), address_space_left()
    limits = [value for value in (machine, left) if value is not None]
    return (min(limits) if limits else None), left is not None and (machine is None or left < machine)


def machine_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def address_space_left() -> int | None:
    """RLIMIT_AS minus the process's current virtual size (/proc/self/statm); None without a limit."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            mapped = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        mapped = 0
    return max(0, soft - mapped)
