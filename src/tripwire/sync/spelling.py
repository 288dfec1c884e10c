"""What the user's line says about where data goes, read from its source (no torch).

The copy rule (`tripwire.sync.copies`, on a run) and the static audit (`tripwire.gates.static_audit`, on the source)
both ask whether a `.to(...)` target or a `copy_` receiver names the host; both ask it here, so a CPU run and the
audit agree on what a line means. On a run, the call being made is read through the interpreter's instruction
positions, once per call site (`spelling`), and a target that is a parameter of the function (`x.to(device)` in
`def stack(rows, device)`) is read where the function was called (`stack(rows, torch.device("cpu"))`), up to
`CALLERS_READ` calls out, so a helper that moves data to whatever device it is given is read as its caller meant it.
"""

from __future__ import annotations

import ast
import builtins
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from types import BuiltinFunctionType, CodeType, FrameType, FunctionType, ModuleType

from tripwire.common.lines import line_of
from tripwire.sync import state as sync

__all__ = [
    "HOST_WORDS",
    "NEW_LIKE",
    "Keeping",
    "Spelling",
    "device_of",
    "forget_sources",
    "keeps",
    "module_move",
    "name_of",
    "names_host",
    "passes_on",
    "rebinds",
    "spelled_names",
    "spelling",
]

HOST_WORDS = ("cpu", "host", "pinned")
CALLERS_READ = 3  # how many calls out a parameter target is followed
# Calls that build a tensor in host memory when no `device=` is given: from host data, or a host factory
BUILDERS = {"tensor", "as_tensor", "asarray", "from_numpy", "Tensor", "FloatTensor", "LongTensor", "IntTensor"}
BUILDERS |= {"BoolTensor"}
BUILDERS |= {"zeros", "ones", "empty", "full", "arange", "linspace", "eye", "rand", "randn", "randint", "randperm"}
BUILDERS |= {"logspace", "scalar_tensor", "empty_strided", "tril_indices", "triu_indices"}
# Factories that build where their input is, unless given a `device=` (read as a builder's, not as a receiver's)
LIKE = ("zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like")
NEW_LIKE = ("new_zeros", "new_ones", "new_empty", "new_full")  # methods: where the tensor they are called on is
KEEPS_PLACE = {"float", "long", "int", "double", "half", "bool", "view", "reshape", "contiguous", "unsqueeze"}
KEEPS_PLACE |= {"squeeze", "flatten", "t", "clone", "detach"}  # a host tensor stays a host tensor


def name_of(node: ast.expr) -> str:
    """The last part of a name (`self.cpu_buffer` -> `cpu_buffer`, `device` -> `device`), "" for anything else."""
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def names_host(node: ast.expr) -> bool:
    """Whether an expression spells the host: a CPU device string, `torch.device("cpu"...)`, or a name (its last
    part: `self.cpu_buffer`, `host[i]`) with `cpu`, `host` or `pinned` in it."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.split(":")[0] == "cpu"
    if isinstance(node, ast.Call):
        first = node.args[0] if node.args else next((kw.value for kw in node.keywords if kw.arg == "type"), None)
        return name_of(node.func) == "device" and first is not None and names_host(first)
    if isinstance(node, ast.Subscript):
        return names_host(node.value)
    return any(word in name_of(node).lower() for word in HOST_WORDS)


def _receiver(node: ast.expr) -> tuple[bool, bool]:
    """`(built on the host, pinned)` of the tensor a `.to()` is called on, as far as its expression says."""
    if isinstance(node, ast.Call):
        method = name_of(node.func)
        if method == "pin_memory" and isinstance(node.func, ast.Attribute):
            return True, True  # pinned memory is host memory
        if method in KEEPS_PLACE and isinstance(node.func, ast.Attribute):
            return _receiver(node.func.value)
        if method in BUILDERS:
            return not any(kw.arg == "device" for kw in node.keywords), False
        return False, False
    if isinstance(node, ast.Subscript):
        return _receiver(node.value)
    name = name_of(node).lower()
    return any(word in name for word in HOST_WORDS), "pinned" in name


@dataclass(frozen=True)
class Spelling:
    """What the user's call says of a copy, read from its source."""

    target_is_host: bool = False  # `.to(X)`, `torch.zeros(..., device=X)` with X the host / `dst.copy_(...)` into
    # a host buffer
    device_named: bool = False  # a device target that is not the host: `.to(self.device)`, `device=device`
    built_on_host: bool = False  # the receiver of `.to()` is built from host data right there (`torch.tensor(...)`)
    pinned: bool = False  # ... in pinned memory (`.pin_memory()`, or a name with `pinned` in it)
    parameter: str = ""  # the target is this parameter of the calling function: its caller says what it is
    device_of: str = ""  # the target is this name's device: `.to(input.device)` -> "input"


# Keyed by the code object's id, the entry holding the code so the id is not reused: hashing a code object hashes its
# bytecode and constants, tens of microseconds for a script's module code, on every call of a watched `.to`
_spelling_cache: dict[tuple[int, int, str], tuple[CodeType, Spelling]] = {}
_Positions = list[tuple[int | None, int | None, int | None, int | None]]
_positions_cache: dict[int, tuple[CodeType, _Positions]] = {}  # by the code's id, as `_spelling_cache`
# what a call passes for one parameter of the function it calls: (caller's code id, lasti, parameter) -> expression
_arguments_cache: dict[tuple[int, int, str], tuple[CodeType, ast.expr | None]] = {}
# whether a call's statement stores its result back under its receiver's name: (code id, lasti) -> answer
_rebinding_cache: dict[tuple[int, int], tuple[CodeType, bool]] = {}
# the lines of the call a call's result is an argument of: (code id, lasti) -> lines, or None
_passing_cache: dict[tuple[int, int], tuple[CodeType, tuple[int, int] | None]] = {}
# the syntax-tree nodes from a file's module down to a call: (code id, lasti) -> path, or None where not found
_path_cache: dict[tuple[int, int], tuple[CodeType, tuple[ast.AST, ...] | None]] = {}
# the name a call's result is kept under in its function: (code id, lasti) -> how, or None
_keeping_cache: dict[tuple[int, int], tuple[CodeType, Keeping | None]] = {}
# the names an instruction's expression reads: (code id, lasti) -> names
_names_cache: dict[tuple[int, int], tuple[CodeType, frozenset[str]]] = {}
# each file's parsed source, for the functions whose local names a `.to()` target may be (`_bound_to_host`)
_module_cache: dict[str, ast.Module] = {}


def forget_sources() -> None:
    """Drop the spellings read, the decoded instruction positions and the arguments found (the last counter stopped):
    each entry holds a code object of the loop, which would otherwise outlive the recording."""
    _spelling_cache.clear()
    _positions_cache.clear()
    _arguments_cache.clear()
    _rebinding_cache.clear()
    _passing_cache.clear()
    _path_cache.clear()
    _keeping_cache.clear()
    _names_cache.clear()
    _module_cache.clear()


def _position(frame: FrameType) -> tuple[int, int, int, int] | None:
    """Where in its file the call the frame is executing now stands: first and last line, first and last column (the
    instruction's position), or None when the code keeps none."""
    code = frame.f_code
    cached = _positions_cache.get(id(code))
    if cached is None:  # decoded once per code object: a script's module code takes milliseconds
        # none for code whose file was edited since the loop imported it: its lines would be misread
        positions = list(code.co_positions()) if sync.code_matches_source(code) else []
        cached = _positions_cache[id(code)] = (code, positions)
    positions = cached[1]
    index = frame.f_lasti // 2
    if index >= len(positions):
        return None
    start, end, first_col, last_col = positions[index]
    if start is None or end is None or first_col is None or last_col is None:
        return None
    return start, end, first_col, last_col


def call_source(frame: FrameType) -> str:
    """The source of the call the frame is executing now (its instruction's position), or ""."""
    position = _position(frame)
    if position is None:
        return ""
    start, end, first_col, last_col = position
    source = sync.source_lines(frame.f_code.co_filename)  # as the recording first read it
    lines = [(source[n - 1] if 0 < n <= len(source) else "").encode() for n in range(start, end + 1)]
    if start == end:
        return lines[0][first_col:last_col].decode(errors="replace")
    return b"".join([lines[0][first_col:], *lines[1:-1], lines[-1][:last_col]]).decode(errors="replace")


# One parse at a time: CPython 3.11 tracks the syntax tree builder's recursion depth in state its threads share, so
# two parses at once (the threads of a loop's pool, each reading a call's spelling) can fail with `SystemError: AST
# constructor recursion depth mismatch` (seen on 3.11.7; cpython gh-106905 reports it in threaded programs), raised
# out of the loop's own torch call. Re-entrant: a collection during a parse may run a finalizer that reaches a
# stand-in on the same thread.
_PARSING = threading.RLock()


def _parse(source: str, mode: str = "exec") -> ast.AST:
    with _PARSING:
        return ast.parse(source, mode=mode)


def _parsed_call(frame: FrameType) -> ast.AST | None:
    try:
        return _parse(call_source(frame).strip(), mode="eval")
    except (SyntaxError, ValueError):
        return None


def rebinds(frame: FrameType) -> bool:
    """Whether the statement the frame runs stores the result of its call back where the call's receiver was read
    from: under its name (`returns = returns.cpu()`, `self.obs = self.obs.detach().to("cpu")`, `x = x[:, 0].cpu()`),
    in its slot (`d[k] = d[k].cpu()`; `d[k] = v.to(device)` in a `for k, v in d.items()` loop, Sample Factory's
    inference worker), or a comprehension of them under the name it iterates (`xs = [t.cpu() for t in xs]`, ElegantRL's
    worker). Such a copy to the host is the only tensor the loop holds there from then on (ElegantRL's evaluator reads
    `returns` element by element after `returns = returns.cpu()`). Read once per call site."""
    key = (id(frame.f_code), frame.f_lasti)
    cached = _rebinding_cache.get(key)
    if cached is None:
        cached = _rebinding_cache[key] = (frame.f_code, _rebinding(frame))
    return cached[1]


def _copy_call(frame: FrameType) -> tuple[ast.Call, tuple[ast.AST, ...]] | None:
    """The `.cpu()`/`.to(...)` call the frame is making, with the nodes above it (the module first)."""
    path = _call_path(frame)
    if path is None or len(path) < 2:
        return None
    call = path[-1]
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in ("cpu", "to")):
        return None  # a name holds what comes after the copy (`a.cpu().numpy()`)
    return call, path[:-1]


def _stages(receiver: ast.expr) -> list[ast.expr]:
    """A receiver and what it is read from, down a chain of methods and indices (`x[:, 0].float()`: itself, `x[:, 0]`,
    `x`)."""
    stages = [receiver]
    while True:
        if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute):
            receiver = receiver.func.value
        elif isinstance(receiver, ast.Subscript):
            receiver = receiver.value
        else:
            return stages
        stages.append(receiver)


def _assigned(statement: ast.AST, value: ast.AST) -> ast.expr | None:
    """The one target a statement assigns `value` to, or None."""
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and statement.value is value:
        return statement.targets[0]
    if isinstance(statement, ast.AnnAssign) and statement.value is value:
        return statement.target
    return None


def _rebinding(frame: FrameType) -> bool:
    found = _copy_call(frame)
    if found is None:
        return False
    call, above = found
    assert isinstance(call.func, ast.Attribute)
    stages = _stages(call.func.value)
    parent = above[-1]
    if isinstance(parent, (ast.ListComp, ast.DictComp)) and len(above) > 1:
        return _comprehension_stored_back(parent, call, stages[-1], _assigned(above[-2], parent))
    target = _assigned(parent, call)
    if target is None:
        return False
    wanted = ast.unparse(target)
    if any(
        isinstance(stage, (ast.Name, ast.Attribute, ast.Subscript)) and ast.unparse(stage) == wanted for stage in stages
    ):
        return True
    return isinstance(target, ast.Subscript) and _slot_of_loop(above, target, stages[-1])


def _iterated(iterable: ast.expr) -> str:
    """What a loop goes over, unparsed: `d` of `d.items()`, `d.values()`, `enumerate(d)` and of `d` itself."""
    if isinstance(iterable, ast.Call):
        if isinstance(iterable.func, ast.Attribute) and iterable.func.attr in ("items", "values") and not iterable.args:
            return ast.unparse(iterable.func.value)
        if isinstance(iterable.func, ast.Name) and iterable.func.id == "enumerate" and len(iterable.args) == 1:
            return ast.unparse(iterable.args[0])
    return ast.unparse(iterable)


def _slot_of_loop(above: tuple[ast.AST, ...], target: ast.Subscript, base: ast.expr) -> bool:
    """Whether `C[k] = v.to(...)` stores the copy back in the slot `v` was read from: a loop over `C.items()` or
    `enumerate(C)` binding `k, v`, the innermost loop the statement is in."""
    loop = next((node for node in reversed(above) if isinstance(node, (ast.For, ast.AsyncFor))), None)
    if loop is None or not isinstance(base, ast.Name) or not isinstance(target.slice, ast.Name):
        return False
    bound = loop.target
    if not (isinstance(bound, ast.Tuple) and len(bound.elts) == 2):
        return False
    slot, value = bound.elts
    return (
        isinstance(slot, ast.Name)
        and isinstance(value, ast.Name)
        and (slot.id, value.id) == (target.slice.id, base.id)
        and _iterated(loop.iter) == ast.unparse(target.value)
    )


def _comprehension_stored_back(
    comprehension: ast.ListComp | ast.DictComp, call: ast.Call, base: ast.expr, target: ast.expr | None
) -> bool:
    """Whether `xs = [t.cpu() for t in xs]` (or `d = {k: v.cpu() for k, v in d.items()}`) replaces what it iterates
    with the copies of its elements: one loop, over the assigned name, its element the copy of the loop's value."""
    element = comprehension.elt if isinstance(comprehension, ast.ListComp) else comprehension.value
    if target is None or element is not call or len(comprehension.generators) != 1:
        return False
    loop = comprehension.generators[0]
    value = loop.target.elts[-1] if isinstance(loop.target, ast.Tuple) and loop.target.elts else loop.target
    return (
        isinstance(base, ast.Name)
        and isinstance(value, ast.Name)
        and base.id == value.id
        and _iterated(loop.iter) == ast.unparse(target)
    )


@dataclass(frozen=True)
class Keeping:
    """A copy to the host kept under a local name of the function that made it (`cpu_counts = counts.cpu()`)."""

    name: str  # the name the copy is kept under (a list or dict of copies: `accums_cpu = [a.cpu() for a in accums]`)
    device: frozenset[str]  # the names the copied tensor was read from (`counts`; `a`, `accums`)


def keeps(frame: FrameType) -> Keeping | None:
    """How the statement the frame runs keeps the result of its copy to the host under a local name: bound to it
    (`host = t.cpu()`, over as many lines as it takes), as one element of an unpacking (`a, b = x.cpu(), y.cpu()`),
    or as the elements of a list, set or dict bound to it (`accums_cpu = [a.cpu() for a in accums]`, the original
    trainer's validation, whose `accums_cpu[i].tolist()` reads host memory on a GPU). None for anything else, and for
    a name the copy is read from (`rebinds`'). Read once per call site."""
    key = (id(frame.f_code), frame.f_lasti)
    cached = _keeping_cache.get(key)
    if cached is None:
        cached = _keeping_cache[key] = (frame.f_code, _keeping(frame))
    return cached[1]


def _keeping(frame: FrameType) -> Keeping | None:
    found = _copy_call(frame)
    if found is None:
        return None
    call, above = found
    assert isinstance(call.func, ast.Attribute)
    device = _tensor_names(frame, _names(call.func.value))
    value: ast.AST = call
    index: int | None = None
    parent = above[-1]
    if isinstance(parent, (ast.ListComp, ast.SetComp, ast.DictComp)) and len(above) > 1:
        if (parent.value if isinstance(parent, ast.DictComp) else parent.elt) is not call:
            return None  # a dict comprehension's key
        for loop in parent.generators:
            device |= _tensor_names(frame, _names(loop.iter))
        value, parent = parent, above[-2]
    elif isinstance(parent, (ast.Tuple, ast.List, ast.Set)) and len(above) > 1:
        index = next(i for i, element in enumerate(parent.elts) if element is call)
        value, parent = parent, above[-2]
    target = _assigned(parent, value)
    if index is not None and isinstance(target, (ast.Tuple, ast.List)):
        assert isinstance(value, (ast.Tuple, ast.List, ast.Set))
        starred = any(isinstance(element, ast.Starred) for element in (*target.elts, *value.elts))
        target = target.elts[index] if len(target.elts) == len(value.elts) and not starred else None
    if not isinstance(target, ast.Name) or target.id in device:
        return None
    return Keeping(target.id, frozenset(device))


def _tensor_names(frame: FrameType, names: set[str]) -> set[str]:
    """`names` but the module's own names bound to a module, a class or a function (`torch` of
    `stats = torch.stack([a, b]).cpu()`): a later line spelling `torch.sum(stats)` reads the copy, not a device
    tensor. A name the function binds itself is kept whatever it holds (its locals are not read: on Python 3.11 that
    would build a dictionary on the loop's frame)."""
    local = set(frame.f_code.co_varnames) | set(frame.f_code.co_cellvars) | set(frame.f_code.co_freevars)
    scopes = (frame.f_globals, vars(builtins))
    kept = set()
    for name in names:
        value = None if name in local else next((scope[name] for scope in scopes if name in scope), None)
        if not isinstance(value, (ModuleType, type, FunctionType, BuiltinFunctionType)):
            kept.add(name)
    return kept


def _names(node: ast.AST | None) -> set[str]:
    """The plain names an expression reads."""
    return {child.id for child in ast.walk(node) if isinstance(child, ast.Name)} if node is not None else set()


def spelled_names(frame: FrameType) -> frozenset[str]:
    """The plain names the expression the frame is evaluating now reads (its instruction's position: `cpus[i]` while
    it indexes, `cpus[i].tolist()` while it calls; empty where that does not parse alone), and, inside a list, set or
    dict comprehension, the whole comprehension's (`[c.tolist() for c in cpus]`): Python 3.12 runs one in its
    function's frame, where 3.11 called it as a function of its own from a line spelling all of it. Read once per
    instruction."""
    key = (id(frame.f_code), frame.f_lasti)
    cached = _names_cache.get(key)
    if cached is None:
        names = _names(_parsed_call(frame)) | _names(_comprehension_around(frame))
        cached = _names_cache[key] = (frame.f_code, frozenset(names))
    return cached[1]


def _comprehension_around(frame: FrameType) -> ast.AST | None:
    """The outermost list, set or dict comprehension whose lines and columns hold the instruction the frame runs, in
    its own code (an inlined one: Python 3.12 on), or None."""
    position = _position(frame)
    if position is None or frame.f_code.co_name in sync.COMPREHENSIONS:
        return None
    start, end, first_col, last_col = position
    for path in _walk_down(frame.f_code.co_filename, lambda child: _holds(child, start, end, first_col, last_col)):
        if isinstance(path[-1], (ast.ListComp, ast.SetComp, ast.DictComp)):
            return path[-1]
    return None


def _walk_down(filename: str, holds: Callable[[ast.AST], bool]) -> Iterator[tuple[ast.AST, ...]]:
    """The paths from the file's module down to each node `holds` admits, its parent admitted first (depth first, a
    parent before its children)."""
    pending: list[tuple[ast.AST, ...]] = [(_module_tree(filename),)]
    while pending:
        path = pending.pop()
        yield path
        pending.extend((*path, child) for child in ast.iter_child_nodes(path[-1]) if holds(child))


def _holds(node: ast.AST, start: int, end: int, first_col: int, last_col: int) -> bool:
    """Whether a node without a place (a context, an operator) or one whose span holds the given one."""
    first, last = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
    if first is None or last is None:
        return True
    begin = (first, getattr(node, "col_offset", 0))
    finish = (last, getattr(node, "end_col_offset", 0) or 0)
    return begin <= (start, first_col) and (end, last_col) <= finish


def passes_on(frame: FrameType) -> tuple[int, int] | None:
    """Where the call taking the result of the call the frame is making stands, as its first and last line, when that
    result is an argument of it (`tree.update_ids(ids.cpu(), prob=p[i:j].cpu())`, over as many lines as it takes): the
    result goes straight into the callee, under no name of the caller's. None when it is not (read once per call site,
    the call found in its file's syntax tree by its instruction's position)."""
    key = (id(frame.f_code), frame.f_lasti)
    cached = _passing_cache.get(key)
    if cached is None:
        cached = _passing_cache[key] = (frame.f_code, _passed_on(frame))
    return cached[1]


def _passed_on(frame: FrameType) -> tuple[int, int] | None:
    path = _call_path(frame)
    if path is None or len(path) < 2:
        return None
    call, parent = path[-1], path[-2]
    if isinstance(parent, ast.keyword) and len(path) > 2:
        parent = path[-3]
    elif not (isinstance(parent, ast.Call) and any(argument is call for argument in parent.args)):
        return None
    if not isinstance(parent, ast.Call):
        return None
    return parent.lineno, parent.end_lineno or parent.lineno


def _call_path(frame: FrameType) -> tuple[ast.AST, ...] | None:
    """The nodes from the frame's file's module down to the call it is making, found by where its instruction ends
    (the call's closing parenthesis is no other call's); None where the file holds no such call. Once per call site."""
    key = (id(frame.f_code), frame.f_lasti)
    cached = _path_cache.get(key)
    if cached is None:
        cached = _path_cache[key] = (frame.f_code, _find_call(frame))
    return cached[1]


def _find_call(frame: FrameType) -> tuple[ast.AST, ...] | None:
    position = _position(frame)
    if position is None:
        return None
    start, end, _first_col, last_col = position  # a chain over lines starts at its method (`x\n.cpu()`: `.cpu()`)
    for path in _walk_down(frame.f_code.co_filename, lambda child: _on_lines(child, start, end)):  # lines hold it
        node = path[-1]
        if isinstance(node, ast.Call) and (node.end_lineno, node.end_col_offset) == (end, last_col):
            return path
    return None


def _on_lines(node: ast.AST, start: int, end: int) -> bool:
    """Whether a node without a place (a context, an operator) or one whose lines hold lines `start` to `end`."""
    first, last = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
    return first is None or last is None or (first <= start and end <= last)


def _parameters(code: CodeType) -> tuple[str, ...]:
    return code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]


def _spelled(frame: FrameType, method: str) -> Spelling:
    """Read the call `method(...)` (`.to`, `.copy_`, or a builder such as `torch.tensor`) the frame is making."""
    tree = _parsed_call(frame)
    for node in ast.walk(tree) if tree is not None else ():
        if not (isinstance(node, ast.Call) and name_of(node.func) == method):
            continue
        if method == "copy_" and isinstance(node.func, ast.Attribute):
            return Spelling(target_is_host=names_host(node.func.value))
        if method == "load":  # `torch.load(f, map_location)`: where what it reads goes
            return _load_target(node, frame.f_code)
        # a builder's `device=`: a device by name, or the host (a parameter)
        if method in BUILDERS or method in LIKE or method in NEW_LIKE or method == "new_tensor":
            device = next((kw.value for kw in node.keywords if kw.arg == "device"), None)
            if device is None:
                return Spelling()
            host = names_host(device) or _bound_to_host(frame, device)
            parameter = device.id if isinstance(device, ast.Name) and device.id in _parameters(frame.f_code) else ""
            return Spelling(target_is_host=host, device_named=not host, parameter=parameter)
        targets = [*node.args[:1], *(kw.value for kw in node.keywords if kw.arg == "device")]
        host = any(names_host(target) or _bound_to_host(frame, target) for target in targets)
        built, pinned = _receiver(node.func.value) if isinstance(node.func, ast.Attribute) else (False, False)
        parameter = device_of = ""
        if len(targets) == 1 and isinstance(targets[0], ast.Name) and targets[0].id in _parameters(frame.f_code):
            parameter = targets[0].id
        target = targets[0] if len(targets) == 1 else None
        if isinstance(target, ast.Attribute) and target.attr == "device" and isinstance(target.value, ast.Name):
            device_of = target.value.id
        return Spelling(host, bool(targets) and not host, built, pinned, parameter, device_of)
    return Spelling()


def _bound_to_host(frame: FrameType, node: ast.expr) -> bool:
    """Whether `node` is a local name of the running function (not a parameter) that the function binds to the host
    alone: every assignment to it there a host spelling (`device = "cpu"` a few lines above `x.to(device)`, Sample
    Factory's inference worker). A name bound anywhere else (a loop target, an unpacking, an augmented assignment) or
    to anything else (the run's own device) is not read as the host."""
    if not isinstance(node, ast.Name):
        return False
    while node.id in frame.f_code.co_freevars and frame.f_code.co_name in sync.COMPREHENSIONS:
        outer = frame.f_back  # a comprehension (Python 3.11 runs it as a function of its own) reads its function's
        if outer is None or frame.f_code not in outer.f_code.co_consts:
            return False
        frame = outer
    if node.id in _parameters(frame.f_code) or frame.f_code.co_name == "<module>":
        return False  # a script's own `device = "cpu"` at its top is the run's device, as its every move says
    function = _function_node(frame)
    if function is None:
        return False
    values: list[ast.expr] = []
    for child in _own_nodes(function):
        if isinstance(child, ast.Assign):
            for target in child.targets:
                if isinstance(target, ast.Name) and target.id == node.id:
                    values.append(child.value)
                elif _binds(target, node.id):
                    return False  # unpacked into
        elif isinstance(child, ast.AnnAssign) and isinstance(child.target, ast.Name) and child.target.id == node.id:
            if child.value is not None:  # a bare annotation binds nothing
                values.append(child.value)
        elif isinstance(child, (ast.AugAssign, ast.For, ast.AsyncFor, ast.withitem, ast.NamedExpr, ast.comprehension)):
            bound = child.target if not isinstance(child, ast.withitem) else child.optional_vars
            if bound is not None and _binds(bound, node.id):
                return False
        elif isinstance(child, (ast.Global, ast.Nonlocal)) and node.id in child.names:
            return False
    return bool(values) and all(names_host(value) for value in values)


def _binds(target: ast.expr, name: str) -> bool:
    """Whether an assignment target binds `name` (itself, or inside an unpacking); an index or attribute of a name
    (`buffers[device] = ...`) binds nothing."""
    if isinstance(target, ast.Name):
        return target.id == name
    if isinstance(target, (ast.Tuple, ast.List)):
        return any(_binds(element, name) for element in target.elts)
    if isinstance(target, ast.Starred):
        return _binds(target.value, name)
    return False


def _own_nodes(function: ast.AST) -> list[ast.AST]:
    """The nodes of a function's own body, not of the functions, lambdas and classes inside it."""
    found: list[ast.AST] = []
    pending = list(ast.iter_child_nodes(function))
    while pending:
        child = pending.pop()
        found.append(child)
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            pending.extend(ast.iter_child_nodes(child))
    return found


def _function_node(frame: FrameType) -> ast.AST | None:
    """The AST of the function the frame runs, from its file as the recording read it: the innermost `def` of the
    code's name whose lines hold the running line (each file parsed once a recording)."""
    code = frame.f_code
    if not sync.code_matches_source(code):  # its file edited since the loop imported it
        return None
    tree = _module_tree(code.co_filename)
    line = line_of(frame) or 0
    best: ast.AST | None = None
    for child in ast.walk(tree):
        if (
            isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            and child.name == code.co_name
            and child.lineno <= line <= (child.end_lineno or child.lineno)
            and (best is None or child.lineno > best.lineno)  # type: ignore[attr-defined]
        ):
            best = child
    return best


def _module_tree(filename: str) -> ast.Module:
    """The file's syntax tree as the recording read its source (parsed once a recording; empty when it parses not)."""
    tree = _module_cache.get(filename)
    if tree is None:
        try:
            parsed = _parse("".join(sync.source_lines(filename)))
            assert isinstance(parsed, ast.Module)
            tree = parsed
        except (SyntaxError, ValueError):
            tree = ast.Module(body=[], type_ignores=[])
        _module_cache[filename] = tree
    return tree


def device_of(frame: FrameType) -> str:
    """The name whose device the `.to(...)` call the frame is making moves to (`sorted_indices.to(input.device)` ->
    `input`), "" when its target is not a name's `.device`; read once per call site, with the rest of its spelling."""
    return _spelled_at(frame, "to").device_of


def _load_target(node: ast.Call, code: CodeType) -> Spelling:
    """`torch.load`'s `map_location`: the host (as `names_host` reads it, or `lambda storage, loc: storage`, which
    keeps every storage where the file's reader put it, in host memory), a device by name, or none given."""
    target = next((kw.value for kw in node.keywords if kw.arg == "map_location"), None)
    if target is None and len(node.args) > 1:
        target = node.args[1]
    if target is None:
        return Spelling()
    host = names_host(target) or (
        isinstance(target, ast.Lambda)
        and bool(target.args.args)
        and isinstance(target.body, ast.Name)
        and target.body.id == target.args.args[0].arg
    )
    parameter = target.id if isinstance(target, ast.Name) and target.id in _parameters(code) else ""
    return Spelling(target_is_host=host, device_named=not host, parameter=parameter)


def _spelled_at(frame: FrameType, method: str) -> Spelling:
    key = (id(frame.f_code), frame.f_lasti, method)
    cached = _spelling_cache.get(key)
    if cached is None:
        cached = _spelling_cache[key] = (frame.f_code, _spelled(frame, method))
    return cached[1]


def spelling(method: str, frame: FrameType | None = None) -> Spelling:
    """How the user's line running now spells its `method(...)` call (cached per call site and instruction); a target
    that is a parameter of the function is read where the function was called. `frame`: that line's frame, when the
    caller has found it (`state.site_frame`), else looked up."""
    if frame is None:
        frame = sync.user_frame(2)
    if frame is None:
        return Spelling()
    known = _spelled_at(frame, method)
    if known.parameter:
        return _through_callers(frame, known)
    return known


def _through_callers(frame: FrameType, known: Spelling) -> Spelling:
    """`known` with its parameter target read at the calls that passed it (when one spells the host, the target is
    the host); unchanged when no caller says."""
    parameter, current = known.parameter, frame
    for _ in range(CALLERS_READ):
        caller = current.f_back
        if caller is None:
            break
        argument = _argument(caller, current.f_code, parameter)
        if argument is None:
            break
        if names_host(argument):
            return replace(known, target_is_host=True, device_named=False, parameter="")
        if not (isinstance(argument, ast.Name) and argument.id in _parameters(caller.f_code)):
            break
        parameter, current = argument.id, caller
    return replace(known, parameter="")


def _argument(caller: FrameType, callee: CodeType, parameter: str) -> ast.expr | None:
    """The expression the call `caller` is making passes for `parameter` of `callee` (by keyword, or by position,
    a method's `self` counted when the call is `obj.method(...)`), cached per call site; None when it cannot say."""
    key = (id(caller.f_code), caller.f_lasti, f"{id(callee)}:{parameter}")
    cached = _arguments_cache.get(key)
    if cached is None:
        cached = _arguments_cache[key] = (caller.f_code, _read_argument(caller, callee, parameter))
    return cached[1]


def _read_argument(caller: FrameType, callee: CodeType, parameter: str) -> ast.expr | None:
    tree = _parsed_call(caller)
    calls = [
        node
        for node in (ast.walk(tree) if tree is not None else ())
        if isinstance(node, ast.Call) and name_of(node.func) == callee.co_name
    ]
    if len(calls) != 1:
        return None
    call, names = calls[0], _parameters(callee)
    keyword = next((kw.value for kw in call.keywords if kw.arg == parameter), None)
    if keyword is not None:
        return keyword
    index = names.index(parameter) if parameter in names else -1
    if names[:1] in (("self",), ("cls",)) and isinstance(call.func, ast.Attribute):
        index -= 1  # `obj.method(a)`: the first parameter is `obj`
    positional = [arg for arg in call.args if not isinstance(arg, ast.Starred)]
    if len(positional) != len(call.args) or not 0 <= index < len(positional):
        return None
    return positional[index]


def module_move(frames: int = 12) -> Spelling:
    """How the user's call that started a module's move spells it (`model.to(device)`): torch's `Module.to` moves
    each parameter with a `.to` of its own, so the user's line is found outwards, past the frames of a class's own
    `_apply` override, as the first that is making a `.to(...)` call."""
    frame = sync.user_frame()
    for _ in range(frames):
        if frame is None:
            break
        if frame.f_code.co_filename.startswith(sync.skip_prefixes()):
            frame = frame.f_back
            continue
        known = _spelled_at(frame, "to")
        if known.device_named or known.target_is_host or known.parameter:
            return _through_callers(frame, known) if known.parameter else known
        frame = frame.f_back
    return Spelling()
