"""The shared state of sync accounting: region stacks, active counters and the delivery of one sync event.

`tripwire.sync.regions`, `tripwire.sync.counter` and `tripwire.sync.hooks` (the torch modes and patches that
see syncs) all read and write it; keeping it here, with no torch import, means none imports another at
module level: the hooks deliver events here, the counter installs the hooks when it starts.
"""

from __future__ import annotations

import dis
import importlib.util
import linecache
import logging
import os
import re
import sys
import sysconfig
import threading
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

from tripwire.common.folders import folder_prefixes
from tripwire.common.lines import forget as forget_lines
from tripwire.common.lines import line_of
from tripwire.sync import kinds

OUTSIDE = "<outside>"
# Frames in any tripwire module are skipped when the call site of a sync is looked up.
_TRIPWIRE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_TRIPWIRE_DIRS = folder_prefixes(_TRIPWIRE_DIR)  # as imported and resolved
MAX_CALLERS = 4  # project frames recorded above a sync's call site


def _library_dirs() -> tuple[str, ...]:
    """The standard library and site-packages folders (`sysconfig`): their frames are never a project caller. A
    project installed editable is imported from its own folder, outside them."""
    paths = sysconfig.get_paths()
    return folder_prefixes(*(paths[name] for name in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(name)))


_LIBRARY_DIRS = _library_dirs()


@dataclass(frozen=True)
class SyncEvent:
    """One host synchronization: what synced, in which region, from which call site."""

    kind: str
    region: str
    site: str
    function: str
    region_path: str = OUTSIDE
    # The torch code that synced on the user's behalf ("torch/optim/adam.py:_single_tensor_adam"), when the user's
    # line did not sync itself (Adam's step counters, a distribution's argument validation); "" otherwise.
    via: str = ""
    path: str = ""  # the call site's absolute file name, for reading its source line (`site_text`)
    # The project frames above the call site (those that called its function), innermost first, at most
    # `MAX_CALLERS`, each "relpath:line in qualname": frames outside torch, tripwire, the standard library and
    # site-packages, and not frozen or generated (`<...>`) code. `caller_text` is the first one's stripped source.
    callers: tuple[str, ...] = ()
    caller_text: str = ""

    @property
    def line(self) -> int:
        """The call site's line number (0 when unknown)."""
        number = self.site.rsplit(":", 1)[-1]
        return int(number) if number.isdigit() else 0

    @property
    def text(self) -> str:
        """The call site's source line, stripped ("" when the file cannot be read): what identifies a site across
        commits whose line numbers moved."""
        return site_text(self.path, self.line)


class _GlobalState:
    """Process-wide switches read on the hot path; plain attributes, so a check is one lookup."""

    def __init__(self) -> None:
        self.active = 0  # number of active SyncCounters (all threads)
        self.pushed = 0  # hot_path entries currently on some thread's region stack
        self.counters: list[Any] = []  # the active tripwire.sync.SyncCounter objects
        # One more each time counting starts (the first counter becomes active): work `carried` to another thread
        # counts only while the counting it was given is the one running (`deliver`), so a thread one recording
        # left running counts nothing in the next.
        self.generation = 0
        self.root = ""
        self.skip_prefixes: tuple[str, ...] = _TRIPWIRE_DIRS
        self.lock = threading.Lock()  # guards `pushed` when regions are entered on several threads
        # Caches of the caller lookup, emptied when the root or the skipped folders change or the last counter stops:
        # per code object (by id; the entry holds the code, so its id is not reused), None when it is not project
        # code, else per instruction (`f_lasti`: a frame's `f_lineno` decodes the code's line table from its start on
        # every read, microseconds deep in a script's module code) its "relpath:line in qualname" and source line.
        self.codes: dict[int, tuple[CodeType, dict[int, tuple[str, str]] | None]] = {}
        self.barren: dict[int, FrameType] = {}  # frames with no project frame outward of them (`_callers`)
        self.relative: dict[str, str] = {}  # `relative_path` of each call site's file
        self.roles: dict[int, tuple[CodeType, bool, str, bool]] = {}  # per code object (by id): `_role`
        self.sites: dict[tuple[int, int], tuple[CodeType | None, str, str, str]] = {}  # per (code id, f_lasti): `_site`
        # each distinct event `deliver` built, by what makes it, with the site entry its key names by id
        self.events: dict[tuple[Any, ...], tuple[SyncEvent, Any]] = {}
        # per (code id, two instructions): whether only a method's lookup stands between them (`_read_of_the_copy`),
        # with the code, so that its id is not reused
        self.chained: dict[tuple[int, int, int], tuple[CodeType, bool]] = {}
        # per code object (by id): its instructions' offsets, and each `(offset, opname, argval)`, read once (a loop
        # written at a script's top level is one code object of thousands of instructions, and its copies and reads
        # make many pairs)
        self.instructions: dict[int, tuple[CodeType, list[int], list[tuple[int, str, object]]]] = {}
        # per (code id, f_lasti): whether the copy that call makes is read straight away (`read_straight_after`)
        self.consumed: dict[tuple[int, int], tuple[CodeType, bool]] = {}
        # per (code id, f_lasti): whether the instruction is a subscript read or store (`copies.at_subscript`), with
        # the code (a key of the code object itself would hash its bytecode and constants at every call)
        self.subscripts: dict[tuple[int, int], tuple[CodeType, bool]] = {}
        # The lines of each file a recording read a call site's or a caller's source from, as they were at its first
        # read (`source_lines`): a file the user edits while the loop runs is read as the loop runs it, by the sites
        # met after the edit and by the report at the end. Kept past the counter (the report is made after it) and
        # emptied when the next recording starts (`new_recording`).
        self.sources: dict[str, list[str]] = {}
        # The files whose lines, as the recording read them, are not the lines the loop's code was compiled from
        # (`code_matches_source`: edited after the loop imported them), in the order found; emptied with `sources`.
        self.stale_sources: dict[str, None] = {}
        # per code object (by id): whether it matches its file's lines, with the code, so its id is not reused
        self.matched: dict[int, tuple[CodeType, bool]] = {}
        self.defined: dict[str, frozenset[str]] = {}  # the names each file read `def`s or `class`es, with `sources`


class _ThreadState(threading.local):
    """Per-thread region stack, suppression depth and relabelling."""

    def __init__(self) -> None:
        self.regions: list[tuple[object, str]] = []  # (the tripwire.sync.hot_path object, its name)
        self.suppress = 0
        self.label: str | None = None
        self.implicit = 0  # depth of implicit counting on this thread (`tripwire.sync.hooks` kernels read it)
        self.nested = 0  # inside a counted data-dependent op's own kernel: what it runs is not counted again
        self.by_mode = 0  # a dispatch mode counts implicit syncs on this thread (`hooks._InferenceWatch`)
        self.modes_off: list[Any] = []  # per `ignore_syncs` level: the counting modes it took off, or None
        self.counting = 0  # this thread counts explicit syncs through the stand-ins (`tripwire.sync.watched`)
        self.generation: int | None = None  # inside `carried` work: the counting generation it was given
        self.carrying = 0  # depth of `hooks.thread_modes` on this thread: only the outermost pushes the modes
        # the last sync delivered on this thread, when it was a copy to the host: the counting generation, and its
        # frame's id, code's id and instruction, in the site's frame and in the frame that made the call when torch's
        # code did (`_read_of_the_copy`); ids, so no code of the loop is held; any later delivery replaces it
        self.copied: tuple[tuple[int, int, int, int], tuple[int, int, int, int] | None] | None = None


_STATE = _GlobalState()
_LOCAL = _ThreadState()


def _fresh_lock_in_child() -> None:
    """A forked child (a DataLoader worker, a Hogwild process) starts with the lock free: another thread of the parent
    may have held it at the fork, and no thread of the child would ever release it."""
    _STATE.lock = threading.Lock()


os.register_at_fork(after_in_child=_fresh_lock_in_child)


def deliver(kind: str, *, implicit: bool = False) -> None:
    """Record one sync of `kind` at the current call site to every active counter (hook entry).

    The site is the innermost frame outside torch and tripwire, its `via` the innermost torch frame between it and the
    hook that is not dispatch machinery (`torch/<file>:<function>`), its callers the project frames above it
    (`_callers`). What each code object is (`_role`) and each site (`_site`) are cached, so a sync costs a walk of
    dict lookups."""
    local = _LOCAL
    if local.suppress or (local.generation is not None and local.generation != _STATE.generation):
        return
    if compiler_at_work():
        return
    copied, local.copied = local.copied, None
    asked = kind
    if local.label is not None:
        kind = local.label
    frame, via, maker = _outside(sys._getframe(1))
    if via is _COMPILER:
        return
    if frame is not None:
        # read in the site's frame (`x.cpu().numpy()`), or in the torch frame that made both calls (tensorboard's
        # `x.detach().cpu().numpy()` under the loop's `writer.add_scalar(tag, loss)`)
        by_torch = maker if maker is not frame else None
        read = copied is not None and (
            _read_of_the_copy(asked, implicit, frame, copied[0])
            or (
                by_torch is not None
                and copied[1] is not None
                and _read_of_the_copy(asked, implicit, by_torch, copied[1])
            )
        )
        if asked in _HOST_COPIES:  # a copy of the copy (`x.cpu().to("cpu")`) is the copy a read may follow
            generation = _STATE.generation
            local.copied = (
                (generation, id(frame), id(frame.f_code), frame.f_lasti),
                None if by_torch is None else (generation, id(by_torch), id(by_torch.f_code), by_torch.f_lasti),
            )
        if read:
            if asked not in _HOST_COPIES:  # the same call may read it again: numpy's `np.array(x.cpu())` asks
                local.copied = copied  # `__array__` with `copy=`, then, refused, without
            return
    callers: tuple[str, ...] = ()
    caller_text = ""
    if frame is None:
        site = _NO_SITE
    else:
        code = frame.f_code
        site = _STATE.sites.get((id(code), frame.f_lasti)) or _site(frame)
        callers, caller_text = _callers(_caller_frame(frame) if code.co_name in COMPREHENSIONS else frame.f_back)
    regions = local.regions
    path = _region_path(regions)
    # A loop syncs at the same few sites over and over: their events are frozen, so each is built once and shared. A
    # site entry stands for its name, function and file, by its id: the cached event holds the entry, so the id is
    # not reused while the key is there.
    key = (kind, path, id(site), via, callers)
    cached = _STATE.events.get(key)
    if cached is None:
        region = regions[-1][1] if regions else OUTSIDE
        cached = _STATE.events[key] = (
            SyncEvent(kind, region, site[1], site[2], path, via, site[3], callers, caller_text),
            site,
        )
    event = cached[0]
    for counter in list(_STATE.counters):
        if implicit and not counter.implicit:
            continue
        counter.events.append(event)


# A copy of device data to the host, and the reads of a tensor that wait for its data: on a GPU the read of a host
# copy waits for nothing (`x.cpu().tolist()` syncs once, at `.cpu()`). Names as `tripwire.sync.kinds` has them.
_HOST_COPIES = frozenset({kinds.CPU, kinds.TO_CPU, kinds.COPY_TO_CPU})
_READS = frozenset(
    {kinds.ITEM, kinds.TOLIST, kinds.NUMPY, kinds.FORMAT, kinds.CONTAINS, kinds.TO_CPU, kinds.CPU}
    | {kinds.BOOL, kinds.FLOAT, kinds.INT, kinds.INDEX, kinds.COMPLEX}
)
# What may stand between two chained calls in a frame's bytecode: the method's name looked up, constants passed
_CHAIN = frozenset({"LOAD_ATTR", "LOAD_METHOD", "PRECALL", "CACHE", "KW_NAMES", "LOAD_CONST", "PUSH_NULL", "NOP"})
# Tensor methods that, called on a host copy, give a host tensor and wait for nothing: casts, views and reshapes,
# reductions and elementwise math. Called straight on the copy with constants alone, they may stand between it and
# its read (`x.cpu().squeeze().numpy()`, `mask.cpu().sum().item()`). Not a move (`to`, `cuda`, `type`), and not a
# method whose arguments are variables (a device tensor among them would be read).
_HOST_METHODS = frozenset(
    {"float", "double", "half", "bfloat16", "int", "long", "short", "bool", "byte", "char", "detach", "clone"}
    | {"contiguous", "view", "reshape", "flatten", "ravel", "squeeze", "unsqueeze", "t", "permute", "transpose"}
    | {"sum", "mean", "max", "min", "amax", "amin", "argmax", "argmin", "prod", "all", "any", "count_nonzero"}
    | {"abs", "neg", "round", "sign", "exp", "log", "sqrt", "norm", "std", "var", "nonzero", "unique", "sort"}
)
_LOOKUPS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})


def _only_lookups_and_host_methods(instructions: list[tuple[int, str, object]]) -> bool:
    """Whether these instructions (those between a copy's call and a read's) only look up the read's method, call
    `_HOST_METHODS` on the copy, and pass constants."""
    method = None  # the last name looked up: a call is allowed when it calls a host method
    for _, name, value in instructions:
        if name in _LOOKUPS:
            method = value
        elif name in ("CALL", "CALL_KW"):  # CALL_KW: a call with keywords, from Python 3.13
            if method not in _HOST_METHODS:
                return False
            method = None
        elif name not in _CHAIN:
            return False
    return True


def _read_of_the_copy(kind: str, implicit: bool, frame: FrameType, copied: tuple[int, int, int, int]) -> bool:
    """Whether this sync reads the host copy the one before it made, on this thread: a read (or a data-dependent op)
    called, in the same frame, directly on the result of the counted copy (`x.cpu().tolist()`,
    `t.detach().cpu().numpy()`, `float(x.cpu())`), or on a host method's result of it (`x.cpu().float().tolist()`,
    `_HOST_METHODS`), nothing else called between them. The copy was the sync; reading it
    waits for nothing on a GPU run, and a CPU run, where `.cpu()` returns the tensor itself and so cannot mark it,
    counts it the same way. Read from the bytecode between the two calls (cached per code and pair of offsets)."""
    code = frame.f_code
    if copied[:3] != (_STATE.generation, id(frame), id(code)) or not (kind in _READS or implicit):
        return False
    start, end = copied[3], frame.f_lasti
    key = (id(code), start, end)
    known = _STATE.chained.get(key)
    if known is None:
        offsets, instructions = _listing(code)
        # an offset may name a call's inline cache (a Python function called from it): the call it belongs to, the
        # last instruction at or before it (offsets ascend)
        first, last = _at_or_before(offsets, start), _at_or_before(offsets, end)
        # not the same call (torch's own code made both, under one call of the user's), nothing else called between
        chained = 0 <= first < last and _only_lookups_and_host_methods(instructions[first + 1 : last])
        known = _STATE.chained[key] = (code, chained)
    return known[1]


def _listing(code: CodeType) -> tuple[list[int], list[tuple[int, str, object]]]:
    """`code`'s instructions' offsets and `(offset, opname, argval)` each, read once per counter."""
    listed = _STATE.instructions.get(id(code))
    if listed is None:
        instructions = [(i.offset, i.opname, i.argval) for i in dis.get_instructions(code)]
        listed = _STATE.instructions[id(code)] = (code, [offset for offset, _, _ in instructions], instructions)
    return listed[1], listed[2]


_READ_METHODS = frozenset({"numpy", "tolist", "item"})


def read_straight_after(frame: FrameType) -> bool:
    """Whether what the call `frame` runs now returns (a copy to the host) is read in the same expression, a read
    method called on it with only host methods and constants between (`x.cpu().numpy()`, `a.cpu().squeeze().tolist()`,
    `_HOST_METHODS`): nothing of it is left for the loop to compute with. Read from the bytecode, once per call site
    and counter."""
    code = frame.f_code
    key = (id(code), frame.f_lasti)
    known = _STATE.consumed.get(key)
    if known is None:
        offsets, instructions = _listing(code)
        at = _at_or_before(offsets, frame.f_lasti)
        known = _STATE.consumed[key] = (code, at >= 0 and _read_by_chain(instructions[at + 1 :]))
    return known[1]


def _read_by_chain(instructions: list[tuple[int, str, object]]) -> bool:
    """Whether these instructions, after a call, call a read method on its result, only host methods between."""
    method = None
    for _, name, value in instructions:
        if name in _LOOKUPS:
            if method is not None:  # an attribute of a method's result not called: not a chain of calls
                return False
            method = value
        elif name in ("CALL", "CALL_KW"):
            if method in _READ_METHODS:
                return True
            if method not in _HOST_METHODS:
                return False
            method = None
        elif name not in _CHAIN:
            return False
    return False


def _at_or_before(offsets: list[int], offset: int) -> int:
    """The index of the last of `offsets` (ascending) at or before `offset`, -1 when none is: a bisection, written
    here because the standard library's `bisect` is not imported by the time `python -m tripwire` runs, and a file of
    that name in the folder it runs from would be imported in its place (tests/tripwire/history)."""
    low, high = 0, len(offsets)
    while low < high:
        middle = (low + high) // 2
        if offsets[middle] <= offset:
            low = middle + 1
        else:
            high = middle
    return low - 1


def _region_path(regions: list[tuple[object, str]]) -> str:
    """The names of the regions open on this thread, outermost first, joined by "/" (`OUTSIDE` when none is)."""
    if not regions:
        return OUTSIDE
    if len(regions) == 1:
        return regions[0][1]
    return "/".join([name for _, name in regions])


def event_at(kind: str, filename: str, line: int, function: str, reason: str = "") -> SyncEvent:
    """An event named at a given line (what dynamo reports, not the frame running now), in this thread's current
    region, with the project frames running now as its callers (innermost first): whoever called the compiled code."""
    regions = _LOCAL.regions
    region = regions[-1][1] if regions else OUTSIDE
    path = _region_path(regions)
    relative = _STATE.relative.get(filename)
    if relative is None:
        relative = _STATE.relative[filename] = relative_path(filename)
    frame: FrameType | None = sys._getframe(1)
    prefixes = _STATE.skip_prefixes
    while frame is not None and frame.f_code.co_filename.startswith((*prefixes, _LOGGING_FILE)):
        frame = frame.f_back  # tripwire's handler, the logging module that called it, torch's compiler
    callers, caller_text = _callers(frame)
    return SyncEvent(kind, region, f"{relative}:{line}", function, path, reason, filename, callers, caller_text)


_LOGGING_FILE = logging.__file__ or "logging/__init__.py"


def skip_prefixes_for(torch_file: str | None) -> tuple[str, ...]:
    """The folders whose frames are never a call site: torch's (given its `__init__.py`) and tripwire's, each as
    imported and with its links resolved (`folder_prefixes`)."""
    return folder_prefixes(*([os.path.dirname(torch_file)] if torch_file else []), _TRIPWIRE_DIR)


def ensure_skipped() -> None:
    """Skip torch's and tripwire's frames when call sites are looked up (as `SyncCounter`'s hooks do); torch need not
    be imported."""
    module = sys.modules.get("torch")
    spec = None if module is not None else importlib.util.find_spec("torch")
    origin = getattr(module, "__file__", None) or (spec.origin if spec is not None else None)
    prefixes = skip_prefixes_for(origin)
    if _STATE.skip_prefixes != prefixes:
        _set_skip_prefixes(prefixes)


# torch's own dispatch machinery: never "the torch code behind a sync", only the road to the hook. Matched as the
# end of a torch-relative path; `/_compile.py` (`_disable_dynamo`, the wrapper torch puts around a dispatch mode's
# `__torch_dispatch__`) is that one file, not inductor's `async_compile.py` and its like.
_MACHINERY = (
    "overrides.py",
    "_tensor.py",
    "_ops.py",
    "_python_dispatch.py",
    "_jit_internal.py",
    "eval_frame.py",
    "/_compile.py",
)


def machinery_via(via: str) -> bool:
    """Whether a `via` (`torch/<file>:<function>`) names dispatch machinery rather than torch code behind a sync."""
    file = via.split(":", 1)[0]
    return file.startswith("torch/") and file.endswith(_MACHINERY)


# The site of a walk that met no frame outside torch and tripwire
_NO_SITE: tuple[CodeType | None, str, str, str] = (None, "<unknown>", "<unknown>", "")


def _site(frame: FrameType) -> tuple[CodeType | None, str, str, str]:
    """`(code, "relpath:line", function, absolute file)` of a sync's call site, cached per code object (by id; the
    entry holds the code, so its id is not reused) and instruction (`f_lasti`: `f_lineno` decodes the code's line
    table from its start on every read)."""
    code = frame.f_code
    filename = code.co_filename
    relative = _STATE.relative.get(filename)
    if relative is None:
        relative = _STATE.relative[filename] = relative_path(filename)
    site = (code, f"{relative}:{frame.f_lineno}", function_name(code), filename)
    source_lines(filename)  # its text as the loop runs it, whenever the report reads it
    code_matches_source(code)  # a file edited since the loop imported it: its lines are not the site's
    # one entry per key even when two threads meet a site at once: events are keyed by the entry's id
    return _STATE.sites.setdefault((id(code), frame.f_lasti), site)


# What torch.compile runs on its own behalf is not the loop's: a sync made while it compiles (dynamo's tracing, AOT
# Autograd logging its graphs with a tensor's repr, inductor autotuning a kernel) or by the guard functions dynamo
# generates (`___make_guard_fn.<locals>.guard`, which read a 0-d tensor's value on torch 2.11) is not delivered, so a
# compiled loop counts what its eager twin counts, whatever torch version compiles it.
_COMPILER = "<torch.compile>"
_GUARD_FUNCTIONS = "___make_guard_fn"


def compiler_at_work() -> bool:
    """Whether dynamo is compiling on this thread now (its compile context is set: tracing and the backend).
    `CompileContext.try_get()` read as it reads its thread-local, a Python call shorter: every sync asks."""
    guards = sys.modules.get("torch._guards")
    if guards is None:
        return False
    local = getattr(guards, "_TLS", None)
    if local is None:  # a torch that keeps it elsewhere
        return guards.CompileContext.try_get() is not None
    return getattr(local, "compile_context", None) is not None


# The first constant of the code a stand-in runs its original through on the caller's behalf (`watched.as_caller`): it
# wears the caller's file and line, and is tripwire's own frame
RUNNER_MARK = "tripwire: the caller's line, running a stand-in's original"


def _role(code: CodeType) -> tuple[CodeType, bool, str, bool]:
    """`(code, skipped, via, own)`: whether frames of `code` are passed over when a site is looked up (torch's and
    tripwire's), the `torch/<file>:<function>` a torch frame names as the code behind a sync ("" for tripwire's
    frames and torch's dispatch machinery; `_COMPILER` for the guards dynamo generates, whose syncs are not the
    loop's), and whether it is tripwire's own. The entry holds the code, so its id is not reused while cached."""
    filename = code.co_filename
    if code.co_consts[:1] == (RUNNER_MARK,):
        return code, True, "", True
    if filename.startswith("<") and code.co_qualname.startswith(_GUARD_FUNCTIONS):
        return code, True, _COMPILER, False
    if not filename.startswith(_STATE.skip_prefixes):
        return code, False, "", False
    if filename.startswith(_TRIPWIRE_DIRS):
        return code, True, "", True
    named = f"{_torch_relative(filename)}:{code.co_qualname}"
    return code, True, "" if machinery_via(named) else named, False


# Code run in a frame of its own only up to Python 3.11 (PEP 709 inlines the first three in 3.12).
COMPREHENSIONS = ("<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>")


_IN_COMPREHENSION = tuple(f".<locals>.{name}" for name in COMPREHENSIONS)


def function_name(code: CodeType) -> str:
    """The qualified name a sync site is keyed by: a comprehension's line is its enclosing function's, as Python 3.12
    runs it (PEP 709 inlines list, dict and set comprehensions), so a budget holds on every Python and a loop
    rewritten as an equivalent comprehension is the same site."""
    name = code.co_qualname
    while name.endswith(_IN_COMPREHENSION):
        name = name.rsplit(".<locals>.", 1)[0]
    return name


def _caller_frame(site: FrameType) -> FrameType | None:
    """Where the callers of the site's function start: the frame above it, or, for a sync in a comprehension or
    generator expression, above the function holding it (the same line; a separate frame only on some Pythons)."""
    caller = site.f_back
    while (
        caller is not None
        and site.f_code.co_name in COMPREHENSIONS
        and caller.f_code.co_filename == site.f_code.co_filename
    ):
        site, caller = caller, caller.f_back
    return caller


def _callers(frame: FrameType | None) -> tuple[tuple[str, ...], str]:
    """The project frames from `frame` outwards, innermost first (at most `MAX_CALLERS`), as "relpath:line in
    qualname", and the first one's stripped source line.

    Kept cheap: whether a code object is project code and each (code, line)'s description are cached, and a walk
    that reached the bottom of the stack remembers where the last project frame was left (`_STATE.barren`), so the
    next walk stops there instead of crossing the test runner's or the launcher's frames again."""
    codes, barren = _STATE.codes, _STATE.barren
    chain: list[str] = []
    text = ""
    boundary: FrameType | None = frame  # the first frame outward of the last project frame seen
    while frame is not None:
        code = frame.f_code
        known = codes.get(id(code))
        if known is None:
            known = codes[id(code)] = (code, {} if _is_project(code.co_filename) else None)
        lines = known[1]
        if lines is not None:
            described = lines.get(frame.f_lasti)
            if described is None:
                described = lines[frame.f_lasti] = _describe(code, frame.f_lineno or 0)
            if not chain:
                text = described[1]
            chain.append(described[0])
            if len(chain) == MAX_CALLERS:
                return tuple(chain), text
            boundary = frame.f_back
        elif barren.get(id(frame)) is frame:
            return tuple(chain), text
        frame = frame.f_back
    # No project frame lies outward of `boundary`. A frame's callers are fixed while it runs, except a generator's
    # or coroutine's (resumed from anywhere); the entry holds the frame, so its id is not reused while cached. Where
    # the project is only called back from a library (a library's loop or CLI, a test runner), `boundary` is the
    # library's frame of each call, a new one every time: the table is emptied when full, so it never keeps more than
    # a few of those frames, and their locals (a batch of tensors), alive.
    if boundary is not None and not boundary.f_code.co_flags & _RESUMABLE:
        if len(barren) >= _BARREN_FRAMES:
            barren.clear()
        barren[id(boundary)] = boundary
    return tuple(chain), text


_BARREN_FRAMES = 64  # frames `_callers` keeps as stopping points at most
_RESUMABLE = 0x20 | 0x80 | 0x100 | 0x200  # CO_GENERATOR, CO_COROUTINE, CO_ITERABLE_COROUTINE, CO_ASYNC_GENERATOR


def _is_project(filename: str) -> bool:
    """Project code: a real file outside torch, tripwire, the standard library and site-packages."""
    return not (
        not filename
        or filename.startswith("<")
        or filename.startswith(_STATE.skip_prefixes)
        or filename.startswith(_LIBRARY_DIRS)
    )


def _describe(code: CodeType, line: int) -> tuple[str, str]:
    """`("relpath:line in qualname", stripped source line)` of one line of `code`."""
    filename = code.co_filename
    source_lines(filename)  # read as it is now, at its first read of the recording (`_STATE.sources`)
    code_matches_source(code)
    return f"{relative_path(filename)}:{line} in {code.co_qualname}", site_text(filename, line)


def skip_prefixes() -> tuple[str, ...]:
    """The folders whose frames are not the user's: torch's and tripwire's (`ensure_skipped`)."""
    return _STATE.skip_prefixes


def user_frame(depth: int = 1) -> FrameType | None:
    """The innermost frame outside torch and tripwire: the user's line whose call is running now (looked for from
    `depth` frames up)."""
    return _outside(sys._getframe(depth))[0]


def inside_call_of(caller: int, code: int, first: int, last: int) -> bool | None:
    """Whether the user's code running now runs inside a call made by the frame `caller` (by `object.__hash__`, as
    `copies` keys live objects; running `code`, keyed so too) at lines `first` to `last`: True when the frame it
    called is the user's; False when that is torch's or tripwire's (the caller's own line reading, through a stand-in);
    None when the caller is on this thread's stack no more, or has moved past those lines (its call is over)."""
    found = calling(caller, code)
    if found is None or not first <= (line_of(found[0]) or 0) <= last:
        return None
    return bool(found[1])


def calling(caller: int, code: int) -> tuple[FrameType, bool | None] | None:
    """The frame `caller` (by `object.__hash__`, as `copies` keys live objects) when it is on this thread's stack
    running `code` (keyed so too), with what runs below it on the way to the code running now: None when no user's
    frame does (its own line is running, through torch or a stand-in), True when the frame it called is the user's,
    False when that is torch's or tripwire's and the user's code runs deeper (a module's `forward`). None when it is
    not there."""
    key = object.__hash__  # how `copies` keys live objects, `caller` and `code` among them
    roles = _STATE.roles
    called_is_user = user_below = False  # the frame just walked is the user's; any walked so far was
    frame: FrameType | None = sys._getframe(2)  # past this function and the one asking
    while frame is not None:
        if key(frame) == caller:
            if key(frame.f_code) != code:
                return None
            return frame, (called_is_user if user_below else None)
        role = roles.get(id(frame.f_code))
        if role is None:
            role = roles[id(frame.f_code)] = _role(frame.f_code)
        called_is_user = not role[1]
        user_below = user_below or called_is_user
        frame = frame.f_back
    return None


def site_frame(frame: FrameType) -> FrameType | None:
    """`user_frame` looked for from `frame` outwards (a caller that holds a frame of the call already)."""
    return _outside(frame)[0]


def user_call_frame(frame: FrameType) -> FrameType | None:
    """The user's frame whose line made the call running under `frame` (a stand-in's, a mode's), or None when torch
    made it on the user's behalf (a copy inside `torch.save`)."""
    user, _via, maker = _outside(frame)
    return user if user is maker else None


def _outside(frame: FrameType | None) -> tuple[FrameType | None, str, FrameType | None]:
    """The first frame from `frame` outwards that is neither torch's nor tripwire's (None: none is), the
    `torch/<file>:<function>` of the innermost torch frame passed that is not dispatch machinery ("" if none), and
    the first frame that is not tripwire's (the one that made the call: torch's, or the first frame itself): each code
    object's `_role` looked up, not its file name matched on every call."""
    roles = _STATE.roles
    via = ""
    maker = None
    while frame is not None:
        code = frame.f_code
        role = roles.get(id(code))
        if role is None:
            role = roles[id(code)] = _role(code)
        if maker is None and not role[3]:
            maker = frame
        if not role[1]:
            return frame, via, maker
        if role[2] is _COMPILER:
            return None, _COMPILER, maker
        if not via:
            via = role[2]
        frame = frame.f_back
    return None, via, maker


def site_text(filename: str, line: int) -> str:
    """The stripped source line `line` of `filename` ("" when unreadable): as the recording first read the file
    (`source_lines`), else as it is on disk now."""
    if not filename or line <= 0 or filename in _STATE.stale_sources:
        return ""  # an edited file's line is not the one the loop ran
    lines = _STATE.sources.get(filename)
    if lines is None:
        linecache.checkcache(filename)  # the file may have been rewritten since it was first read
        return linecache.getline(filename, line).strip()
    return lines[line - 1].strip() if line <= len(lines) else ""


def source_lines(filename: str) -> list[str]:
    """The lines of `filename`, read at the recording's first read of it and kept for the rest of the recording (and
    its report): a file rewritten while the loop runs is not read again (`_STATE.sources`). [] when unreadable."""
    lines = _STATE.sources.get(filename)
    if lines is None:
        linecache.checkcache(filename)  # the file may have been rewritten since linecache first read it
        lines = _STATE.sources[filename] = list(linecache.getlines(filename))
    return lines


def code_matches_source(code: CodeType) -> bool:
    """Whether `code` was compiled from its file's lines as this recording read them (`source_lines`), as far as its
    own record tells: each instruction's position within those lines, and a function's or class's `def` or `class`
    line, past its decorators, naming it. A file edited after the loop imported it fails once its lines have moved;
    tripwire then reads nothing of the code's source (no spelling: its copies count as a plain CPU run's; no site
    text) and says so (`stale_sources`), where it would misread the new lines as the code's. Once per code object a
    recording; True for a file it cannot read (nothing to misread)."""
    known = _STATE.matched.get(id(code))
    if known is None:
        matches = _matches_source(code)
        known = _STATE.matched[id(code)] = (code, matches)
        if not matches:
            _STATE.stale_sources.setdefault(code.co_filename, None)
    return known[1]


_DEFINES = re.compile(r"\s*(?:async\s+def|def|class)\s+(\w+)")
_DEFINITION_SPAN = 64  # lines of decorators looked through for the `def`


def _matches_source(code: CodeType) -> bool:
    lines = source_lines(code.co_filename)
    if not lines:
        return True
    for start, end, _first_col, last_col in code.co_positions():
        if end is None:
            continue
        if end > len(lines):
            return False
        if start == end and last_col is not None and last_col > len(lines[end - 1].rstrip("\r\n").encode()):
            return False  # columns are UTF-8 byte offsets
    if code.co_name.startswith("<"):  # a module, a lambda, a comprehension: its positions alone
        return True
    names = _STATE.defined.get(code.co_filename)
    if names is None:
        names = _STATE.defined[code.co_filename] = frozenset(
            found.group(1) for line in lines if (found := _DEFINES.match(line)) is not None
        )
    if code.co_name not in names:
        return True  # code made from the file's, under a name no `def` there has (dynamo's resume functions)
    first = code.co_firstlineno
    if not 0 < first <= len(lines):
        return False
    if not lines[first - 1].lstrip().startswith("@"):  # undecorated: its first line is its `def`
        defined = _DEFINES.match(lines[first - 1])
        return defined is not None and defined.group(1) == code.co_name
    for line in lines[first : first + _DEFINITION_SPAN]:  # its decorators, then its `def`
        defined = _DEFINES.match(line)
        if defined is not None:
            return defined.group(1) == code.co_name
    return True  # decorators longer than read here: nothing said


def stale_sources() -> list[str]:
    """The files this recording found edited since the loop imported them (`code_matches_source`), as
    `relative_path` names them."""
    return [relative_path(filename) for filename in _STATE.stale_sources]


def stale_note(files: list[str]) -> str:
    """The note a result carries for `stale_sources`' files, "" for none."""
    if not files:
        return ""
    shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
    return (
        f"tripwire: {shown} changed on disk after the loop imported {'them' if len(files) > 1 else 'it'}: their "
        "lines are not the code that ran, so tripwire read no spelling from that code (its copies counted as a plain "
        "CPU run's) and shows no line text for its sites; record again without editing the loop while it runs"
    )


def new_recording() -> None:
    """The first counter of a recording starts: the files read by the last recording are read again when needed."""
    _STATE.sources = {}
    _STATE.stale_sources = {}
    _STATE.defined = {}


def _torch_relative(filename: str) -> str:
    marker = f"{os.sep}torch{os.sep}"
    return "torch/" + filename.rsplit(marker, 1)[1].replace(os.sep, "/") if marker in filename else filename


def _resolved(filename: str) -> str:
    """An absolute file name with its links resolved; any other name (`<string>`, one a file's text made) as it is."""
    if not os.path.isabs(filename):
        return filename
    try:
        return os.path.realpath(filename)
    except (ValueError, OSError):  # a NUL in it, a loop of links
        return filename


def _below(name: str, prefixes: tuple[str, ...]) -> str | None:
    """`name` past the longest of `prefixes` it starts with, or None when it starts with none."""
    held = [prefix for prefix in prefixes if name.startswith(prefix)]
    return name[len(max(held, key=len)) :] if held else None


def relative_path(filename: str) -> str:
    """`filename` relative to the counter's root directory (its `root`, else the working directory) when under it,
    either of them reached through links or not; else relative to the longest `sys.path` entry holding it (the path
    its import uses, the same on every machine); else unchanged. Keys relative to a declared root match between two
    checkouts of one project in two folders, and between a checkout and a link to it."""
    root = _STATE.root
    if root:
        # the root as given and resolved, and the file as imported and resolved: a file imported through a link (a
        # home folder linked to another disk, on `PYTHONPATH`) is under the working directory, which is resolved
        roots = folder_prefixes(root)
        relative = _below(filename, roots)
        if relative is None:  # resolved only when the name as imported is not under the root
            relative = _below(_resolved(filename), roots)
        if relative is not None:
            return relative
    entries = tuple(os.path.join(os.path.abspath(entry), "") for entry in sys.path if entry)
    relative = _below(filename, entries)
    return filename if relative is None else relative


def set_root(root: str) -> None:
    """Set the directory call sites are named relative to (the outermost counter's `root`)."""
    if root != _STATE.root:
        _STATE.root = root
        clear_caches()


def _set_skip_prefixes(prefixes: tuple[str, ...]) -> None:
    """Set the directories whose frames are never a call site (hook installer use; the first counter to start)."""
    _STATE.skip_prefixes = prefixes
    clear_caches()


def clear_caches() -> None:
    """Forget the cached lookups (the root or the skipped folders changed, or the last counter stopped)."""
    _STATE.codes = {}
    _STATE.barren = {}
    _STATE.relative = {}
    _STATE.roles = {}
    _STATE.sites = {}
    _STATE.events = {}
    _STATE.chained = {}
    _STATE.instructions = {}
    _STATE.consumed = {}
    _STATE.subscripts = {}
    _STATE.matched = {}
    forget_lines()
