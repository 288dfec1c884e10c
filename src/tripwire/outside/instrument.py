"""Instruments placed from outside: regions, iteration boundaries, checkpoints and events on named callables.

`Instrumentation(scenario, session)` replaces each named function or method (`module:Qualified.name`) with a
stand-in that calls the original inside the scenario's hot-path region, marks iteration boundaries on the session's
`SyncCounter`, records trajectory checkpoints after the call and turns calls into telemetry events. Nothing is
edited on disk and everything is restored on exit, also when the run raised.

Targets in importable modules are bound on entry (so `from torch.nn.utils import clip_grad_norm_` in the loop gets
the stand-in); a function is bound under every name a loaded module holds it by, so `torch.serialization:save` is
also `torch.save`, and a function named where it is defined is also its package's re-export of it. Targets in
`__main__` (classes and functions a script defines) are bound as soon as the script has defined them: the script
runner (`tripwire.outside.launch`) calls `bind_namespace` after each top-level statement. A method is replaced on
the class named (an inherited one is shadowed there, then removed again); an instance's own attribute, or a
reference taken before binding (`step = opt.step` at import time), is not seen.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import random
import re
import sys
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from tripwire.bitwise.trajectory import TrajectoryRecorder
from tripwire.common.unhook import put_back
from tripwire.compile.counter import CompileCounter
from tripwire.outside.capture import left_out, no_value, not_excluded, object_state
from tripwire.outside.stand import StandInObject, sources_name_originals, stand_in, stands_as_object
from tripwire.scenario import Checkpoint, EventCall, Iteration, Scenario, ScenarioError, parse_target
from tripwire.sync import hot_path, ignore_syncs
from tripwire.sync.counter import SyncCounter
from tripwire.sync.dynamo import dynamo_skips_tripwire, outside_compile


@dataclass
class Session:
    """Where the instruments deliver: the sync counter, the trajectory recorder, the captured events and the
    compilation counter (iteration marks go to both counters)."""

    counter: SyncCounter
    recorder: TrajectoryRecorder
    events: list[dict[str, Any]] = field(default_factory=list)
    compiles: CompileCounter | None = None
    notes: dict[str, None] = field(default_factory=dict)  # what a capture left out, once each, in order

    def start_iteration(self) -> None:
        for log in (self.counter, self.compiles):
            if log is not None:
                log.start_iteration()

    def mark_iteration(self) -> None:
        for log in (self.counter, self.compiles):
            if log is not None:
                log.mark_iteration()


def rng_states() -> dict[str, Any]:
    """The global RNG states (torch CPU and CUDA, `random`, NumPy) as values a checkpoint digests."""
    states: dict[str, Any] = {"torch.cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for index, state in enumerate(torch.cuda.get_rng_state_all()):
            states[f"torch.cuda.{index}"] = state
    states["python.random"] = [repr(part) for part in random.getstate()]
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy is a dependency
        return states
    kind, keys, position, has_gauss, cached = numpy.random.get_state(legacy=True)
    states["numpy.random"] = {
        "keys": torch.from_numpy(numpy.array(keys, dtype=numpy.int64)),
        "rest": [kind, position, has_gauss, cached],
    }
    return states


def jsonable(value: Any) -> Any:
    """A JSON value for an event payload: tensors and arrays as lists, an object by its repr, or by its fields
    (`object_state`) where its repr shows its address."""
    if isinstance(value, (str, bool, int, float)) or value is None:
        return value
    if isinstance(value, torch.Tensor):
        with ignore_syncs():
            return value.detach().cpu().tolist()
    if callable(getattr(type(value), "tolist", None)):  # numpy arrays and scalars (on the class: no `__getattr__` runs)
        return value.tolist()
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    text = repr(value)
    if _ADDRESS.search(text):  # `<Stats object at 0x7f...>`: the address differs each run, what it holds does not
        return jsonable(object_state(value))
    return text


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _attribute(checkpoint: Checkpoint, spec: str, value: Any, names: Sequence[str]) -> Any:
    """`value.a.b...` for a capture's attribute path; a missing attribute is an error naming it."""
    for name in names:
        if not hasattr(value, name):
            fields = sorted(key for key in getattr(value, "__dict__", {}) if not key.startswith("__"))[:8]
            raise ScenarioError(
                f"checkpoint on {checkpoint.target}: capture {spec!r}: {type(value).__name__} has no attribute "
                f"{name!r}" + (f" (it has {', '.join(fields)})" if fields else "")
            )
        value = getattr(value, name)
    return value


@dataclass
class TargetHooks:
    """Everything placed on one target, and how often it was called."""

    label: str  # `Agent.get_value`: names checkpoints
    session: Session
    declared: list[str] = field(default_factory=list)  # the scenario's names for this target (before renames)
    region: hot_path | None = None
    iteration: Iteration | None = None
    checkpoints: list[Checkpoint] = field(default_factory=list)
    event_calls: list[EventCall] = field(default_factory=list)
    calls: int = 0
    signature: inspect.Signature | None = None
    names: tuple[str, ...] | None = None  # the signature's parameters, when all are plain (`_bind`)
    required: int = 0  # how many of them come first with no default

    def roles(self) -> list[str]:
        """What the scenario placed here: `region 'rollout'`, `iteration`, `checkpoint 'X'`, `event`."""
        roles = [f"region {self.region.name!r}"] if self.region is not None else []
        roles += ["iteration"] if self.iteration is not None else []
        roles += [f"checkpoint {checkpoint.name or self.label!r}" for checkpoint in self.checkpoints]
        roles += ["event"] if self.event_calls else []
        return roles

    def call(self, original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self.calls += 1
        number = self.calls
        iteration = self.iteration
        if iteration is not None and iteration.at == "start" and (number - 1) % iteration.every == 0:
            with outside_compile():
                self.session.start_iteration()
        if self.region is not None:
            with self.region:
                result = original(*args, **kwargs)  # pass-through
            result = body_in_region(original, result, self.region)
        else:
            result = original(*args, **kwargs)  # pass-through
        if self.checkpoints or self.event_calls or (iteration is not None and iteration.at == "end"):
            with outside_compile():  # a compiled call returned here: nothing of the probe's is compiled
                self._after(original, args, kwargs, result, number)
        return result

    def _after(self, original: Any, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any, number: int) -> None:
        """The checkpoints, events and iteration end of one call, after it returned."""
        for checkpoint in self.checkpoints:
            if (number - 1) % checkpoint.every == 0:
                name = f"{checkpoint.name or self.label}#{number}"
                with ignore_syncs():  # the probe's own reads (state_dict, RNG states): not the loop's syncs
                    captured = self._capture(checkpoint, original, args, kwargs, result)
                self.session.recorder.record(name, captured, checkpoint.exclude)
        for event in self.event_calls:
            self.session.events.append(self._event(event, original, args, kwargs))
        iteration = self.iteration
        if iteration is not None and iteration.at == "end" and number % iteration.every == 0:
            self.session.mark_iteration()

    def _bind(self, original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments by name, in the signature's order (`Signature.bind`'s `arguments`). A signature of
        plain parameters (no `*args`, `**kwargs`, positional- or keyword-only ones) is bound by position and name
        directly, 7 us less than `bind` on every event of a logging call; else by `bind`, and by position when the
        call does not fit it."""
        if self.signature is None:
            self.signature = inspect.signature(original)
            parameters = self.signature.parameters.values()
            if all(parameter.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for parameter in parameters):
                self.names = tuple(parameter.name for parameter in parameters)
                self.required = sum(parameter.default is inspect.Parameter.empty for parameter in parameters)
        names = self.names
        if names is not None and len(args) <= len(names):
            later = names[len(args) :]
            missing = names[len(args) : self.required]
            if all(name in later for name in kwargs) and all(name in kwargs for name in missing):
                bound = dict(zip(names, args))
                bound.update((name, kwargs[name]) for name in later if name in kwargs)
                return bound
        try:
            return dict(self.signature.bind(*args, **kwargs).arguments)
        except TypeError:
            return {f"arg{index}": value for index, value in enumerate(args)} | kwargs

    def _capture(
        self, checkpoint: Checkpoint, original: Any, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any
    ) -> dict[str, Any]:
        captured: dict[str, Any] = {}
        name = checkpoint.name or self.label
        for spec in checkpoint.capture:
            skipped: list[str] = []
            if spec == "return":
                captured["return"] = object_state(result, skipped)
            elif spec == "rng":
                captured["rng"] = rng_states()
                continue
            elif spec == "args":
                captured["args"] = [object_state(arg, skipped) for arg in args]
            elif spec.startswith("arg:"):
                captured[spec] = object_state(self._argument(checkpoint, spec, original, args, kwargs), skipped)
            elif spec == "self" or spec.startswith("self."):
                if not args:
                    raise ScenarioError(f"checkpoint on {checkpoint.target}: capture {spec!r} needs a method")
                captured[spec] = object_state(_attribute(checkpoint, spec, args[0], spec.split(".")[1:]), skipped)
            else:
                raise ScenarioError(
                    f"checkpoint on {checkpoint.target}: unknown capture {spec!r} "
                    "(use return, self, self.attr, args, arg:NAME, arg:NAME.attr or rng)"
                )
            empty = no_value(captured[spec], skipped)
            if empty:
                raise ScenarioError(
                    f"checkpoint {name} capture {spec!r} digests no value: {empty}; two runs would compare identical "
                    "whatever the loop computed: capture the field that holds the data by name (`self.NAME.FIELD`, "
                    "`arg:NAME.FIELD`)"
                )
            skipped = not_excluded(spec, skipped, checkpoint.exclude)
            if skipped:
                note = (
                    f"checkpoint {name} capture {spec!r} left out {left_out(skipped)} (capture one by name, "
                    "`self.NAME`, to digest what it holds)"
                )
                self.session.notes.setdefault(note)
        return captured

    def _argument(
        self, checkpoint: Checkpoint, spec: str, original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """The value `arg:NAME` or `arg:NAME.attr...` names in this call; a name that binds nothing is an error."""
        name, *attributes = spec[4:].split(".")
        bound = self._bind(original, args, kwargs)
        if name not in bound:
            names = ", ".join(key for key in bound if key != "self") or "none"
            raise ScenarioError(
                f"checkpoint on {checkpoint.target}: capture {spec!r} binds nothing: the call's arguments are "
                f"{names}: capture one of those"
            )
        return _attribute(checkpoint, spec, bound[name], attributes)

    def _event(self, event: EventCall, original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        arguments = self._bind(original, args, kwargs)
        arguments.pop("self", None)
        label = arguments.pop(event.label) if event.label in arguments else event.label
        data = {name: jsonable(value) for name, value in arguments.items() if not event.fields or name in event.fields}
        return {"event_type": str(label), "data": data}


def body_in_region(target: Any, result: Any, region: hot_path) -> Any:
    """The generator or coroutine a region's generator function (or `async def`) returned, with the region entered
    each time its body runs.

    Calling a generator function runs none of its body: the body runs later, step by step, as the caller iterates
    or awaits it, by then outside the call and so outside the region. Left so, a region placed on
    `def batches(): ... yield` counted 0 syncs while every step synced, all of them under `<outside>`. A plain
    function that returns a generator written inside it (`return (f(b) for b in batches)`, a nested generator
    function) is its body too; one made elsewhere is left as it is (what runs in that one is not its body). An async
    generator's steps are awaitables of their own, and each of those is driven the same way: the region is entered
    while its body runs, never while it waits (other tasks run then)."""
    # isinstance first: no Python frame is entered for the common result (a Python call here is a frame dynamo
    # looks at when the target runs between a compiled loop's graphs)
    if isinstance(result, types.GeneratorType):
        if inspect.isgeneratorfunction(function := inspect.unwrap(target)) or _written_inside(result, function):
            return _steps_in(region, result)
    elif isinstance(result, types.CoroutineType) and inspect.iscoroutinefunction(inspect.unwrap(target)):
        return _awaited_in(region, result)
    elif isinstance(result, types.AsyncGeneratorType) and inspect.isasyncgenfunction(inspect.unwrap(target)):
        return _async_steps_in(region, result)
    return result


def _written_inside(generator: types.GeneratorType[Any, Any, Any], function: Any) -> bool:
    """Whether `generator`'s code is written inside `function`'s (a generator expression, a nested generator)."""
    code = getattr(function, "__code__", None)
    return code is not None and generator.gi_code in code.co_consts


def _steps_in(region: hot_path, steps: Any) -> Any:
    """Drive a generator (or a coroutine's `__await__` iterator) one step at a time, each step inside `region`;
    what the consumer sends or throws goes through, and closing closes the inner one (its `finally` in the region)."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            with region:
                item = steps.send(value) if error is None else steps.throw(error)
        except StopIteration as stop:
            return stop.value
        value, error = None, None
        try:
            value = yield item
        except GeneratorExit:
            with region:
                steps.close()
            raise
        except BaseException as raised:  # thrown in by the consumer: into the inner generator, as without the region
            error = raised


class _Awaited:
    def __init__(self, region: hot_path, coroutine: Any) -> None:
        self.region, self.coroutine = region, coroutine

    def __await__(self) -> Any:
        return _steps_in(self.region, self.coroutine.__await__())


async def _awaited_in(region: hot_path, coroutine: Any) -> Any:
    """A real coroutine (`asyncio.run` accepts nothing else) whose inner coroutine's every step runs in `region`."""
    return await _Awaited(region, coroutine)


async def _async_steps_in(region: hot_path, steps: Any) -> Any:
    """A real async generator relaying an inner one, `_steps_in`'s way: each of the inner one's `asend`, `athrow`
    and `aclose` awaitables is driven one step at a time in `region`."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            item = await _Awaited(region, steps.asend(value) if error is None else steps.athrow(error))
        except StopAsyncIteration:
            return
        value, error = None, None
        try:
            value = yield item
        except GeneratorExit:
            await _Awaited(region, steps.aclose())
            raise
        except BaseException as raised:  # thrown in by the consumer: into the inner generator, as without the region
            error = raised


@dataclass
class _Patch:
    owner: Any
    attribute: str
    had_own: bool
    original: Any
    ours: Any  # the stand-in put there: restored only while it is still there


def _resolve(spec: str, namespace: Mapping[str, Any] | None) -> tuple[Any, str, Any]:
    """`(owner, attribute, raw value)` of a target: the class or module holding it (None for a top-level name of a
    script's namespace), and what it holds there. A name the namespace does not define yet raises `LookupError`."""
    module_name, qualname = parse_target(spec)
    parts = qualname.split(".")
    if namespace is not None:
        if parts[0] not in namespace:
            raise LookupError(parts[0])
        if len(parts) == 1:
            return None, parts[0], namespace[parts[0]]
        start: Any = namespace[parts[0]]
        holder_parts = parts[1:-1]
    else:
        try:
            start = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name is None or not (module_name == error.name or module_name.startswith(error.name + ".")):
                raise  # the module exists but imports something missing: the tree (or its environment) is broken
            raise ScenarioError(f"target {spec}: this tree has no module {error.name!r}") from None
        holder_parts = parts[:-1]
    try:
        owner = functools.reduce(getattr, holder_parts, start)
        raw = inspect.getattr_static(owner, parts[-1])
    except AttributeError:
        raise ScenarioError(f"target {spec}: {module_name} has no {qualname}") from None
    return owner, parts[-1], raw


_FUNCTIONS = (types.FunctionType, types.BuiltinFunctionType)


def _aliases(function: Any, home: types.ModuleType) -> list[tuple[dict[str, Any], str]]:
    """Every other loaded module's name for `function` (`torch.save` for `torch.serialization.save`, a package's
    re-export of its submodule's function, a module's `from x import f`), as (namespace, name); tripwire's own
    modules are left alone, so its bookkeeping never meets an instrument."""
    found: list[tuple[dict[str, Any], str]] = []
    for module in list(sys.modules.values()):
        if module is home or not isinstance(module, types.ModuleType):
            continue
        name = getattr(module, "__name__", None)
        if not isinstance(name, str) or name == "tripwire" or name.startswith("tripwire."):
            continue
        namespace = vars(module)
        found.extend((namespace, key) for key, value in list(namespace.items()) if value is function)
    return found


class Instrumentation:
    """Places a scenario's instruments on their targets for the duration of a `with` block (see the module doc).

    `renames` maps a target named in the scenario to the one this tree has (`Adapter.targets`).
    """

    def __init__(self, scenario: Scenario, session: Session, renames: Mapping[str, str] | None = None) -> None:
        self.session = session
        self.hooks: dict[str, TargetHooks] = {}
        self._patches: list[_Patch] = []
        self.bound: set[str] = set()
        self._skipping: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        renames = dict(renames or {})
        for region in scenario.regions:
            self._hooks_for(region.target, renames).region = hot_path(region.name)
        if scenario.iteration is not None:
            self._hooks_for(scenario.iteration.target, renames).iteration = scenario.iteration
        for checkpoint in scenario.checkpoints:
            self._hooks_for(checkpoint.target, renames).checkpoints.append(checkpoint)
        for event in scenario.event_calls:
            self._hooks_for(event.target, renames).event_calls.append(event)

    def _hooks_for(self, declared: str, renames: Mapping[str, str]) -> TargetHooks:
        """The hooks of the target this tree has for `declared`; checkpoints keep the declared name's label, so a
        target an adapter renamed records the same checkpoint names as before."""
        target = renames.get(declared, declared)
        if target not in self.hooks:
            label = ".".join(parse_target(declared)[1].split(".")[-2:])
            self.hooks[target] = TargetHooks(label, self.session)
        if declared not in self.hooks[target].declared:
            self.hooks[target].declared.append(declared)
        return self.hooks[target]

    def __enter__(self) -> Instrumentation:
        self._skipping = dynamo_skips_tripwire()
        self._skipping.__enter__()
        try:
            sources = torch._sources  # TorchScript's source reader: to name the original's file for a stand-in
            own = sources.get_source_lines_and_file
            self._patches.append(_Patch(sources, "get_source_lines_and_file", True, own, sources_name_originals(own)))
            sources.get_source_lines_and_file = self._patches[-1].ours
            for target in self.hooks:
                if parse_target(target)[0] != "__main__":
                    self._bind(target, None)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            self.restore()
        finally:
            self._skipping.__exit__(None, None, None)

    def bind_namespace(self, module_name: str, namespace: Mapping[str, Any]) -> None:
        """Bind the pending targets of `module_name` (`__main__`) that `namespace` now defines."""
        for target in self.hooks:
            if target not in self.bound and parse_target(target)[0] == module_name:
                try:
                    self._bind(target, namespace)
                except LookupError:
                    continue  # not defined yet: the next statement may define it

    def _bind(self, target: str, namespace: Mapping[str, Any] | None) -> None:
        owner, attribute, raw = _resolve(target, namespace)
        if owner is None:  # a function defined at the top of a script: rebind the name in its namespace
            owner_map = namespace
            if not isinstance(owner_map, dict):
                raise ScenarioError(f"target {target}: cannot rebind a name in a read-only namespace")
            stand = self._stand_in(target, raw)
            self._patches.append(_Patch(owner_map, attribute, True, raw, stand))
            owner_map[attribute] = stand
            self.bound.add(target)
            return
        had_own = attribute in vars(owner) if isinstance(owner, type) else True
        stand = self._stand_in(target, raw)
        self._patches.append(_Patch(owner, attribute, had_own, raw, stand))
        setattr(owner, attribute, stand)
        if isinstance(owner, types.ModuleType) and isinstance(raw, _FUNCTIONS):
            for namespace, name in _aliases(raw, owner):
                self._patches.append(_Patch(namespace, name, True, raw, stand))
                namespace[name] = stand
        self.bound.add(target)

    def _stand_in(self, target: str, raw: Any) -> Any:
        hooks = self.hooks[target]
        if isinstance(raw, staticmethod):
            return staticmethod(stand_in(raw.__func__, hooks.call))
        if isinstance(raw, classmethod):
            return classmethod(stand_in(raw.__func__, hooks.call))
        if not callable(raw):
            raise ScenarioError(f"target {target}: {type(raw).__name__} is not a function or method")
        if isinstance(raw, type):
            raise ScenarioError(
                f"target {target}: a class cannot be stood in for (its instances pickle by its name, which would name "
                f"the stand-in): place the instrument on a method, {target}.__init__ for its construction"
            )
        if stands_as_object(raw):  # a custom op, a partial, a scripted function: the loop uses more than its calls
            return StandInObject(raw, hooks.call)
        return stand_in(raw, hooks.call)

    def restore(self) -> None:
        """Put every original back, newest first. A name the loop bound anew while it ran keeps the loop's object,
        with the stand-in it wrapped, if any, replaced by the original (torch's optimizer wraps `Adam.step` at the
        first `Adam()`: `tripwire.common.unhook`)."""
        while self._patches:
            patch = self._patches.pop()
            put_back(patch.owner, patch.attribute, patch.had_own, patch.original, patch.ours)

    def unbound(self) -> list[str]:
        """Targets never bound (a `__main__` name the script did not define)."""
        return [target for target in self.hooks if target not in self.bound]

    def calls(self) -> dict[str, int]:
        """How often each target was called, under the scenario's names (an adapter's rename keeps the name, so two
        trees' counts compare)."""
        return {declared: hooks.calls for hooks in self.hooks.values() for declared in hooks.declared}

    def never_fired(self) -> str:
        """One line naming the instruments whose target was never called ('' when every one fired): a target the
        tree renamed, stopped calling or only calls inside a compiled graph leaves the scenario blind, so the run
        fails rather than count everything as set-up."""
        silent = []
        for target, hooks in self.hooks.items():
            if hooks.calls == 0 and target in self.bound:
                declared = ", ".join(hooks.declared)
                name = declared if declared == target else f"{declared} (here {target})"
                silent.append(f"{name} [{', '.join(hooks.roles())}]")
        if not silent:
            return ""
        return (
            f"instrument never fired: {'; '.join(silent)} was never called (renamed, no longer called, or called only "
            "inside a compiled graph?): point the scenario at what this tree calls"
        )


__all__: Sequence[str] = ["Instrumentation", "Session", "TargetHooks", "object_state", "rng_states"]
