"""Scenario files: what to run, and where tripwire looks, declared from outside the code under test.

A scenario file is a small Python file that defines `scenario = Scenario(...)`. It names the loop to run (a script
run as `__main__`, a module run as `python -m`, or a function) and places tripwire's instruments on the loop's own
functions and methods by dotted path, `module:Qualified.name` (`__main__:Agent.get_value` for a class the script
itself defines):

    from tripwire.scenario import Checkpoint, Iteration, Region, Scenario

    scenario = Scenario(
        name="cleanrl-ppo",
        script="cleanrl/ppo.py",
        argv=["--total-timesteps", "2048", "--num-envs", "2", "--cuda", "False"],
        regions=[Region("__main__:Agent.get_action_and_value", "policy"), Region("torch.optim:Adam.step", "optim")],
        iteration=Iteration("__main__:Agent.get_value"),
        checkpoints=[Checkpoint("torch.optim:Adam.step", capture=("self",))],
    )

Nothing in the tree is edited: regions wrap the named callables while the scenario runs, an iteration boundary is
marked at each call of the iteration target, checkpoints digest the named state after each call, and event calls
turn calls (`SummaryWriter.add_scalar`) into telemetry events. `Adapter`s absorb API drift across a project's
history (moved modules, renamed targets, changed signatures, data stubs) for the commits where their condition
holds; they are applied at run time, never written into the tree. This module imports no torch.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from tripwire.common import closure
from tripwire.common.errors import TripwireError
from tripwire.common.git import check_ref, is_ancestor

__all__ = [
    "Adapter",
    "Checkpoint",
    "EventCall",
    "Iteration",
    "NotApplicable",
    "Region",
    "Scenario",
    "ScenarioError",
    "Tree",
    "load_scenario",
]


class ScenarioError(TripwireError):
    """A scenario file is missing, malformed or names a target that cannot be found; the message says which."""


class NotApplicable(Exception):  # a verdict, not an error: the scenario does not apply to this tree
    """Raised by a scenario (its entry or an adapter) when it does not apply to this tree; the message says why."""


def parse_target(spec: str) -> tuple[str, str]:
    """`("module", "Qualified.name")` from `"module:Qualified.name"`; a malformed spec raises `ScenarioError`."""
    module, sep, qualname = spec.partition(":")
    if not sep or not module or not qualname or any(not part.isidentifier() for part in qualname.split(".")):
        raise ScenarioError(
            f"target {spec!r} is not 'module:Qualified.name' (e.g. 'torch.optim:Adam.step', '__main__:Agent.get_value')"
        )
    return module, qualname


def _strings(value: Any) -> bool:
    """A list or tuple of strings (a bare string is not: it would be read a character at a time)."""
    return isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _require(owner: str, checks: Sequence[tuple[str, Any, bool, str]]) -> None:
    """Refuse, naming the field and what it must be, the first (name, value, holds, expected) that does not hold:
    a scenario file's mistake is one line at load time, not a traceback in the middle of a run."""
    for name, value, holds, expected in checks:
        if not holds:
            shown = repr(value) if len(repr(value)) <= 60 else f"a {type(value).__name__}"
            raise ScenarioError(f"{owner}: {name} must be {expected}, got {shown}")


@dataclass(frozen=True)
class Region:
    """A hot-path region around every call of `target`: its syncs count under `name` (`tripwire.sync.hot_path`)."""

    target: str
    name: str

    def __post_init__(self) -> None:
        _require(
            "Region",
            [
                ("target", self.target, isinstance(self.target, str), "'module:Qualified.name'"),
                ("name", self.name, isinstance(self.name, str) and bool(self.name), "a non-empty string"),
            ],
        )


@dataclass(frozen=True)
class Iteration:
    """An iteration boundary at calls of `target`: `at="start"` opens one as a call begins (what ran before the
    first call is setup), `at="end"` closes one as a call returns (what runs after the last is the tail). With
    `every=n`, every n-th call is a boundary."""

    target: str
    at: str = "start"
    every: int = 1

    def __post_init__(self) -> None:
        _require(
            "Iteration",
            [
                ("target", self.target, isinstance(self.target, str), "'module:Qualified.name'"),
                ("at", self.at, self.at in ("start", "end"), "'start' or 'end'"),
                ("every", self.every, _count(self.every), "a whole number of at least 1"),
            ],
        )


@dataclass(frozen=True)
class Checkpoint:
    """A trajectory checkpoint after each (`every`-th) call of `target`, named `<name>#<call number>`.

    `capture` names what to digest: `return` (the return value), `self` (the instance's state: a module's or
    optimizer's `state_dict`, an optimizer's parameters too), `self.attr.path`, `args` (every positional
    argument), `arg:NAME` (one argument by name), `arg:NAME.attr.path` and `rng` (the global torch, CUDA, `random` and
    NumPy RNG states). Other objects are descended into until their numbers are found (`tripwire.outside.capture`);
    a name that binds nothing, or a capture that digests no value, is an error. `exclude` leaves out the leaves it
    names, by their names in `compare` (`return.train_time`, `self.start_time`) or globs (`*.start_time`, a name
    above a leaf covering the leaves under it): a wall-clock field the loop keeps beside its numbers; a pattern that
    left out nothing is said in the result's notes.
    """

    target: str
    capture: tuple[str, ...] = ("return",)
    every: int = 1
    name: str = ""
    exclude: tuple[str, ...] = ()  # leaves not digested, by name as `compare` names them (globs: `return.*_time`)

    def __post_init__(self) -> None:
        _require(
            "Checkpoint",
            [
                ("target", self.target, isinstance(self.target, str), "'module:Qualified.name'"),
                ("capture", self.capture, _strings(self.capture) and bool(self.capture), "a non-empty list of names"),
                ("every", self.every, _count(self.every), "a whole number of at least 1"),
                ("name", self.name, isinstance(self.name, str), "a string"),
                ("exclude", self.exclude, _strings(self.exclude), "a list of leaf names"),
            ],
        )


@dataclass(frozen=True)
class EventCall:
    """A telemetry event per call of `target` (e.g. `SummaryWriter.add_scalar`): its type is the argument named
    `label` (`tag`), or the text itself when no argument has that name; its payload, the other arguments
    (or only `fields`)."""

    target: str
    label: str
    fields: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _require(
            "EventCall",
            [
                ("target", self.target, isinstance(self.target, str), "'module:Qualified.name'"),
                ("label", self.label, isinstance(self.label, str), "an argument name or a text"),
                ("fields", self.fields, _strings(self.fields), "a list of argument names"),
            ],
        )


@dataclass(frozen=True)
class Tree:
    """The source tree a scenario runs on: its root folder and, when it is a git checkout, its commit."""

    root: Path
    commit: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)  # from the adapters that apply (`Adapter.options`)

    def __getattribute__(self, name: str) -> Any:
        if name == "commit" and (recording := closure.active()) is not None:
            recording.open_because("it read its commit's sha (Tree.commit), which no other commit shares")
        return object.__getattribute__(self, name)

    def has(self, path: str) -> bool:
        """Whether `path` (relative to the root) exists in this tree."""
        found = (self.root / path).exists()
        recording = closure.active()
        if recording is not None and (name := recording.relative(self.root / path)) is not None:
            recording.exists.add(name)
        return found

    def read(self, path: str) -> str:
        return (self.root / path).read_text(encoding="utf-8")

    def is_ancestor(self, ref: str) -> bool:
        """Whether commit `ref` is this tree's commit or one of its ancestors (False outside git). A ref that git
        could read as an option (`--output=FILE`) is a ScenarioError, never passed to git."""
        check_ref(ref, "Tree.is_ancestor:", ScenarioError)
        with closure.quiet():  # the answer is recorded below, not the process that found it
            answer = is_ancestor(self.root, ref, "HEAD")
        recording = closure.active()
        if recording is not None:
            recording.ancestors[ref] = answer
        return answer

    def load_module(self, path: str, name: str | None = None) -> ModuleType:
        """Import a file of this tree by path (a test file with helpers, say) without putting its folder on the path."""
        file = self.root / path
        if not file.is_file():
            raise NotApplicable(f"{path} does not exist in this tree")
        module_name = name or f"tripwire_tree_{Path(path).stem}"
        spec = importlib.util.spec_from_file_location(module_name, file)
        if spec is None or spec.loader is None:
            raise ScenarioError(f"{file}: cannot be imported as a module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
        return module


@dataclass(frozen=True)
class Adapter:
    """API drift absorbed for the commits where `when(tree)` is true (all commits when `when` is None).

    - `aliases`: `{"name the scenario uses": "module the tree has"}` (a module that moved);
    - `targets`: `{"target the scenario names": "target in this tree"}` (a method that moved or was renamed);
    - `patches`: `{"module:attr": replacement}` set for the run (a data stub, a fake loader);
    - `wraps`: `{"module:attr": adapt}` replaced by `adapt(original)` for the run (a changed signature);
    - `argv`: the script's or module's arguments for these commits, in place of the scenario's;
    - `options`: values the entry function reads from `tree.options` (anything else that differs).
    """

    when: Callable[[Tree], bool] | None = None
    aliases: Mapping[str, str] = field(default_factory=dict)
    targets: Mapping[str, str] = field(default_factory=dict)
    patches: Mapping[str, Any] = field(default_factory=dict)
    wraps: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)
    argv: Sequence[str] | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""

    def __post_init__(self) -> None:
        def text_map(value: Any) -> bool:
            return isinstance(value, Mapping) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()
            )

        _require(
            "Adapter",
            [
                ("when", self.when, self.when is None or callable(self.when), "a function of the Tree, or None"),
                ("aliases", self.aliases, text_map(self.aliases), "a mapping of module names"),
                ("targets", self.targets, text_map(self.targets), "a mapping of targets"),
                ("patches", self.patches, isinstance(self.patches, Mapping), "a mapping of 'module:attr' to values"),
                ("wraps", self.wraps, isinstance(self.wraps, Mapping) and all(map(callable, self.wraps.values())),
                 "a mapping of 'module:attr' to functions"),
                ("argv", self.argv, self.argv is None or _strings(self.argv), "a list of strings, or None"),
                ("options", self.options, isinstance(self.options, Mapping), "a mapping"),
                ("note", self.note, isinstance(self.note, str), "a string"),
            ],
        )  # fmt: skip

    def applies(self, tree: Tree) -> bool:
        return self.when is None or bool(self.when(tree))


@dataclass(frozen=True)
class Scenario:
    """What to run and where to look (see the module docstring). Exactly one of `script`, `module`, `call`."""

    name: str
    script: str = ""  # a file, relative to the tree's root, run as __main__
    module: str = ""  # a module run as __main__, as `python -m` would
    # a function: `module:function` of the tree (called with no arguments), or one of the scenario file's own (given
    # the `Tree` when it has a parameter named `tree`)
    call: Callable[..., Any] | str | None = None
    argv: Sequence[str] = ()
    paths: Sequence[str] = (".",)  # import roots, relative to the tree's root, put first on sys.path
    regions: Sequence[Region] = ()
    iteration: Iteration | None = None
    checkpoints: Sequence[Checkpoint] = ()
    event_calls: Sequence[EventCall] = ()
    events: str = ""  # a glob, relative to the run's working folder, of the JSONL event files it writes
    round_end: str = ""  # the event label closing a round, for per-round counts
    exclude: Sequence[str] = (
        "event_id",
        "timestamp",
    )  # payload fields that differ run to run (`tripwire.telemetry.payloads`)
    adapters: Sequence[Adapter] = ()
    threads: int = 1
    deterministic: bool = False  # torch.use_deterministic_algorithms(True) for the run
    keep_values: bool = True
    cwd: str = "scratch"  # "scratch" (a fresh folder per run) or "root" (the tree's root)
    source: str = ""  # the scenario file, set by `load_scenario`

    def __post_init__(self) -> None:
        owner = f"scenario {self.name!r}" if isinstance(self.name, str) else "Scenario"
        parts = (
            ("regions", self.regions, Region),
            ("checkpoints", self.checkpoints, Checkpoint),
            ("event_calls", self.event_calls, EventCall),
            ("adapters", self.adapters, Adapter),
        )
        _require(
            owner,
            [
                ("name", self.name, isinstance(self.name, str) and bool(self.name), "a non-empty string"),
                ("script", self.script, isinstance(self.script, str), "a path (a string)"),
                ("module", self.module, isinstance(self.module, str), "a module name (a string)"),
                ("call", self.call, self.call is None or callable(self.call) or isinstance(self.call, str),
                 "a function or 'module:function'"),
                ("argv", self.argv, _strings(self.argv), "a list of strings"),
                ("paths", self.paths, _strings(self.paths), "a list of folders (strings)"),
                *((name, value, isinstance(value, (list, tuple)) and all(isinstance(v, kind) for v in value),
                   f"a list of {kind.__name__}") for name, value, kind in parts),
                ("iteration", self.iteration, self.iteration is None or isinstance(self.iteration, Iteration),
                 "an Iteration or None"),
                ("events", self.events, isinstance(self.events, str), "a glob (a string)"),
                ("round_end", self.round_end, isinstance(self.round_end, str), "an event label (a string)"),
                ("exclude", self.exclude, _strings(self.exclude), "a list of field names"),
                ("threads", self.threads, _count(self.threads), "a whole number of at least 1"),
                ("deterministic", self.deterministic, isinstance(self.deterministic, bool), "True or False"),
                ("keep_values", self.keep_values, isinstance(self.keep_values, bool), "True or False"),
                ("cwd", self.cwd, isinstance(self.cwd, str), "'scratch' or 'root'"),
            ],
        )  # fmt: skip
        entries = [entry for entry in (self.script, self.module, self.call) if entry]
        if len(entries) != 1:
            raise ScenarioError(f"scenario {self.name!r}: give exactly one of script=, module= or call=")
        if self.cwd not in ("scratch", "root"):
            raise ScenarioError(f"scenario {self.name!r}: cwd must be 'scratch' or 'root', not {self.cwd!r}")
        targets = [r.target for r in self.regions] + [c.target for c in self.checkpoints]
        targets += [e.target for e in self.event_calls] + ([self.iteration.target] if self.iteration else [])
        for target in targets:
            parse_target(target)
        if self.iteration is not None and self.iteration.at not in ("start", "end"):
            raise ScenarioError(f"scenario {self.name!r}: Iteration.at must be 'start' or 'end'")


def load_scenario(path: str | Path) -> Scenario:
    """Load `scenario` from a scenario file, without putting the file's folder on `sys.path` (a `random.py` beside
    it must never shadow the standard library)."""
    file = Path(path).resolve()
    if not file.is_file():
        raise ScenarioError(f"{path}: no such scenario file (write one defining `scenario = Scenario(...)`)")
    spec = importlib.util.spec_from_file_location(f"tripwire_scenario_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise ScenarioError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and pickling look the module up
    try:
        spec.loader.exec_module(module)
    except ScenarioError:
        raise
    except Exception as error:
        raise ScenarioError(f"{path}: the scenario file raised {type(error).__name__}: {error}") from None
    found = getattr(module, "scenario", None)
    if not isinstance(found, Scenario):
        raise ScenarioError(f"{path}: defines no `scenario = Scenario(...)`")
    return dataclasses.replace(found, source=str(file))
