"""Record one result: run a scenario on a source tree in this process, with every instrument in place.

`record(scenario, root)` puts the tree's import roots first on `sys.path`, applies the adapters whose condition holds
for this tree, runs the scenario's entry under a `SyncCounter` and a `CompileCounter` (call sites relative to `root`)
and its `Instrumentation`, and returns a `tripwire.outside.result.Result`. A failure of the code under test is a `crash`
with a one-line cause (its exception and the innermost line of the tree it came from); a scenario that cannot be set up
(a target that does not exist in this tree) is an `error`; a scenario that raises `NotApplicable` is `n/a`. Modules
imported from the tree are unloaded afterwards, and everything patched is restored. While the entry runs, the objects
that existed before it are frozen out of the garbage collector's full passes (`_frozen_heap`). What makes two runs of
a seeded loop draw other numbers is noted: a generator the loop drew from and never seeded (`Result.unseeded`,
`tripwire.outside.seeds`), torch's drawn from on several threads (`Result.draw_threads`), and NumPy generators made
from OS entropy (`Result.entropy`).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import importlib
import inspect
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

import torch

from tripwire.bitwise.draws import DrawThreads
from tripwire.bitwise.settings import SettingsWatch, determinism_settings, restore_settings
from tripwire.bitwise.trajectory import TrajectoryRecorder
from tripwire.bitwise.vendor_ops import VendorBoundOps, caller_line, loop_line
from tripwire.common import closure
from tripwire.common.context import capture_context, imported_distributions
from tripwire.common.errors import TripwireError
from tripwire.common.unhook import put_back
from tripwire.compile.counter import CompileCounter
from tripwire.outside import seeds
from tripwire.outside.blame import blame
from tripwire.outside.children import ChildWatch, tree_site
from tripwire.outside.instrument import Instrumentation, Session, _resolve
from tripwire.outside.launch import module_path, run_main
from tripwire.outside.result import Result, SyncSummary
from tripwire.scenario import Adapter, NotApplicable, Scenario, ScenarioError, Tree
from tripwire.sync.counter import SyncCounter
from tripwire.sync.log import EventLog
from tripwire.sync.sites import group_records
from tripwire.sync.state import stale_note
from tripwire.telemetry.clock import clock_fields, clock_golden, outlasting
from tripwire.telemetry.counts import load_events, reduce_events
from tripwire.telemetry.payloads import DEFAULT_EXCLUDED, payload_trajectory, payload_values, unmatched_patterns


def one_line(error: BaseException, root: Path | None = None, tb: TracebackType | None = None) -> str:
    """`ValueError: bad shape (src/model.py:42)`: the exception's first line and the innermost frame in `root`. A
    path under `root` in the message is written relative to it, so one failure reads the same in every checkout."""
    text = str(error).strip().splitlines()
    if text and root is not None:
        text[0] = text[0].replace(str(root).rstrip(os.sep) + os.sep, "")
    head = f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
    frames = list(traceback.extract_tb(tb or error.__traceback__))
    inside = [frame for frame in frames if root is None or frame.filename.startswith(str(root))]
    if not (inside or frames):
        return head
    frame = (inside or frames)[-1]
    where = frame.filename
    if root is not None and where.startswith(str(root)):
        where = os.path.relpath(where, root)
    return f"{head} ({where}:{frame.lineno})"


@contextlib.contextmanager
def _tree_on_path(root: Path, paths: Sequence[str]) -> Iterator[None]:
    """The tree's import roots first on `sys.path`; afterwards the path is restored and the tree's modules unloaded."""
    saved_path, before = list(sys.path), set(sys.modules)
    sys.path[:0] = [str((root / path).resolve()) for path in paths]
    try:
        yield
    finally:
        sys.path[:] = saved_path
        prefix = str(root)
        unloaded = []
        for name in set(sys.modules) - before:
            module_file = getattr(sys.modules.get(name), "__file__", None) or ""
            if module_file.startswith(prefix) or name.startswith("tripwire_tree_"):
                del sys.modules[name]
                unloaded.append(module_file)
        recording = closure.active()
        if recording is not None:  # a module imported from a cached pyc elsewhere never opened its source
            recording.modules(file for file in unloaded if file)


@contextlib.contextmanager
def _adapted(adapters: Sequence[Adapter]) -> Iterator[None]:
    """Module aliases, patches and wraps of the applying adapters, in place for the run and undone after."""
    saved_modules: dict[str, Any] = {}
    restores: list[tuple[Any, str, Any, bool, Any]] = []  # owner, attribute, own, had own, the replacement
    try:
        for adapter in adapters:
            for alias, real in adapter.aliases.items():
                saved_modules.setdefault(alias, sys.modules.get(alias))
                try:
                    sys.modules[alias] = importlib.import_module(real)
                except ImportError as error:
                    raise ScenarioError(
                        f"adapter alias {alias} -> {real}: {real} cannot be imported ({error})"
                    ) from None
            replacements = dict(adapter.patches)
            for target, adapt in adapter.wraps.items():
                owner, attribute, _ = _resolve(target, None)
                replacements[target] = adapt(getattr(owner, attribute))
            for target, replacement in replacements.items():
                owner, attribute, raw = _resolve(target, None)
                restores.append((owner, attribute, raw, attribute in vars(owner), replacement))
                setattr(owner, attribute, replacement)
        yield
    finally:
        for owner, attribute, raw, had_own, replacement in reversed(restores):
            put_back(owner, attribute, had_own, raw, replacement)
        for alias, module in saved_modules.items():
            if module is None:
                sys.modules.pop(alias, None)
            else:
                sys.modules[alias] = module


@contextlib.contextmanager
def _working_folder(scenario: Scenario, root: Path, workdir: Path | None) -> Iterator[Path]:
    """The run's working folder: the tree's root, or a fresh scratch folder (kept under `workdir` when given). The
    scratch folder is removed by this process only: not by a `TemporaryDirectory` finalizer, which a child the loop
    forked would run at its exit and remove the folder the parent still runs in."""
    previous, owner, scratch = os.getcwd(), os.getpid(), False
    if scenario.cwd == "root":
        folder = root
    elif workdir is not None:
        folder = workdir
        folder.mkdir(parents=True, exist_ok=True)
    else:
        folder, scratch = Path(tempfile.mkdtemp(prefix="tripwire-run-")), True
    try:
        os.chdir(folder)
        yield folder
    finally:
        os.chdir(previous)
        if scratch and os.getpid() == owner:
            shutil.rmtree(folder, ignore_errors=True)


def _run_entry(scenario: Scenario, tree: Tree, argv: Sequence[str], instrumentation: Instrumentation) -> None:
    """Run the scenario's script, module or function."""
    bind = _MainBinder(instrumentation)
    if scenario.script:
        script = (tree.root / scenario.script).resolve()
        if not script.is_file():
            raise NotApplicable(f"{scenario.script} does not exist in this tree")
        run_main(script, argv, bind)
    elif scenario.module:
        run_main(module_path(scenario.module), argv, bind, module_name=scenario.module)
    else:
        entry: Any = scenario.call
        if isinstance(entry, str):
            owner, attribute, _ = _resolve(entry, None)
            entry = getattr(owner, attribute)
        if _takes_tree(entry):
            entry(tree)
        else:
            entry()


def _run_in_this_process(scenario: Scenario, tree: Tree, argv: Sequence[str], instrumentation: Instrumentation) -> None:
    """`_run_entry`, and a child the loop forked (`os.fork`) that comes back out of it through Python ended where its
    process would end without tripwire (`_end_forked_child`)."""
    pid = os.getpid()
    try:
        _run_entry(scenario, tree, argv, instrumentation)
    except BaseException as error:
        if os.getpid() != pid:
            _end_forked_child(error)
        raise
    if os.getpid() != pid:
        _end_forked_child(None)


def _end_forked_child(error: BaseException | None) -> NoReturn:
    """End a forked child of the loop that left it by returning, raising or `sys.exit`, as Python would end its process
    there: the error printed, the exit functions run (the vendor-op watch's hand-back among them), the streams flushed,
    the exit code Python would give. Run on, it would go through the recording's own bookkeeping in the child: write a
    result over the parent's and remove the parent's scratch working folder while the parent still runs in it. (A
    child's `os._exit` already ends it at once: `_exit_caught`.)"""
    code = 0
    if isinstance(error, SystemExit):
        if isinstance(error.code, int):
            code = error.code
        elif error.code is not None:
            print(error.code, file=sys.stderr)
            code = 1
    elif error is not None:
        traceback.print_exception(error)
        code = 1
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        _REAL_EXIT(code)


_REAL_EXIT = os._exit  # taken at import: `_exit_caught` stands in for it while a loop runs


def _takes_tree(entry: Any) -> bool:
    """Whether a scenario's function asks for the `Tree` (a parameter named `tree`)."""
    try:
        return "tree" in inspect.signature(entry).parameters
    except (TypeError, ValueError):
        return False


class _MainBinder:
    """Binds the instrumentation's `__main__` targets in a script's namespace (called after each statement)."""

    def __init__(self, instrumentation: Instrumentation) -> None:
        self._instrumentation = instrumentation

    def __call__(self, namespace: dict[str, Any]) -> None:
        self._instrumentation.bind_namespace("__main__", namespace)


def record(
    scenario: Scenario,
    root: str | Path,
    *,
    commit: str = "",
    workdir: Path | None = None,
    keep_values: bool | None = None,
    vendor_ops: bool = True,
) -> Result:
    """Run `scenario` on the tree at `root` in this process and return what it recorded (see the module docstring).
    `vendor_ops` (the default) also notes the CPU ops whose bits follow the CPU vendor (`tripwire.bitwise.vendor_ops`,
    on every thread, at no cost to the ops it does not list): a note names each with its line, since a golden of such
    a run verifies only on CPUs of the recording one's vendor."""
    tree = Tree(Path(root).resolve(), commit)
    source = {"root": str(tree.root), "commit": commit, "scenario_file": scenario.source}
    try:
        adapters = [adapter for adapter in scenario.adapters if adapter.applies(tree)]
    except NotApplicable as reason:
        return Result(scenario.name, "n/a", str(reason), capture_context(), source)
    options: dict[str, Any] = {}
    renames: dict[str, str] = {}
    argv: Sequence[str] = scenario.argv
    for adapter in adapters:
        options.update(adapter.options)
        renames.update(adapter.targets)
        argv = adapter.argv if adapter.argv is not None else argv
    tree = Tree(tree.root, commit, options)
    with _torch_settings(scenario):
        context = capture_context()
        keep = scenario.keep_values if keep_values is None else keep_values
        recorder = TrajectoryRecorder(context, keep_values=keep)
        counter = SyncCounter(root=tree.root)
        compiles = CompileCounter(root=tree.root)
        session = Session(counter, recorder, compiles=compiles)
        instrumentation = Instrumentation(scenario, session, renames)
        children = ChildWatch(tree.root)
        settings = SettingsWatch()
        census = VendorBoundOps(tree.root) if vendor_ops else None
        status, cause, trace, ended_by_exit, swallowed, passed = "ok", "", "", False, "", ""
        exits: list[tuple[int, str]] = []  # bound by `_exit_caught`, unless an instrument fails before it
        seeded: set[str] = set()  # bound by `seeds.seeding_watched`, unless an instrument fails before it
        draws: DrawThreads | None = None  # bound by `DrawThreads`, unless an instrument fails before it
        entropy = seeds.OsEntropy(functools.partial(loop_line, str(tree.root)))
        seeds_before, hashing = seeds.mark(), seeds.hash_seed()
        start = time.perf_counter()
        with _tree_on_path(tree.root, scenario.paths), _working_folder(scenario, tree.root, workdir) as folder:
            try:
                with (
                    _adapted(adapters),
                    instrumentation,
                    compiles,
                    counter,
                    children,
                    _exit_caught(tree.root) as exits,
                    settings,
                    _frozen_heap(),
                    seeds.seeding_watched() as seeded,
                    DrawThreads(functools.partial(caller_line, str(tree.root))) as draws,
                    entropy,
                    census if census is not None else contextlib.nullcontext(),
                ):
                    _run_in_this_process(scenario, tree, argv, instrumentation)
            except NotApplicable as reason:
                status, cause = "n/a", str(reason)
            except ScenarioError as error:
                status, cause = "error", str(error)
            except SystemExit as exit_:
                if exit_.code not in (0, None):
                    status, cause, trace = "crash", f"SystemExit({exit_.code!r})", traceback.format_exc()
            except _LoopExit as exit_:
                ended_by_exit = True
                if exit_.code != 0:
                    status, cause, trace = "crash", f"os._exit({exit_.code!r})", traceback.format_exc()
            except Exception as error:
                status, cause, trace, passed = _crash(error, tree.root)
            if exits and not ended_by_exit:  # the loop took its own os._exit's exit and ran on
                ended_by_exit = True
                code, where = exits[0]
                if status == "ok" and code != 0:
                    status, cause = "crash", f"os._exit({code!r})"
                swallowed = (
                    f"the loop called os._exit({code!r}) at {where}, caught the exit (an `except BaseException` around "
                    "it) and ran on: a real run ends there, but what ran after it was recorded too"
                )
            if status == "ok":  # also after a script's sys.exit(0)
                status, cause = _instruments_fired(instrumentation, children)
            seconds = time.perf_counter() - start
            changed = _changed_by_loop(context, capture_context())
            seeds_after = seeds.mark()
            try:
                events = list(session.events) + _event_files(scenario, folder)
            except TripwireError as error:  # the loop wrote a damaged events file: its failure, kept as a result
                events = list(session.events)
                if status == "ok":
                    status, cause = "crash", f"the loop's events file is damaged: {error}"
    # the loop's own libraries, as imported by the end of the run (the recorder's context stays as it was)
    context = {**context, "packages": imported_distributions()}
    if changed:  # the bits after the change depend on what the loop set: compared, and said
        context["changed_by_loop"] = changed
    result = Result(
        scenario.name, status, cause, context, source, seconds, traceback=trace, seed=seeds_after.torch_seed
    )
    result.ended_by_exit = ended_by_exit
    result.unseeded = seeds.unseeded(seeds_before, seeds_after, seeded)
    result.hash_seed = hashing
    result.cuda_used = torch.cuda.is_initialized()
    if draws is not None:
        result.draw_threads = [(str(name), int(count), str(first)) for name, count, first in draws.drawing()]
        if len(result.draw_threads) > 1:
            result.notes.append(_threads_note(result.draw_threads))
        if draws.faults:
            result.notes.append(
                _watch_fault(
                    "watch of the draws from torch's generator failed:",
                    draws.faults,
                    "the draws ran as the loop made them",
                )
            )
    result.notes.extend(seeds.notes(result.unseeded, seeds_after))
    if entropy.watched:
        # kept, not noted: gymnasium makes such generators for every space it batches, mostly never drawn from;
        # `compare` names them where two runs of one tree differ
        result.entropy = entropy.made()
        if entropy.faults:
            result.notes.append(
                _watch_fault(
                    "watch of NumPy's generators made from OS entropy failed:",
                    entropy.faults,
                    "the generators were made as the loop asked",
                )
            )
    if swallowed:
        result.notes.append(swallowed)
    if census is not None and census.calls:
        result.notes.append(vendor_ops_note(census.lines(), census.unfinished))
    if census is not None and census.faults:
        result.notes.append(
            _watch_fault("vendor-ops watch failed to note", census.faults, "the ops ran as the loop called them")
        )
    if settings.changes:  # each with its line: a CPU no-op such as cudnn.benchmark still breaks a GPU run
        result.notes.append("the loop changed determinism settings: " + settings.format())
    if passed:
        result.notes.append(
            f"the failing call went through tripwire's stand-in at {passed}: if the loop runs without tripwire, the "
            "stand-in is at fault (report it)"
        )
    if changed:
        result.notes.append(
            "the loop changed "
            + ", ".join(f"{key} {before!r} -> {after!r}" for key, (before, after) in changed.items())
            + " while it ran: the context holds the settings it started with, and `changed_by_loop` what it set"
        )
    result.syncs = _summary(counter, [region.name for region in scenario.regions])
    edited = stale_note(counter.stale_sources)
    if edited:
        result.notes.append(edited)
    result.compile = _summary(compiles, [region.name for region in scenario.regions])
    result.notes.extend(compiles.notes)
    result.notes.extend(session.notes)
    for checkpoint in scenario.checkpoints:
        unused = [pattern for pattern in checkpoint.exclude if pattern not in recorder.excluded_by]
        if unused and status == "ok":
            result.notes.append(
                f"checkpoint on {checkpoint.target}: exclude {', '.join(map(repr, unused))} left out no leaf: check "
                "the name (a leaf is named as `compare` names it: return.NAME, self.NAME.FIELD)"
            )
    result.children = children.counts()
    unseen = children.note()
    if unseen:
        result.notes.append(unseen)
    result.calls = instrumentation.calls()
    result.trajectory, result.values = recorder.trajectory, (recorder.values if keep else None)
    if recorder.values_truncated_at:
        result.notes.append(f"values kept up to checkpoint {recorder.values_truncated_at!r} (size limit)")
    if events or scenario.events or scenario.event_calls:
        result.telemetry = reduce_events(events, round_end=scenario.round_end or None).to_snapshot()
        exclude = tuple(scenario.exclude)
        result.payloads = payload_trajectory(events, context, exclude=exclude)
        result.payload_values = payload_values(events, exclude=exclude) if keep else None
        wall_clock = [pattern for pattern in exclude if pattern not in DEFAULT_EXCLUDED]
        if wall_clock and seconds > 0:  # the fields left out as wall-clock: their units, against the run's seconds
            found = clock_fields(events, seconds, wall_clock)
            result.clock = clock_golden(found, seconds) if found else None
            result.notes.extend(outlasting(found, seconds))
        unmatched = unmatched_patterns(events, wall_clock)
        if unmatched:  # one note for them all: a scenario written for many commits can carry several
            result.notes.append(
                f"exclude pattern{'s' if len(unmatched) > 1 else ''} {', '.join(map(repr, unmatched))} left out no "
                "field of any event: check the label and the field name (a field is named by the call's own "
                "argument, data.NAME)"
            )
    return result


def warm() -> None:
    """Import and compute, once, what every `record` imports and computes whatever the tree: a history fork server
    calls it before it forks a child per commit, so no child pays for it again. That is the sync hooks, the map of
    installed distributions a result names (about 0.5 s), torch's serialization config and the schemas of the ops an
    implicit sync can come from (0.04 s; a child reads only those its tree registers), torch's tables of its own
    functions (`tripwire.sync.explicit.build_torch_tables`), and NumPy's random package with the test of whether its
    entropy can be watched (`tripwire.outside.seeds.numpy_entropy`). Nothing of a tree is imported and no setting
    changes: a child does exactly what it would do without it, sooner."""
    import torch.utils.serialization.config  # noqa: F401 - imported when a result's values are saved

    from tripwire.common.context import _owners
    from tripwire.outside.seeds import numpy_entropy
    from tripwire.sync import hooks  # noqa: F401 - imported when the counter starts
    from tripwire.sync.explicit import build_torch_tables
    from tripwire.sync.implicit import read_op_schemas

    _owners()
    read_op_schemas()
    build_torch_tables()
    numpy_entropy()


def _crash(error: Exception, root: Path) -> tuple[str, str, str, str]:
    """`(status, cause, traceback, stand-in passed)` of an exception the run raised: the loop's (`crash`), or
    tripwire's own (`fault`, naming tripwire's frame: the loop may be fine; `tripwire.outside.blame`)."""
    whose = blame(error)
    trace = traceback.format_exc()
    if whose.whose == "tripwire":
        cause = (
            f"tripwire failed inside {whose.frame}: {one_line(error)}; the loop may be fine: run it without tripwire "
            "to check, and report this with the result's traceback.txt"
        )
        return "fault", cause, trace, ""
    return "crash", one_line(error, root), trace, whose.frame if whose.whose == "through" else ""


def _changed_by_loop(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    """The determinism settings the loop itself changed while it ran (`torch.set_num_threads(os.cpu_count())`,
    `torch.use_deterministic_algorithms`, the matmul precision): `{setting: [at the start, at the end]}`. A loop that
    sets its thread count from the machine computes other bits on another machine while the start context reads
    the same; recorded, two such results compare with the difference named."""
    return {key: [before[key], after[key]] for key in before if key in after and before[key] != after[key]}


def _watch_fault(failed: str, faults: Sequence[str], ran: str) -> str:
    """The note of a watch's own faults (three at most), said as tripwire's and never the loop's."""
    shown = "; ".join(sorted(set(faults))[:3])
    return f"tripwire's fault, not the loop's: its {failed} {shown} ({ran}; report this to tripwire)"


def _threads_note(threads: Sequence[tuple[str, int, str]]) -> str:
    """What drawing from torch's default generator on several threads does to a seeded run, naming each thread."""
    shown = ", ".join(f"{name!r} {count:,} (first at {first})" for name, count, first in threads[:4])
    more = f" and {len(threads) - 4} more" if len(threads) > 4 else ""
    return (
        f"the loop drew from torch's default generator on {len(threads)} threads: {shown}{more}; one generator serves "
        "them all in the order the OS runs them, so unless the loop orders their draws a seeded run draws other "
        "numbers each time and `compare` finds the trajectories different: draw on one thread, or give each other "
        "thread a `torch.Generator` of its own"
    )


def _instruments_fired(instrumentation: Instrumentation, children: ChildWatch) -> tuple[str, str]:
    """`("ok", "")`, or an `error` naming the targets never bound or bound and never called (and, for those, the
    child processes the loop started, where a target may have run unseen)."""
    unbound = instrumentation.unbound()
    if unbound:
        return "error", f"never bound: {', '.join(unbound)} (the tree defines no such target)"
    silent = instrumentation.never_fired()
    if silent and children.total():
        silent += (
            f"; the loop started {children.total()} child process(es) ({children.describe()}) and a recording sees "
            "its own process only: record the code a child runs by pointing the scenario at a function this process "
            "calls, or run the child's work in-process for the scenario (an argv or adapter option)"
        )
    return ("error", silent) if silent else ("ok", "")


# What the interpreter keeps frozen by itself, read when this module is imported: nothing before Python 3.12; 3.12
# starts with a few hundred objects of its own frozen (375 on 3.12.1), 3.13 with none again. More than that is a
# caller's own freeze (`_frozen_heap`). A caller that froze its heap before importing tripwire is taken for the
# interpreter: a recording then thaws that freeze with the rest when it ends.
_FROZEN_BY_INTERPRETER = gc.get_freeze_count()


@contextlib.contextmanager
def _frozen_heap() -> Iterator[None]:
    """The objects that exist before the loop starts (torch's, tripwire's, the launcher's) left out of the garbage
    collector's full passes while it runs (`gc.freeze`), and put back after. A full pass walks every tracked object:
    with torch imported that is about 150 ms, and the few thousand objects a recording adds (tripwire's modules,
    its events and kept values) are enough to bring one into the loop that the plain run does not have (CleanRL's
    `ppo.py`: one more full pass; docs/measurements.md, "The cost of recording"). The loop's own objects are collected
    as always. An object from before that becomes cyclic garbage during the run (one a caller of `record` made and
    the entry drops) is collected after it instead; a plain run of a script has none of those but torch's own.

    A heap already frozen beyond what the interpreter freezes by itself is a caller's own freeze, theirs to undo: it
    is left as it is. (On Python 3.12, whose interpreter starts with some objects frozen, the test was `no object
    frozen`, so the heap was never frozen there.) Thawing takes every frozen object back, the interpreter's own
    among them: on 3.12 its few hundred are then tracked again, as a caller's `gc.unfreeze()` would leave them.
    """
    frozen = gc.get_freeze_count() <= _FROZEN_BY_INTERPRETER
    if frozen:
        gc.freeze()
    try:
        yield
    finally:
        if frozen:
            gc.unfreeze()


class _LoopExit(BaseException):
    """The loop called `os._exit(code)` (a `BaseException`, so the loop's `except Exception` does not take it)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@contextlib.contextmanager
def _exit_caught(root: Path) -> Iterator[list[tuple[int, str]]]:
    """`os._exit` called by the loop on the recording's own thread ends the loop, not the process: the process would
    end with nothing written, and `run` would exit 0 with no result and no budget checked. A forked child's
    `os._exit` (multiprocessing's, a loop's own fork) still ends the child at once. One on another thread of the loop's
    process ends it too, since that thread cannot stop the recording's: with a line saying so, and never with code 0
    (the recording is unfinished and no result is written; `run --budget` must not pass on it). Yields each exit's
    code and call site, so a loop that catches the exit and runs on is said to have done so."""
    pid, thread, original = os.getpid(), threading.get_ident(), os._exit
    exits: list[tuple[int, str]] = []
    folder = str(root.resolve())

    def exit_(status: int) -> NoReturn:
        if os.getpid() == pid:
            where = tree_site(sys._getframe(1), folder) or "a line outside the tree"
            if threading.get_ident() == thread:
                exits.append((status, where))
                raise _LoopExit(status)
            name = threading.current_thread().name
            os.write(
                2,
                f"tripwire: error: the loop called os._exit({status!r}) on its thread {name!r} at {where}, which ends "
                "the process before the recording finished: no result was written\n".encode(),
            )
            original(status or 1)
        original(status)

    os._exit = exit_
    try:
        yield exits
    finally:
        os._exit = original


def vendor_ops_note(lines: Sequence[str], unfinished: int = 0) -> str:
    """The note of a recording whose loop called ops whose CPU bits follow the vendor: each `VendorBoundOps` line,
    and how many child processes are counted at their first such call only (they had not handed back)."""
    partial = (
        f"; {unfinished} child process(es) had not handed their counts back when the recording ended (still running, "
        "killed, or ended through os._exit): each is counted at its first call only"
        if unfinished
        else ""
    )
    return (
        "CPU ops whose bits follow the CPU's vendor even under the pin (MKL's vector math refines the CPU's "
        "approximate rsqrtps/rcpps), so a golden of this run verifies only on CPUs of this one's vendor: "
        + "; ".join(lines)
        + partial
        + " (write x * torch.rsqrt(v) for x / torch.sqrt(v), and torch.optim.Adam(..., fused=True) for Adam's step "
        "on CPU)"
    )


@contextlib.contextmanager
def _torch_settings(scenario: Scenario) -> Iterator[None]:
    """The scenario's thread count and determinism flag for the run; the caller's afterwards, with every other
    determinism setting the loop changed (`tripwire.bitwise.settings.restore_settings`)."""
    settings = determinism_settings()
    torch.set_num_threads(scenario.threads)
    _deterministic(scenario.deterministic)
    try:
        yield
    finally:
        restore_settings(settings)


def _deterministic(mode: bool) -> None:
    """`torch.use_deterministic_algorithms(mode)` where it changes something: the call imports inductor's config to set
    its flag too (dynamo, sympy: about 1.7 s, a third of a short recording), which a plain run never pays."""
    if torch.are_deterministic_algorithms_enabled() != mode or torch.is_deterministic_algorithms_warn_only_enabled():
        torch.use_deterministic_algorithms(mode)


def _event_files(scenario: Scenario, folder: Path) -> list[dict[str, Any]]:
    if not scenario.events:
        return []
    events: list[dict[str, Any]] = []
    for path in sorted(folder.glob(scenario.events)):
        events.extend(load_events(path))
    return events


def _summary(counter: EventLog, declared: Sequence[str]) -> SyncSummary:
    setup, iterations, tail = counter.segments()
    return SyncSummary(
        group_records(counter.events),
        [_region_counts(part) for part in iterations],
        _region_counts(setup),
        _region_counts(tail),
        sorted(set(declared)),
    )


def _region_counts(events: Sequence[Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for event in events:
        counts[event.region] = counts.get(event.region, 0) + 1
    return dict(sorted(counts.items()))
