"""The side of the instruction count that runs under valgrind: client requests and the counted units.

Python cannot issue valgrind client requests by itself and valgrind 3.19's cachegrind has none for start/stop,
so the inner process writes valgrind's client-request sequence (x86-64 machine code, 29 bytes: the magic rotate
preamble and `xchg rbx, rbx`) into an executable page and calls it through ctypes: no compiler, no C extension.
Run without valgrind the same code is a no-op that returns its default, which is how the inner process notices it
is not under valgrind. (Toggling collection on a function name, e.g. `--toggle-collect=lfind` around a ctypes
callback, does not work: callgrind loses track of calls made by libffi's `ffi_call_unix64`, which moves the stack
pointer, and never sees the function entered.)
"""

from __future__ import annotations

import ctypes
import mmap
import platform
import sys
import time
from collections.abc import Sequence
from typing import Any

from tripwire.bench.paired import select
from tripwire.bench.paired_spec import PairedBench
from tripwire.bench.worker import cpu_model, load_suite

LABEL = "tripwire-run"

# `unsigned long request(unsigned long args[6], unsigned long default)`: valgrind's client request for x86-64
# (valgrind.h, VALGRIND_DO_CLIENT_REQUEST_EXPR). Natively the four rotations of rdi add up to 128 bits and
# `xchg rbx, rbx` does nothing, so the function returns `default`.
_AMD64_REQUEST = bytes.fromhex(
    "4889f8"  # mov rax, rdi          the request block
    "4889f2"  # mov rdx, rsi          the answer when not under valgrind
    "48c1c703"  # rol rdi, 3          \
    "48c1c70d"  # rol rdi, 13          | the preamble valgrind recognizes
    "48c1c73d"  # rol rdi, 61          |
    "48c1c733"  # rol rdi, 51         /
    "4887db"  # xchg rbx, rbx         the request itself; valgrind puts the answer in rdx
    "4889d0"  # mov rax, rdx
    "c3"  # ret
)
_RUNNING_ON_VALGRIND = 0x1001
_CALLGRIND = (ord("C") << 24) | (ord("T") << 16)  # VG_USERREQ_TOOL_BASE('C', 'T'), callgrind.h
_ZERO_STATS = _CALLGRIND + 1
_DUMP_STATS_AT = _CALLGRIND + 3
_START_INSTRUMENTATION = _CALLGRIND + 4
_STOP_INSTRUMENTATION = _CALLGRIND + 5


class InstructionsError(Exception):
    """A usage or environment problem; the message is one line saying what to do."""


class ClientRequests:
    """Valgrind client requests from Python: a 29-byte x86-64 function in an executable page, called by ctypes."""

    def __init__(self) -> None:
        if platform.machine().lower() not in ("x86_64", "amd64"):
            raise InstructionsError(f"instruction counting needs an x86-64 machine, this is {platform.machine()}")
        try:
            self._page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        except OSError as exc:
            raise InstructionsError(f"cannot map an executable page for valgrind's client requests: {exc}") from exc
        self._page.write(_AMD64_REQUEST)
        address = ctypes.addressof(ctypes.c_char.from_buffer(self._page))
        prototype = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64), ctypes.c_uint64)
        self._call = prototype(address)
        self._args = (ctypes.c_uint64 * 6)()

    def request(self, code: int, arg: int = 0, default: int = 0) -> int:
        self._args[0] = code
        self._args[1] = arg
        return int(self._call(self._args, default))

    def on_valgrind(self) -> bool:
        return self.request(_RUNNING_ON_VALGRIND) > 0

    def start_instrumentation(self) -> None:
        self.request(_START_INSTRUMENTATION)

    def stop_instrumentation(self) -> None:
        self.request(_STOP_INSTRUMENTATION)

    def zero(self) -> None:
        self.request(_ZERO_STATS)

    def dump(self, label: ctypes.Array[ctypes.c_char]) -> None:
        """Write callgrind's counters to the next dump file, `label` as its trigger, and zero them."""
        self.request(_DUMP_STATS_AT, ctypes.addressof(label))


# ---------------------------------------------------------------------------------------------------- inner side


def run_label(bench: int, unit: int, run: int) -> str:
    return f"{LABEL} {bench} {unit} {run}"


def _context() -> dict[str, str]:
    context = {"python": platform.python_version(), "machine": platform.machine(), "cpu": cpu_model()}
    torch = sys.modules.get("torch")
    if torch is not None:
        context["torch"] = str(torch.__version__)
    return context


def _one_thread() -> None:
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def count_inner(suite_spec: str, keywords: Sequence[str], units: int, warmup: int) -> dict[str, Any]:
    """What the process under valgrind does; returns the manifest the outer process reads the dumps with."""
    requests = ClientRequests()
    if not requests.on_valgrind():
        raise InstructionsError("--inner runs under valgrind only: use `python -m tripwire.bench.instructions`")
    started, cpu_started = time.perf_counter(), time.process_time()
    suite = load_suite(suite_spec)
    names = select(list(suite), keywords)
    if not names:
        raise InstructionsError(f"no benchmark of {suite_spec} matches -k {' '.join(keywords)} ({', '.join(suite)})")
    manifest: dict[str, Any] = {
        "import_s": time.perf_counter() - started,
        "import_cpu_s": time.process_time() - cpu_started,
        "benchmarks": [],
    }
    for index, name in enumerate(names):
        bench: PairedBench = suite[name]
        _one_thread()
        clock, cpu_clock = time.perf_counter(), time.process_time()
        workload = bench.make_warm(warmup)
        build_s, build_cpu_s = time.perf_counter() - clock, time.process_time() - cpu_clock
        requests.start_instrumentation()
        seconds, cpu_seconds = [], []
        for unit in range(units):
            clock, cpu_clock = time.perf_counter(), time.process_time()
            for run in range(bench.runs_per_unit):
                label = ctypes.create_string_buffer(run_label(index, unit, run).encode())
                workload.prepare()
                requests.zero()
                workload.run()
                requests.dump(label)
            seconds.append(time.perf_counter() - clock)
            cpu_seconds.append(time.process_time() - cpu_clock)
            print(
                f"instructions: {name} unit {unit + 1}/{units}: {seconds[-1]:.1f} s ({cpu_seconds[-1]:.1f} s CPU)",
                file=sys.stderr,
                flush=True,
            )
        requests.stop_instrumentation()
        manifest["benchmarks"].append(
            {
                "name": name,
                "runs_per_unit": bench.runs_per_unit,
                "threads": bench.threads,
                "build_and_warmup_s": build_s,
                "build_and_warmup_cpu_s": build_cpu_s,
                "unit_s": seconds,
                "unit_cpu_s": cpu_seconds,
            }
        )
    manifest["context"] = _context()
    return manifest
