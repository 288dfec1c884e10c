"""CPU ops whose bits the portable pin cannot fix: they differ between Intel and AMD CPUs under it.

The pin (`tripwire.common.numerics`) fixes which kernels ATen, oneDNN and MKL run. It cannot fix what one instruction
computes: `rcpps` and `rsqrtps` are approximations whose results differ between CPU vendors. On CPU, torch computes a
few elementwise functions of float tensors with MKL's vector math (VML, high-accuracy mode, `ATen/cpu/vml.h`), and
for these VML starts from those approximations and refines them: the result is within an ulp but not correctly
rounded, and which way it rounds depends on the CPU. Measured here (docs/portability.md): `torch.sqrt` of 4M float32
values on an AMD EPYC differs from the correctly rounded root in 15.5 % of them; one `/ torch.sqrt` in the trainer's
observation normalizer made a golden recorded on an Intel Xeon fail on that AMD EPYC, and gave a third answer under
qemu. `VENDOR_BOUND` lists the ops whose VML kernels contain those instructions in torch 2.14.1's MKL 2024.2 (its
`libtorch_cpu.so` disassembled: `mkl_vml_kernel_*` functions with `rcpps`/`rsqrtps`), on every ISA branch MKL has.

`VendorBoundOps` notes each such op a run calls on a CPU tensor, with the caller's line, so a gate can refuse a
golden that cannot travel and name the line. It registers a kernel of its own over the CPU kernel of each listed op
(`torch.library`, the op's own kernel kept with `torch.library.get_kernel` and called by it), process-wide: an op a
loop's worker thread or thread pool calls is noted as well as one on the thread that entered it (a dispatch mode,
the first form, is thread-local and missed them), the ops it does not list run untouched at no cost, and a listed
op called from inside another (`_foreach_sqrt`'s per-tensor `sqrt`, `pow(x, 0.5)`'s root) is noted once, as the
outer op. The portable spellings: `torch.rsqrt(x)` (ATen's IEEE square root and divide) in place of
`1 / torch.sqrt(x)`, `torch.optim.Adam(..., fused=True)` in place of the default Adam on CPU (whose step calls
`sqrt`; the fused kernel's root is the CPU's correctly rounded one), or a correctly rounded root computed in float64
by another route.
"""

from __future__ import annotations

import atexit
import functools
import json
import multiprocessing.spawn
import multiprocessing.util
import os
import shutil
import sys
import sysconfig
import tempfile
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import torch

from tripwire.common.folders import folder_prefixes
from tripwire.common.kernels import (
    cpu_overloads,
    numbers_as_tensors,
    override_kernels,
    restore_kernels,
    tensor_positions,
)
from tripwire.common.lines import forget as forget_lines
from tripwire.common.lines import line_of

_FLOATS = (torch.float32, torch.float64)

# op name (without a trailing `_` of the in-place form, or `_foreach_`) -> the dtypes whose CPU kernel is vendor-bound.
VENDOR_BOUND: dict[str, tuple[torch.dtype, ...]] = {
    "sqrt": _FLOATS,
    "tan": _FLOATS,
    "atan": _FLOATS,
    "asin": _FLOATS,
    "acos": _FLOATS,
    "log10": _FLOATS,
    "log2": _FLOATS,
    "log": (torch.float64,),  # the float32 kernel has them only on AVX-512 branches, which the pin excludes
}
_ROOT_EXPONENT = 0.5  # pow(x, 0.5) computes sqrt(x) through VML
_POW_OVERLOADS = ("aten::pow.Tensor_Scalar", "aten::pow.Tensor_Scalar_out", "aten::pow_.Scalar")  # a number exponent

_OWN = folder_prefixes(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # never the caller
_TORCH = folder_prefixes(os.path.dirname(torch.__file__))
_TORCH_PARENT = str(Path(torch.__file__).resolve().parents[1])
_OPTIM = tuple(os.path.join(folder, "optim", "") for folder in _TORCH)


def vendor_bound(op_name: str, dtype: torch.dtype, exponent: object = None) -> bool:
    """Whether op `op_name` (an aten overload packet's name) on a CPU tensor of `dtype` has vendor-bound bits."""
    name = _base_name(op_name)
    if name == "pow":
        return dtype in _FLOATS and exponent == _ROOT_EXPONENT
    return dtype in VENDOR_BOUND.get(name, ())


def _base_name(op_name: str) -> str:
    """`sqrt` for `sqrt`, `sqrt_` and `_foreach_sqrt(_)`: the table's key."""
    return op_name.removeprefix("_foreach_").rstrip("_")


@functools.cache
def _watched_overloads() -> tuple[str, ...]:
    """Every overload (`aten::sqrt`, `aten::sqrt_`, `aten::sqrt.out`, ...) of a listed op with a CPU kernel of its
    own. The `_foreach_` forms have none on CPU: their per-tensor loop calls these, and is noted through them. Read
    once (aten's kernels are fixed once torch is imported), not at every recording's start."""
    wanted = {f"aten::{name}{suffix}" for name in VENDOR_BOUND for suffix in ("", "_")}
    return cpu_overloads(lambda full: full.split(".")[0] in wanted or full in _POW_OVERLOADS)


class _Watch:
    """The kernels over the listed ops' CPU kernels, registered while any `VendorBoundOps` is active (one set for
    all of them), and what each call tells the active ones.

    A child forked while a watch is active inherits the kernels, and the watchers as they were: it starts them with
    nothing noted and a fresh lock (another thread may have held it at the fork), and hands what it notes to each
    watcher's spool folder when it exits, through multiprocessing's finalizers (a DataLoader worker, a `Process`) or
    `atexit` (a plain `os.fork` child that returns through Python). A child that multiprocessing spawns or has a
    fork server start meanwhile is sent the watchers in its preparation data (`_ChildStart`) and joins them once it
    imports torch (`tripwire.bitwise.child_start`). The watcher adds what they all hand back in when it ends."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active: list[VendorBoundOps] = []
        self.libraries: list[torch.library.Library] = []
        self.local = threading.local()  # `inside`: a noted op's kernel is running on this thread
        os.register_at_fork(after_in_child=self._forked)
        # a `multiprocessing.Process` child clears the finalizers it inherits, then runs these
        multiprocessing.util.register_after_fork(self, _Watch._process_started)

    def _forked(self) -> None:
        self.lock = threading.Lock()
        if not self.active:
            return
        for watcher in self.active:  # the parent's counts stay the parent's
            watcher.calls = Counter()
            watcher.faults = []
            watcher.handed_back = False
            watcher.unmarked = True
        atexit.register(self._hand_back)  # a plain `os.fork` child that exits through Python

    def _process_started(self) -> None:
        if self.active:  # run by the Process on its way out, before its os._exit (atexit never runs there)
            multiprocessing.util.Finalize(None, self._hand_back, exitpriority=0)

    def _hand_back(self) -> None:
        for watcher in list(self.active):
            watcher.hand_back()

    def join(self, watcher: VendorBoundOps) -> None:
        with self.lock:
            if not self.libraries:
                self.libraries = self._register()
                _tell_spawned_children(True)
            self.active.append(watcher)

    def leave(self, watcher: VendorBoundOps) -> None:
        with self.lock:
            self.active = [other for other in self.active if other is not watcher]
            if not self.active:
                _tell_spawned_children(False)
                restore_kernels(self.libraries)  # every op's own CPU kernel is back
                forget_lines()  # the lines of the loop's code looked up for its notes

    def _register(self) -> list[torch.library.Library]:
        return override_kernels(
            [(full, "CPU") for full in _watched_overloads()], lambda full, _key, original: self._kernel(full, original)
        )

    def _kernel(self, full: str, original: Any) -> Callable[..., Any]:
        call = original.call_boxed
        positions = tensor_positions(full)
        name, _, overload = full.split("::", 1)[1].partition(".")
        shown = f"aten.{name}.{overload or 'default'}"  # as torch prints the op (`str(torch.ops.aten.sqrt.default)`)
        base = _base_name(name)
        bound = frozenset(_FLOATS if base == "pow" else VENDOR_BOUND[base])  # the dtypes worth a closer look
        local = self.local

        def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
            args = numbers_as_tensors(args, positions)  # a wrapped number a C++ caller gave (`common.kernels`)
            first = args[0] if args else None
            dtype = first.dtype if isinstance(first, torch.Tensor) else None
            if dtype is None or getattr(local, "inside", False) or not self.active:
                return call(keyset, *args, **kwargs)  # pass-through
            if dtype not in bound and (dtype.is_floating_point or dtype.is_complex):
                return call(keyset, *args, **kwargs)  # pass-through: float32 `log`, a half-precision root
            local.inside = True
            try:
                self._note(base, shown, dtype, args)
                return call(keyset, *args, **kwargs)  # pass-through
            finally:
                local.inside = False

        return kernel

    def _note(self, base: str, shown: str, dtype: torch.dtype, args: tuple[Any, ...]) -> None:
        try:
            if not (dtype.is_floating_point or dtype.is_complex):  # an integer input is computed in the default dtype
                dtype = torch.get_default_dtype()
            exponent = args[1] if base == "pow" and len(args) > 1 and not isinstance(args[1], torch.Tensor) else None
            if not vendor_bound(base, dtype, exponent):
                return
            shown_dtype = _DTYPE_NAMES.get(dtype) or str(dtype).removeprefix("torch.")
            callers: dict[str, str] = {}  # per root: the frames are walked once for all watchers of one root
            with self.lock:
                for watcher in self.active:
                    caller = callers.get(watcher.root)
                    if caller is None:
                        caller = callers[watcher.root] = caller_line(watcher.root)
                    watcher.calls[(shown, shown_dtype, caller)] += 1
                    if watcher.unmarked:  # a child's first noted call: told at once, in case it never hands back
                        watcher.unmarked = False
                        watcher.write_notes("first", Counter({(shown, shown_dtype, caller): 1}), [])
        except Exception as error:  # tripwire's fault, never the loop's: the op runs, and each watcher keeps it
            with self.lock:
                for watcher in self.active:
                    watcher.faults.append(f"{shown}: {type(error).__name__}: {error}")


_DTYPE_NAMES = {torch.float32: "float32", torch.float64: "float64"}
_WATCH = _Watch()


class VendorBoundOps:
    """`with VendorBoundOps() as seen:` notes every vendor-bound op on a CPU tensor the block calls (`VENDOR_BOUND`),
    on any thread of the process.

    `seen.calls` counts `(op, dtype, caller)`: the caller is the innermost line outside torch and tripwire, in this
    process or a child it started meanwhile. `unfinished` counts the children that noted calls and never handed
    their counts back (each is in `calls` with its first call only). `faults` holds what went wrong in tripwire's
    own noting (the op still ran). The watch changes nothing the ops compute; each listed op's call costs a trip
    through Python, every other op nothing.
    """

    def __init__(self, root: str | Path | None = None) -> None:
        self.calls: Counter[tuple[str, str, str]] = Counter()
        self.faults: list[str] = []
        # callers are shown relative to it (else to the working folder when the watch starts)
        self.root = str(Path(root).resolve()) if root is not None else ""
        self.spool = ""  # while active: the folder child processes leave what they noted in
        self.pid = 0  # the process that entered the watch
        self.handed_back = True  # in a child process: its notes are in the spool (or it has none)
        self.unmarked = False  # in a child process: no call noted yet (its first is written to the spool at once)
        self.unfinished = 0  # child processes that noted calls but had not handed them back when the watch ended

    def __enter__(self) -> VendorBoundOps:
        self.root = self.root or str(Path.cwd())
        self.pid = os.getpid()
        try:
            self.spool = tempfile.mkdtemp(prefix="tripwire-vendor-ops-")
        except OSError as error:  # tripwire's own trouble: the watch goes on in this process, and says what it lost
            self.spool = ""
            self.faults.append(f"the ops of child processes (no spool folder: {error})")
        try:
            _WATCH.join(self)
        except BaseException:
            if self.spool:
                shutil.rmtree(self.spool, ignore_errors=True)
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        _WATCH.leave(self)
        if os.getpid() != self.pid:  # a forked child leaving the block it was forked in: the parent adds it in
            self.hand_back()
            return
        spool, self.spool = self.spool, ""
        if spool:
            try:
                self._add_children(Path(spool))
            finally:
                shutil.rmtree(spool, ignore_errors=True)

    def hand_back(self) -> None:
        """In a child process: what it noted, as one file in the spool folder. Once per child; nothing in the process
        that entered the watch."""
        if self.handed_back or os.getpid() == self.pid or not self.spool:
            return
        self.handed_back = True
        if self.calls or self.faults:
            self.write_notes("all", self.calls, self.faults)

    def write_notes(self, kind: str, calls: Counter[tuple[str, str, str]], faults: list[str]) -> None:
        """In a child process: `calls` and `faults` as `PID.KIND.json` in the spool folder (written whole, then
        renamed: the parent never reads half of one). `all` is what it noted by its exit, `first` its first call."""
        try:
            record = {
                "calls": [[*key, count] for key, count in calls.items()],
                "faults": [f"in child process {os.getpid()}: {fault}" for fault in faults],
            }
            partial = Path(self.spool) / f".{os.getpid()}.{kind}.json.partial"
            partial.write_text(json.dumps(record), encoding="utf-8")
            os.replace(partial, partial.with_name(f"{os.getpid()}.{kind}.json"))
        except Exception:  # the watch in the parent already ended (its spool is gone), or the disk is full
            pass

    def _add_children(self, spool: Path) -> None:
        """Add in what child processes noted: each one's `all` file where it handed back, else its `first` (one call,
        and the child counted in `unfinished`: it was still running, killed, or ended through `os._exit` when the
        watch ended), and any fault it met joining the watch (`start`, from `tripwire.bitwise.child_start`)."""
        files = sorted(spool.glob("*.json"))
        handed_back = {path.name.split(".")[0] for path in files if path.name.endswith(".all.json")}
        for path in files:
            pid, _, kind = path.name.partition(".")
            if kind == "first.json":
                if pid in handed_back:
                    continue
                self.unfinished += 1
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
                for op, dtype, caller, count in record["calls"]:
                    self.calls[(str(op), str(dtype), str(caller))] += int(count)
                self.faults.extend(str(fault) for fault in record["faults"])
            except Exception as error:  # tripwire's fault: kept as one, never raised into the loop
                self.faults.append(f"a child process's notes ({path.name}) could not be read: {error}")

    def lines(self) -> list[str]:
        """One line per (op, dtype, caller), most called first: `aten.sqrt.default float32 at FILE:LINE (N calls)`."""
        return [
            f"{op} {dtype} at {caller} ({count} call{'s' * (count != 1)})"
            for (op, dtype, caller), count in self.calls.most_common()
        ]


_PREPARATION_KEY = "tripwire_vendor_ops"  # multiprocessing's `prepare` reads the keys it knows and no other
_HOME = str(Path(__file__).resolve().parents[2])  # the folder this tripwire package is imported from
_get_preparation_data = multiprocessing.spawn.get_preparation_data


def _preparation_data(name: str) -> dict[str, Any]:
    """multiprocessing's preparation data for a spawned or fork-server child, with the active watchers added."""
    data: dict[str, Any] = _get_preparation_data(name)
    active = [watcher for watcher in list(_WATCH.active) if watcher.spool]
    if active:
        try:
            data[_PREPARATION_KEY] = _ChildStart([(w.spool, w.root, w.pid) for w in active], _child_start_source())
        except Exception as error:  # tripwire's fault: the child starts as it would have, unwatched, and it is said
            for watcher in active:
                watcher.faults.append(f"the ops of a spawned child ({type(error).__name__}: {error})")
    return data


def _tell_spawned_children(active: bool) -> None:
    """Put the watchers into what multiprocessing sends the children it spawns, while a watch is active; put its
    own function back after (unless something else has since wrapped it: then ours stays, and adds nothing)."""
    if active:
        if multiprocessing.spawn.get_preparation_data is _get_preparation_data:
            multiprocessing.spawn.get_preparation_data = _preparation_data
    elif multiprocessing.spawn.get_preparation_data is _preparation_data:
        multiprocessing.spawn.get_preparation_data = _get_preparation_data


class _ChildStart:
    """Unpickled in the child, it runs `tripwire.bitwise.child_start` there (its text, through `exec`: pickle names
    no tripwire module the child might not reach before its path is set) and becomes None."""

    def __init__(self, watchers: list[tuple[str, str, int]], source: str) -> None:
        self.watchers = watchers
        self.source = source

    def __reduce__(self) -> tuple[Any, ...]:
        return exec, (self.source, {"__name__": "tripwire_child_start", "_WATCHERS": self.watchers, "_HOME": _HOME})


@functools.cache
def _child_start_source() -> str:
    """`child_start.py`'s text and the call that starts it, read once (a failed read is tried again next time)."""
    return Path(__file__).with_name("child_start.py").read_text(encoding="utf-8") + "\nstart(_WATCHERS, _HOME)\n"


def watch_spawned_child(watchers: list[tuple[str, str, int]]) -> None:
    """In a child spawned while watches were active (`tripwire.bitwise.child_start`, once torch is imported): one
    watcher per parent watcher, each handing its notes to that watcher's spool folder when the child exits."""
    for spool, root, pid in watchers:
        watcher = VendorBoundOps(root)
        watcher.spool, watcher.pid, watcher.handed_back, watcher.unmarked = spool, pid, False, True
        _WATCH.join(watcher)
    # a `Process` clears its finalizers before it runs (then `_process_started` adds one): this one is for a child
    # that imports torch later, inside its run; `spawn_main` ends in `sys.exit`, a fork server's child in `os._exit`
    multiprocessing.util.Finalize(None, _WATCH._hand_back, exitpriority=0)
    atexit.register(_WATCH._hand_back)


_CLOUDPICKLED = "<dynamic-code>"  # the file name cloudpickle gives the code it rebuilds (its lines are kept)


def caller_line(root: str) -> str:
    """The innermost frame outside torch and tripwire, as `path:line` (relative to `root` if inside it), and the torch
    file it called the op through where that is `torch.optim` (`train.py:88 via torch/optim/adam.py`): the line is
    the loop's `optimizer.step()`, and the root is the optimizer's. A function cloudpickle sent by value (an env
    wrapper of the main script, in a `SubprocVecEnv` or `AsyncVectorEnv` worker) has lost its file: it is named by
    its qualified name, with its line (`Scaled.observation (cloudpickled):14`)."""
    frame = sys._getframe(1)
    via = ""
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(_OPTIM):
            via = via or f" via {_shown(filename, _TORCH_PARENT)}"  # the innermost: adam.py, not optimizer.py
        elif filename == _CLOUDPICKLED:
            return f"{frame.f_code.co_qualname} (cloudpickled):{line_of(frame)}{via}"
        elif not filename.startswith((*_OWN, *_TORCH, "<")):
            return f"{_shown(filename, root)}:{line_of(frame)}{via}"
        frame = frame.f_back  # type: ignore[assignment]
    return "<unknown>"


def loop_line(root: str) -> str:
    """The innermost frame inside the tree at `root` (and not tripwire's), as `path:line` relative to it, with the
    file of the library it called where that is not the tree's (`skrl/utils/spaces/torch/spaces.py:398 via
    gymnasium/vector/utils/spaces.py`): the loop's line that led a library to do what is noted.
    `caller_line(root)` where no frame is the tree's (the loop called from outside it)."""
    inside = folder_prefixes(root)
    frame = sys._getframe(1)
    via = ""
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith((*_OWN, "<")):
            if filename.startswith(inside) and not filename.startswith(_INSTALLED):  # not a library in the tree's venv
                return f"{_shown(filename, root)}:{line_of(frame)}{via}"
            if not via or not filename.startswith(_STDLIB):  # the outermost library frame below the tree's, the
                via = f" via {_shown(filename, root)}"  # standard library's (`functools`' dispatch) only if alone
        frame = frame.f_back  # type: ignore[assignment]
    return caller_line(root)


@functools.lru_cache(maxsize=1024)
def _shown(filename: str, root: str) -> str:
    """An installed library's `filename` relative to the packages' folder (`stable_baselines3/ppo/ppo.py`: the same
    on every machine), else relative to `root` where it lies inside it; resolved once per file."""
    path = Path(filename).resolve()
    for folder in (*_PACKAGES, Path(root)):  # a library installed inside the tree (its .venv) is the library
        if path.is_relative_to(folder):
            return path.relative_to(folder).as_posix()
    return filename


_PACKAGES = tuple(
    dict.fromkeys(Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib"))
)  # where pip installs: a library's frames are shown from its package's name
_INSTALLED = folder_prefixes(*map(str, _PACKAGES))
_STDLIB = folder_prefixes(sysconfig.get_paths()["stdlib"])
