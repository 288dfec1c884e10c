"""The watcher is invisible: a counter leaves torch as it found it (attributes, type slots, dispatcher kernels), and no
stand-in can be met by code that runs or is imported while one counts, as a table key, an `is` test or a dispatch
key. Each case was a real loop's crash under tripwire alone: skrl's scheduler (`torch.tensor` of 0-d tensors after a
recording) and tensordict's `torch.stack` handler (imported during one)."""

from __future__ import annotations

import builtins
import json
import pickle
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from types import FunctionType
from typing import ClassVar

import pytest
import torch
from torch.overrides import TorchFunctionMode

from tripwire.sync import explicit, hot_path
from tripwire.sync.counter import SyncCounter
from tripwire.sync.watched import TorchFunction

FINGERPRINT = """
import collections.abc, ctypes, importlib, importlib._bootstrap, json, sys, threading, concurrent.futures
import multiprocessing.pool
import torch

api = ctypes.pythonapi
api.PyType_GetSlot.restype = ctypes.c_void_p
api.PyType_GetSlot.argtypes = [ctypes.py_object, ctypes.c_int]


def slots(cls):
    found = {}
    for number in range(1, 83):
        try:
            found[number] = api.PyType_GetSlot(cls, number)
        except SystemError:
            pass
    return found


def owners():
    import torch.distributed.distributed_c10d as c10d
    return {
        "torch": torch, "torch.Tensor": torch.Tensor, "TensorBase": torch._C.TensorBase,
        "torch.autograd": torch.autograd,
        "torch.cuda": torch.cuda, "Stream": torch.cuda.Stream, "Event": torch.cuda.Event,
        "torch.distributed": torch.distributed, "c10d": c10d, "bootstrap": importlib._bootstrap,
        "threading": threading, "Thread": threading.Thread, "Executor": concurrent.futures.ThreadPoolExecutor,
        "ThreadPool": multiprocessing.pool.ThreadPool, "inference_mode": torch.autograd.grad_mode.inference_mode,
    }


def fingerprint():
    state = {f"{label}.{name}": id(value) for label, owner in owners().items() for name, value in vars(owner).items()}
    state["slots.Tensor"] = slots(torch.Tensor)
    state["slots.TensorBase"] = slots(torch._C.TensorBase)
    state["meta_path"] = [id(finder) for finder in sys.meta_path]
    for op in ("aten::nonzero", "aten::_local_scalar_dense", "aten::unique_consecutive"):
        state["dispatch." + op] = torch._C._dispatch_dump(op)
    state["behaviour"] = [
        torch.tensor([torch.tensor(0.5), torch.tensor(1.5)]).tolist(),
        isinstance(torch.ones(2), collections.abc.Sequence),
        torch.ones(3)[1:].sum().item(),
    ]
    return state


def work():
    from tripwire.sync.counter import SyncCounter
    with SyncCounter():
        rows = torch.tensor([1.0, 2.0, 3.0])
        rows[1:].to(torch.device("cpu"))
        (rows > 1).nonzero()
        float(rows.sum()), bool(rows[0]), rows.tolist(), rows.cpu().numpy()
        print(rows, file=open("/dev/null", "w"))
        threading.Thread(target=lambda: rows.sum().item()).start()


before = fingerprint()
work()
work()
after = fingerprint()
changed = sorted(key for key in before if key in after and before[key] != after[key])
# attributes that appeared (torch imports submodules lazily): none may be tripwire's
def _value(key):
    label, name = key.split(".", 1)
    return getattr(owners().get(label), name, "")


new = [key for key in after if key not in before and "tripwire" in repr(_value(key))]
print(json.dumps({"changed": changed, "after": after["behaviour"], "new": new}))
"""


def _fingerprint_run() -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", FINGERPRINT], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_process_that_recorded_twice_is_the_process_that_never_recorded() -> None:
    """Every attribute of what a counter patches, both type slots of torch's tensor, the data-dependent ops' kernels
    and the meta path: the same objects after two recordings as before them, and torch behaves the same."""
    result = _fingerprint_run()
    assert result["changed"] == []
    assert result["new"] == []
    assert result["after"] == [[0.5, 1.5], False, 2.0]


def test_the_fingerprint_sees_a_slot_left_behind() -> None:
    """The old place-keeping stand-in on `__getitem__`, put on and taken off: `torch.Tensor` keeps a sequence slot."""
    leaves_a_slot = "    torch.Tensor.__getitem__ = lambda self, i: 0\n    del torch.Tensor.__getitem__\n"
    script = FINGERPRINT.replace("def work():\n", "def work():\n" + leaves_a_slot)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert "len() of a 0-d tensor" in done.stderr  # torch.tensor([t0, t1]) in the second fingerprint


def test_zero_d_tensors_in_a_list_become_a_tensor_while_counting() -> None:
    """skrl's KL-adaptive scheduler: `torch.tensor([kl_a, kl_b])` of 0-d tensors, inside and after a recording."""
    with SyncCounter():
        inside = torch.tensor([torch.tensor(0.5), torch.tensor(1.5)])
    after = torch.tensor([torch.tensor(0.5), torch.tensor(1.5)])
    assert inside.tolist() == after.tolist() == [0.5, 1.5]


@pytest.mark.parametrize("name", explicit._WATCHED_METHODS)
def test_a_watched_method_taken_from_the_class_while_counting_is_torchs_own(name: str) -> None:
    own = getattr(torch.Tensor, name)
    with SyncCounter():
        taken = getattr(torch.Tensor, name)
        table = {taken: name}
    assert taken is own and table[getattr(torch.Tensor, name)] == name


LIBRARY = """
import torch

HANDLED = {}
NAMES = {NAMES}
TAKEN = {name: getattr(torch, name) for name in NAMES}


class Box:
    def __init__(self, value):
        self.value = value

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func not in HANDLED:
            raise TypeError(f"Multiple dispatch failed for {func!r}")
        return HANDLED[func](*args, **(kwargs or {}))


def _stack(boxes, dim=0):
    return Box(torch.stack([box.value for box in boxes], dim))


HANDLED[torch.stack] = _stack
HANDLED[torch.cat] = lambda boxes, dim=0: Box(torch.cat([box.value for box in boxes], dim))
"""


def test_a_library_imported_while_counting_keeps_torchs_own_functions(tmp_path: Path) -> None:
    """tensordict's case, and the same for every function the counter replaces in `torch`: a module imported during a
    recording keys its handlers by, and keeps, torch's own objects; its dispatch works during the recording and
    after it."""
    names = list(explicit._WATCHED_FUNCTIONS)
    (tmp_path / "boxlib.py").write_text(textwrap.dedent(LIBRARY).replace("{NAMES}", repr(names)))
    sys.path.insert(0, str(tmp_path))
    try:
        with SyncCounter():
            import boxlib  # type: ignore[import-not-found]

            inside = torch.stack([boxlib.Box(torch.ones(2)), boxlib.Box(torch.zeros(2))])
        after = torch.cat([boxlib.Box(torch.ones(2)), boxlib.Box(torch.zeros(2))])
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("boxlib", None)
    assert inside.value.tolist() == [[1.0, 1.0], [0.0, 0.0]] and after.value.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert {name: boxlib.TAKEN[name] is getattr(torch, name) for name in names} == {name: True for name in names}


def test_a_subclass_handler_is_handed_torchs_own_method() -> None:
    """A tensor subclass's `__torch_function__` is handed what `torch.Tensor.<name>` is: torch's own, so a handler
    comparing with a method it took at import still matches while a counter counts."""
    seen = []
    item = torch.Tensor.item

    class Tagged(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen.append(func is item)
            return super().__torch_function__(func, types, args, kwargs or {})

    value = torch.ones(()).as_subclass(Tagged)
    with SyncCounter() as counter:
        value.item()
    assert seen and all(seen)
    assert counter.counts_by_kind() == {"item": 1}


class Wrapper:
    """A tensor-like of the kind published loops use (pixloc's `TensorWrapper`): it handles `torch.stack` and
    `torch.cat` by asking `func is torch.<name>` as it runs, and refuses the rest."""

    seen: ClassVar[list[str]] = []

    def __init__(self, data: torch.Tensor) -> None:
        self.data = data

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func is torch.stack or func is torch.cat:
            cls.seen.append(func.__name__)
            return Wrapper(func([each.data for each in args[0]], *args[1:], **(kwargs or {})))
        return NotImplemented


class Labelled(torch.Tensor):
    """A tensor subclass whose handler builds, as it runs, a table of torch's functions it knows."""

    known: ClassVar[dict[object, str]] = {}
    seen: ClassVar[list[str]] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if not cls.known:
            cls.known.update({torch.zeros: "zeros", torch.tensor: "tensor", torch.cat: "cat", torch.stack: "stack"})
        cls.seen.append(cls.known.get(func, ""))
        return super().__torch_function__(func, types, args, kwargs or {})


def _with_handlers() -> tuple[list[float], list[str], list[str], list[str]]:
    Wrapper.seen.clear()
    Labelled.seen.clear()
    stacked = torch.stack([Wrapper(torch.ones(2)), Wrapper(torch.zeros(2))])
    joined = torch.cat((Wrapper(torch.ones(1)),))
    labelled = torch.ones(2).as_subclass(Labelled)
    torch.stack([labelled, labelled]).sum().item()
    seen = []

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen.append("zeros" if func is torch.zeros else "tensor" if func is torch.tensor else "")
            return func(*args, **(kwargs or {}))

    with Mode():
        torch.zeros(2), torch.tensor([1.0])
    values = stacked.data.flatten().tolist() + joined.data.tolist()
    return values, list(Wrapper.seen), list(Labelled.seen), seen


def test_a_handler_asking_which_function_it_was_handed_meets_torchs_own() -> None:
    """A `__torch_function__` handler (a tensor-like's, a subclass's, a function mode's) is handed torch's own
    function, and asks `func is torch.stack`, or builds its table of torch's functions, as it runs: while a counter
    counts, `torch.stack` there is torch's own too (not the stand-in), so the handler dispatches as it does plain, and
    its table holds torch's own objects after the recording. A tensor-like refusing what it does not know raised
    `TypeError` from `torch.stack` only while recorded. The subclass's own calls are counted as before."""
    plain = _with_handlers()
    Labelled.known.clear()
    with SyncCounter() as counter:
        counted = _with_handlers()
    after = _with_handlers()
    assert plain == counted == after
    assert plain[1:] == (["stack", "cat"], ["stack", "", ""], ["zeros", "tensor"])
    assert all(key is getattr(torch, name) for key, name in Labelled.known.items())
    assert counter.counts_by_kind() == {"item": 1, "tolist": 2}  # the subclass's `.item()` and the two reads


@pytest.mark.parametrize("how", ["an import", "a handler"])
def test_a_counter_removed_inside_an_import_or_handler_leaves_torchs_own_functions(how: str, tmp_path: Path) -> None:
    """An import and a handler run with torch's own functions in `torch`, and put the stand-ins back as they end;
    a counter removed meanwhile (by the imported module, or the handler, or another thread) must not have them put
    back after it is gone."""
    own = {name: getattr(torch, name) for name in explicit._WATCHED_FUNCTIONS}
    counter = SyncCounter()

    class Leaving:
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            counter.__exit__(None, None, None)
            return 0

    (tmp_path / "leaving.py").write_text("import builtins\nbuiltins.tripwire_test_counter.__exit__(None, None, None)\n")
    sys.path.insert(0, str(tmp_path))
    builtins.tripwire_test_counter = counter  # type: ignore[attr-defined]
    try:
        counter.__enter__()
        assert torch.stack is not own["stack"]
        if how == "an import":
            import leaving  # type: ignore[import-not-found]  # noqa: F401
        else:
            torch.stack([Leaving()])
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("leaving", None)
        del builtins.tripwire_test_counter  # type: ignore[attr-defined]
    assert {name: getattr(torch, name) for name in own} == own


def test_every_stand_in_on_torch_pickles_by_reference_as_torchs_own_does(tmp_path: Path) -> None:
    """A function of torch's is pickled by reference (a spawned DataLoader's `collate_fn=torch.stack`, a
    `Pool.map(torch.as_tensor, ...)`). A stand-in named as torch's own (`_VariableFunctionsClass.stack`, in tripwire's
    module) could not be, so the same loop raised `PicklingError` only while it was recorded."""
    tripwire_dir = str(Path(explicit.__file__).resolve().parents[1])
    with SyncCounter(root=tmp_path), hot_path("region"):
        torch.tensor([1.0])  # the first host-built tensor: every stand-in is in place
        stand_ins = {name: value for name, value in vars(torch).items() if isinstance(value, TorchFunction)}
        assert all(type(value).__call__.__code__.co_filename.startswith(tripwire_dir) for value in stand_ins.values())
        assert {"as_tensor", "tensor", "from_numpy", "stack"} <= set(stand_ins), sorted(stand_ins)
        unpicklable = {}
        for name, stand_in in stand_ins.items():
            try:
                assert pickle.loads(pickle.dumps(stand_in)) is stand_in, name
            except pickle.PicklingError as error:
                unpicklable[name] = str(error)
        assert unpicklable == {}
    assert all(pickle.loads(pickle.dumps(getattr(torch, name))) is getattr(torch, name) for name in stand_ins)


HELD = """
import functools, torch

class Config:  # a class body run while the counter counts: its attributes are what `torch` held then
    factory = torch.zeros
    join = torch.cat

def hold():
    return {"ones": torch.ones, "stack": functools.partial(torch.stack, dim=0), "config": Config}
"""


def test_a_torch_function_held_past_the_recording_is_used_as_torchs_own(tmp_path: Path) -> None:
    """A reference to `torch.zeros` taken while a counter counts is the stand-in, and outlives it. It was a Python
    function: stored on a class it was bound as a method (`Config().factory(2)` passed the instance to `zeros`,
    during and after the recording), and after it, pickling it (a hyperparameter dict saved with the checkpoint, a
    `functools.partial` sent to a spawned worker) raised `PicklingError`: not the same object as `torch.zeros`."""
    (tmp_path / "held.py").write_text(HELD, encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    try:
        with SyncCounter(root=tmp_path):
            torch.tensor([1.0])
            source = compile(HELD, str(tmp_path / "held.py"), "exec")  # run as the loop's code, not as an import
            namespace: dict[str, object] = {}
            exec(source, namespace)
            held = namespace["hold"]()  # type: ignore[operator]
            config = held["config"]
            assert torch.equal(config().factory(2), torch.zeros(2))  # not bound: the instance is not passed
        assert torch.equal(config().join([torch.ones(1), torch.zeros(1)]), torch.tensor([1.0, 0.0]))
        pickled = pickle.dumps({"ones": held["ones"], "stack": held["stack"]})
        assert b"tripwire" not in pickled  # a reference to torch's function, loadable where tripwire is absent
        loaded = pickle.loads(pickled)
        assert loaded["ones"] is torch.ones and loaded["stack"].func is torch.stack
        assert held["ones"] == torch.ones and hash(held["ones"]) == hash(torch.ones)
        assert {torch.ones: "found"}[held["ones"]] == "found"  # a table keyed by torch's function finds it
        assert held["ones"].__name__ == "ones" and held["ones"](2).tolist() == [1.0, 1.0]
    finally:
        sys.path.remove(str(tmp_path))


SCRIPTED = """
import torch


def combine(x: torch.Tensor) -> torch.Tensor:
    parts = torch.stack([x, torch.zeros(3), torch.ones(3), torch.arange(3.0)])
    return torch.cat([parts.sum(0), torch.tensor([1.0, 2.0]), torch.full((1,), 4.0)])
"""


def test_a_function_scripted_while_counting_compiles_and_computes_as_it_does_plain(tmp_path: Path) -> None:
    """`torch.jit.script` resolves `torch.stack` in a function to the object in `torch` when it compiles: a stand-in
    there, which it does not know as a builtin, it tried to compile as Python and refused (`*args`), so a loop that
    scripts a function while it is recorded failed only then. After the counter, TorchScript's table of builtins holds
    what it held before."""
    from torch.jit import _builtins

    (tmp_path / "scripted_mod.py").write_text(SCRIPTED, encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    try:
        import scripted_mod  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
    table = dict(_builtins._get_builtin_table())
    x = torch.tensor([1.0, -2.0, 3.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script is deprecated, and still in use
        plain = torch.jit.script(scripted_mod.combine)(x)
        with SyncCounter(root=tmp_path) as counter:
            scripted = torch.jit.script(scripted_mod.combine)
            warm = [scripted(x) for _ in range(3)]  # the JIT's own passes (`aten::equal` on constants) run in these
            with hot_path("region"):
                counted = scripted(x)
    assert all(torch.equal(run, plain) for run in warm)
    assert torch.equal(counted, plain) and torch.equal(counted, scripted_mod.combine(x))
    assert counter.counts_by_kind("region") == {}  # the compiled code calls the ops, past every stand-in
    assert _builtins._get_builtin_table() == table


FIRST_USE_IN_A_COUNTER = """
import json, sys
import numpy as np
import torch
from tripwire.sync import hot_path
from tripwire.sync.counter import SyncCounter

graphs = []


def backend(gm, inputs):
    graphs.append(gm.code)
    return gm.forward


@torch.compile(backend=backend)
def step(x, values):
    return torch.stack([x, torch.tensor([1.0, 2.0, 3.0]), torch.full((3,), 2.0), torch.from_numpy(values)]).sum(0)


def factories():
    return [torch.zeros(3), torch.tensor([1.0]), torch.arange(3), torch.empty(2), torch.full((1,), 1.0)]


def run():
    with torch.device("meta"):
        placed = [t.device.type for t in factories()]
    return placed, step(torch.ones(3), np.ones(3, dtype=np.float32)).tolist()


if sys.argv[1] == "counted":
    with SyncCounter(root=sys.argv[2]), hot_path("region"):
        during = run()
else:
    during = run()
after = run()
import torch._dynamo.variables.torch as dynamo_tables
import torch.overrides as overrides

print(json.dumps({
    "during": during,
    "after": after,
    "graphs": graphs,
    "overridable": torch.stack in dynamo_tables.get_overridable_functions(),
    "handled": torch.tensor in dynamo_tables.TorchInGraphFunctionVariable._get_handlers(),
    "named": overrides.resolve_name(torch.stack),
    "ignored": torch.zeros in overrides.get_ignored_functions(),
}))
"""


def test_torchs_own_tables_built_first_under_a_counter_hold_torchs_own_functions(tmp_path: Path) -> None:
    """torch builds tables of its own functions on first use, from what `torch` holds then, and keeps them for the
    process: the factories `with torch.device(...)` places, dynamo's set of functions it sends to
    `__torch_function__`, its handlers of `torch.tensor`, `torch.full` and `torch.from_numpy`, `torch.overrides`'.
    Built under a counter, they held the stand-ins: `torch.zeros` in `with torch.device("meta")` made a CPU tensor,
    during the recording and after it. In a fresh process each (the tables are built once), a counted first use
    places, compiles and names what a plain one does."""
    script = tmp_path / "first_use.py"
    script.write_text(FIRST_USE_IN_A_COUNTER, encoding="utf-8")
    runs = {}
    for how in ("plain", "counted"):
        done = subprocess.run(
            [sys.executable, str(script), how, str(tmp_path)], capture_output=True, text=True, timeout=300, check=False
        )
        assert done.returncode == 0, done.stderr[-3000:]
        runs[how] = json.loads(done.stdout.strip().splitlines()[-1])
    plain, counted = runs["plain"], runs["counted"]
    assert plain["during"][0] == ["meta"] * 5 and plain["overridable"] and plain["handled"]  # what torch does
    # the same graph; dynamo guards a function compiled under the counter on the stand-ins it traced through, so
    # after the counter it compiles once more (docs/guardrails.md: compiled across a recording's edge)
    assert counted.pop("graphs")[0] == plain.pop("graphs")[0]
    assert counted == plain


def _introspected(value: object) -> tuple[object, ...]:
    """What code that inspects a callable reads of it: its signature (or the error asking for one raises), the
    function `inspect.unwrap` reaches, its module and its name."""
    import inspect

    try:
        signature: object = str(inspect.signature(value))  # type: ignore[arg-type]
    except (TypeError, ValueError) as error:
        signature = type(error).__name__
    unwrapped = inspect.unwrap(value)  # type: ignore[arg-type]
    target = getattr(unwrapped, "__func__", unwrapped)
    return signature, target, getattr(value, "__module__", None), getattr(value, "__name__", None)


def test_a_watched_callable_inspected_while_counting_reads_as_torchs_own() -> None:
    """`inspect.signature(torch.cat)` raises ValueError (a builtin without a text signature), and a library that asks
    before it calls (an argument parser, a config system binding keywords) takes that path; a stand-in read
    `(*args, **kwargs)`, and an instance's `t.item` named tripwire's module as its own. Each stand-in carries
    `__wrapped__` (what `inspect.signature` and `inspect.unwrap` follow) and its original's module."""
    tensor = torch.ones(2)
    names = explicit._WATCHED_METHODS
    plain = {f"torch.{name}": _introspected(getattr(torch, name)) for name in explicit._WATCHED_FUNCTIONS}
    plain |= {f"t.{name}": _introspected(getattr(tensor, name)) for name in names}
    with SyncCounter():
        torch.zeros(1)  # a host-built tensor: the place-keeping stand-ins (`.float()`, `.view()`) go in place
        inside = {f"torch.{name}": _introspected(getattr(torch, name)) for name in explicit._WATCHED_FUNCTIONS}
        inside |= {f"t.{name}": _introspected(getattr(tensor, name)) for name in names}
        placed = {name: getattr(getattr(tensor, name), "__func__", None) for name in names}  # the stand-ins in place
    unwrapped_plain = {key: (value[0], value[2], value[3]) for key, value in plain.items()}
    unwrapped_inside = {key: (value[0], value[2], value[3]) for key, value in inside.items()}
    assert unwrapped_inside == unwrapped_plain
    import inspect

    for name in explicit._WATCHED_FUNCTIONS:  # `inspect.unwrap` reaches torch's own function
        assert inside[f"torch.{name}"][1] is plain[f"torch.{name}"][1], name
    for name in names:  # and, from an instance's method (a stand-in's), the class's own descriptor or function
        assert inside[f"t.{name}"][1] is inspect.unwrap(getattr(torch.Tensor, name)), name
        assert isinstance(placed[name], FunctionType) and "tripwire" in placed[name].__code__.co_filename, name


def test_a_swapped_function_inspected_while_counting_reads_as_its_own() -> None:
    """The functions whose code is swapped while counting (`tripwire.sync.swaps`: `torch.save`, `torch.load`, the
    synchronize entry points) read `(*args, _tripwire_counted=..., **kwargs)` before: a loop that asks whether
    `torch.load` takes `weights_only` (`"weights_only" in inspect.signature(torch.load).parameters`) took the other
    path under tripwire. Their signatures read as their own while swapped, and nothing is left on them after."""
    import inspect

    swapped = [torch.save, torch.load, torch.cuda.synchronize, vars(torch.cuda.Event)["synchronize"]]
    swapped.append(torch.nn.Parameter.__new__)  # counts nothing: marks a parameter made of host memory
    plain = [(_introspected(function), dict(vars(function))) for function in swapped]
    with SyncCounter():
        inside = [_introspected(function) for function in swapped]
        assert "weights_only" in inspect.signature(torch.load).parameters
        assert inspect.getfullargspec(torch.save).args[:2] == ["obj", "f"]
        assert all("tripwire" in function.__code__.co_filename for function in swapped[:2])  # swapped indeed
    assert inside == [introspected for introspected, _ in plain]
    assert [dict(vars(function)) for function in swapped] == [attributes for _, attributes in plain]


def _holds(function: object, target: object) -> bool:
    """Whether `function` reaches `target` through its `__wrapped__` or a closure cell (one level)."""
    cells = [cell.cell_contents for cell in getattr(function, "__closure__", None) or ()]
    return getattr(function, "__wrapped__", None) is target or any(value is target for value in cells)


def test_an_attribute_the_loop_replaced_while_recorded_keeps_the_loops_object() -> None:
    """A library imported during a recording that patches torch (its own `Tensor.item`, its own `torch.as_tensor`):
    the counter's exit put torch's own back over it, so the loop ran on without its patch after the recording."""
    own_item, own_as_tensor = torch._C.TensorBase.item, torch.as_tensor

    def loops_item(self: torch.Tensor) -> object:
        return own_item(self)

    def loops_as_tensor(*args: object, **kwargs: object) -> torch.Tensor:
        return own_as_tensor(*args, **kwargs)  # type: ignore[arg-type]

    try:
        with SyncCounter():
            torch.Tensor.item = loops_item  # type: ignore[method-assign]
            torch.as_tensor = loops_as_tensor
        assert torch.Tensor.item is loops_item and torch.as_tensor is loops_as_tensor
        assert torch.ones(1).item() == 1.0
    finally:
        del torch.Tensor.item
        torch.as_tensor = own_as_tensor
    assert torch.Tensor.item is own_item


def test_a_wrapper_the_loop_made_of_a_stand_in_keeps_wrapping_torchs_own_after() -> None:
    """A decorator applied while recorded wraps what it finds, the counter's stand-in: after the recording the
    wrapper stays, as the loop made it, and wraps torch's own function, as it would have with no recording."""
    import functools

    own = torch.as_tensor
    try:
        with SyncCounter():
            seen = stand_in = torch.as_tensor  # `seen` is the wrapper's cell, shared with this frame
            assert stand_in is not own  # the stand-in, wrapped next

            @functools.wraps(seen)
            def logged(*args: object, **kwargs: object) -> torch.Tensor:
                return seen(*args, **kwargs)  # type: ignore[arg-type]

            torch.as_tensor = logged
        assert torch.as_tensor is logged
        assert _holds(logged, own) and not _holds(logged, stand_in)
        assert logged([1.0]).tolist() == [1.0]
    finally:
        torch.as_tensor = own


def test_a_library_that_patches_torch_when_imported_while_recorded_keeps_its_patch(tmp_path: Path) -> None:
    """An import while counting runs with torch's own functions in `torch` (`hidden_from_imports`): putting the
    stand-ins back after it overwrote a patch the imported module made."""
    (tmp_path / "patches_torch_on_import.py").write_text(
        "import torch\n_own = torch.as_tensor\n\n\ndef as_tensor(*a, **k):\n    return _own(*a, **k)\n\n\n"
        "torch.as_tensor = as_tensor\n"
    )
    own = torch.as_tensor
    sys.path.insert(0, str(tmp_path))
    try:
        with SyncCounter():
            import patches_torch_on_import  # type: ignore[import-not-found]

            assert torch.as_tensor is patches_torch_on_import.as_tensor
        assert torch.as_tensor is patches_torch_on_import.as_tensor
        assert patches_torch_on_import._own is own
    finally:
        torch.as_tensor = own
        sys.path.remove(str(tmp_path))
        sys.modules.pop("patches_torch_on_import", None)


def _functions_a_mode_sees() -> list[str]:
    seen: list[str] = []

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen.append(getattr(func, "__name__", repr(func)))
            return func(*args, **(kwargs or {}))

    with Mode(), torch.inference_mode():
        host = torch.zeros(4)  # an inference tensor in host memory: its storage is noted
        host[1] = 2.5
        host[torch.tensor([0])] = 1.0
        copy = (host * 2).cpu()  # a counted copy to the host: its version is noted
        copy[0] = 1.0
        device = torch.ones(3) + 1
        device[1] = 0.5
    return seen


def test_a_function_mode_sees_none_of_the_reads_that_tell_where_a_tensor_is() -> None:
    """Where a tensor is, on a CPU run, is read from it: whether it is an inference tensor, its storage, its version.
    A loop's function mode saw each such read (`is_inference`, `untyped_storage`, `_version`'s getter) as a call of
    its own loop while a counter ran; it sees the loop's calls alone, as it does plain."""
    plain = _functions_a_mode_sees()
    with SyncCounter():
        recorded = _functions_a_mode_sees()
    assert recorded == plain
    assert "zeros" in plain and "is_inference" not in plain
