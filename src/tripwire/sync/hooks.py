"""Torch hooks behind `SyncCounter`: stand-ins on the watched functions, kernels or a dispatch mode, and patches.

- Explicit host pulls: `.item()`, `.cpu()`, `.tolist()`, `.numpy()`, `np.asarray(t)`,
  `bool/float/int/complex/operator.index(t)`, printing a tensor, `x in t`, and host-bound copies (`.to(...)`,
  `copy_`; see "Host-bound copies" below). While a counter is active each watched method and function is replaced
  on `torch.Tensor` or in `torch` by a stand-in (`tripwire.sync.watched`), which hands the call to `_watched_call`
  on a counting thread; no other torch call pays anything. `_ExplicitSyncMode` (a `TorchFunctionMode`, every torch
  call a trip through Python: 1.6 to 1.8 times the loop time of CleanRL's `ppo.py` before it counted anything) did
  the same and is kept behind `use_patches = False`, for tests that compare the two call by call. Two differences:
  a stand-in replaces a name on `torch.Tensor` or in `torch`, so a reference taken before the counter started
  (`from torch import zeros` at import, `torch._C.TensorBase.item(t)`) is not watched, where the mode saw every
  call; and a sync inside a Python-level torch function with a torch-function check (`torch.nn.functional.*`) is
  seen as what it is (`item`, `bool`), where the mode, switched off while its handler ran that function, saw it only
  as a kernel's `implicit:_local_scalar_dense`, if at all. Autograd's device threads count while a counting thread's
  backward runs (`_in_counted_backward`); another thread's own backward at that moment is counted too.
- Implicit syncs are aten ops tagged `data_dependent_output` or `dynamic_output_shape` (`nonzero`, `unique`,
  `masked_select`, `bincount`, `equal`, `_local_scalar_dense` reached from inside torch, boolean-mask `index`,
  `repeat_interleave` without `output_size`, `one_hot` without `num_classes`), counted as a dispatch mode sees them:
  called from Python, from autograd or from an op that decomposes above autograd, never an op another op's kernel
  runs inside itself (a CPU `var` reading its mean). On torch 2.9 and later `_ImplicitKernels` registers a counting
  kernel over each such op at its autograd keys (and at its backend keys for inference tensors), so only those ops
  pay; inside `torch.inference_mode`, where autograd is off, in a process with a running process group, and on
  older torch, `_ImplicitSyncMode` (a `TorchDispatchMode`) counts, costing every op a trip through Python. The two
  are compared call by call in tests/tripwire/test_sync_kernels.py. Syncs already counted explicitly are not
  counted twice: the explicit hook suppresses recording while the call it counted runs.
- `torch.cuda.synchronize`, `torch.accelerator.synchronize`, `torch.cuda.Stream.synchronize` and
  `torch.cuda.Event.synchronize` count their calls while a counter is active, restored on exit (also when the body
  raised): their code is swapped (`tripwire.sync.swaps`), so a reference taken before the counter started
  (`sync = torch.cuda.synchronize`, a bound `stream.synchronize` kept aside) is counted too.
- Tensor dunders that do not route through function modes in the running torch (probed once; in
  torch 2.14 all of `__bool__/__float__/__int__/__index__/__complex__` do) are wrapped on
  `torch.Tensor` while active, then restored.
- `torch.distributed` collectives and point-to-point calls (`COLLECTIVES`: `all_reduce`, `all_gather`,
  `all_gather_object`, `broadcast`, `barrier`, `send`, `recv`, ...) are replaced, in `torch.distributed` and in
  `torch.distributed.distributed_c10d`, while a counter is active: each call is one sync point of kind
  `collective:<op>` (every rank waits there for the others). What torch does inside one (the size exchange and
  `.item()` of `all_gather_object`) is not counted again. A collective issued any other way (a reference taken
  before the counter started, `from torch.distributed import all_reduce`; a `ProcessGroup` method called directly)
  is counted where it reaches the dispatcher, as a c10d op (`collective:all_reduce`; `all_gather_object` so shows
  as its two `collective:all_gather`), by the dispatch mode (`implicit=True`, the default), which counts wherever a
  process group was running when the counter started. One started before the group (a script that initialises it
  itself) counts collectives by the patched functions alone.

Host-bound copies (`.to(...)` and `copy_` towards the host, however spelled) and host-to-device copies that block
the host (`to_device`: a `.to(device)` from host memory that is not pinned and non-blocking; `copy_to_device`: the
same through `copy_`; `tensor_to_device`: `torch.tensor(data, device=...)`) are classified by `tripwire.sync.copies`,
on CPU runs by reading the call and by which tensors were built in host memory (a host factory or `torch.tensor`
without `device=`, and the place-keeping methods of such a tensor, marked as they are made).

Under torch.compile the hooks stay out of what is compiled: while dynamo traces an op into a graph the function mode
and the kernels pass it through (`torch.compiler.is_compiling()`), the dispatch mode declares
`ignore_compile_internals`, and
tripwire's frames are on dynamo's skip list (`tripwire.sync.dynamo`). Syncs in a compiled function's eager parts
(at its graph breaks) are counted as anywhere else.

Reading failures: an event's kind names the hook that saw it; `implicit:<op>` names the aten op.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import os
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import torch
from torch.compiler import is_compiling
from torch.overrides import TorchFunctionMode, _get_current_function_mode, _pop_mode, _push_mode
from torch.utils import _python_dispatch as dispatch
from torch.utils._python_dispatch import TorchDispatchMode

from tripwire.sync import state as sync
from tripwire.sync.copies import _host_born, copy_kind, host_born, made_by_user, mark_host_born, tensor_kind, to_kind
from tripwire.sync.dynamo import dynamo_skips_tripwire
from tripwire.sync.swaps import Swap, swap_code
from tripwire.sync.watched import counted_stand_in, keeping_stand_in, stand_in

_ROUTING_PROBES: dict[str, Callable[[torch.Tensor], object]] = {
    "__bool__": bool,
    "__float__": float,
    "__int__": int,
    "__index__": operator.index,
    "__complex__": complex,
}
_DUNDER_KINDS = {"__bool__": "bool", "__float__": "float", "__int__": "int", "__index__": "index"}
_DUNDER_KINDS["__complex__"] = "complex"

_SIMPLE_KINDS: dict[Any, str] = {
    torch.Tensor.item: "item",
    torch.Tensor.cpu: "cpu",
    torch.Tensor.tolist: "tolist",
    torch.Tensor.numpy: "numpy",
    torch.Tensor.__array__: "numpy",
    torch.Tensor.__bool__: "bool",
    torch.Tensor.is_nonzero: "bool",
    torch.is_nonzero: "bool",
    torch.Tensor.__float__: "float",
    torch.Tensor.__int__: "int",
    torch.Tensor.__index__: "index",
    torch.Tensor.__complex__: "complex",
    torch.Tensor.__format__: "format",
    torch.Tensor.__repr__: "format",
    torch.Tensor.__contains__: "contains",
}

# torch.distributed entry points counted as `collective:<name>` while a counter is active (those the running torch
# has; a build without torch.distributed has none).
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "monitored_barrier",
    "broadcast",
    "broadcast_object_list",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "gather",
    "gather_object",
    "scatter",
    "scatter_object_list",
    "send",
    "recv",
    "isend",
    "irecv",
    "batch_isend_irecv",
    "send_object_list",
    "recv_object_list",
)

_BUILDERS: dict[Any, str] = {torch.tensor: "tensor", torch.as_tensor: "as_tensor"}  # host data to a device
# Calls whose result, built without `device=`, is in host memory (marked: a later `.to(device)` of it is an upload)
_HOST_BUILDERS = frozenset(
    {torch.tensor, torch.as_tensor, torch.from_numpy, torch.zeros, torch.ones, torch.empty, torch.full}
    | {torch.arange, torch.linspace, torch.eye, torch.rand, torch.randn, torch.randint, torch.stack, torch.cat}
)
# Tensor methods whose result stays where their input is (a host tensor's `.float()` is a host tensor)
_PLACE_KEEPING: tuple[str, ...] = (
    "float",
    "long",
    "int",
    "double",
    "half",
    "bool",
    "view",
    "reshape",
    "contiguous",
    "unsqueeze",
)
_PLACE_KEEPING += ("squeeze", "flatten", "t", "clone", "detach", "__getitem__")
_KEEPS_PLACE = frozenset(getattr(torch.Tensor, name) for name in _PLACE_KEEPING)
# Every function the explicit mode does more with than call it (outside torch.compile); others pass straight through
_WATCHED = frozenset(_SIMPLE_KINDS) | {torch.Tensor.to, torch.Tensor.copy_} | frozenset(_BUILDERS)
_WATCHED |= _HOST_BUILDERS | _KEEPS_PLACE
# torch's own functions, for identity checks that must not meet the stand-ins put in their place
_TO, _COPY, _STACK, _CAT = torch.Tensor.to, torch.Tensor.copy_, torch.stack, torch.cat
# Where the watched functions live, for the stand-ins that replace them while a counter is active (`use_patches`)
_WATCHED_METHODS: tuple[str, ...] = ("item", "cpu", "tolist", "numpy", "__array__", "is_nonzero", "__bool__")
_WATCHED_METHODS += ("__float__", "__int__", "__index__", "__complex__", "__format__", "__repr__", "__contains__")
_WATCHED_METHODS += ("to", "copy_", *_PLACE_KEEPING)
_WATCHED_FUNCTIONS: tuple[str, ...] = ("is_nonzero", "tensor", "as_tensor", "from_numpy", "zeros", "ones", "empty")
_WATCHED_FUNCTIONS += ("full", "arange", "linspace", "eye", "rand", "randn", "randint", "stack", "cat")
_CANONICAL = {("Tensor", name): getattr(torch.Tensor, name) for name in _WATCHED_METHODS}
_CANONICAL |= {("torch", name): getattr(torch, name) for name in _WATCHED_FUNCTIONS}
assert set(_CANONICAL.values()) == _WATCHED, "every watched function has a stand-in"
# Calls whose only op is `_local_scalar_dense` (no autograd formula): a counted one runs below autograd
_SCALAR_READS: frozenset[Any] = frozenset({torch.Tensor.item, torch.Tensor.__bool__, torch.Tensor.is_nonzero})
_SCALAR_READS |= {torch.is_nonzero, torch.Tensor.__float__, torch.Tensor.__int__, torch.Tensor.__index__}
_SCALAR_READS |= {torch.Tensor.__complex__}
# Place-keeping methods that are nothing else: `_watched_call` only marks their results (`_mark_kept`)
_ONLY_KEEPS_PLACE = _KEEPS_PLACE - frozenset(_SIMPLE_KINDS) - frozenset(_BUILDERS) - _HOST_BUILDERS - {_TO, _COPY}
# Explicit syncs are seen by stand-ins on the watched functions alone (True), or by a function mode that every torch
# call goes through (False: the earlier design, kept as a switch for tests that compare the two call by call)
use_patches = True
_BACKWARDS = [0]  # backward passes that counting threads are running now (`_in_counted_backward`)
_BACKWARDS_LOCK = threading.Lock()
_MASK_DTYPES = (torch.bool, torch.uint8)
_NO_IMPLICIT = "-"
_implicit_cache: dict[Any, str] = {}
_routed_dunders: frozenset[str] | None = None
_implicit_by = ""  # how implicit syncs are counted now: "kernels", "mode" or "" (not at all)
_explicit_by = ""  # how explicit syncs are counted now: "stand-ins", "mode" or "" (no counter)
_LOCAL = sync._LOCAL  # this thread's region stack, suppression and implicit-counting depths


@dataclass
class Installation:
    """What one `SyncCounter.__enter__` installed, so its `__exit__` removes exactly that."""

    function_mode: TorchFunctionMode | None = None
    counting: bool = False  # stand-ins installed and this thread marked as counting (`_LOCAL.counting`)
    dispatch_mode: TorchDispatchMode | None = None
    kernels: _ImplicitKernels | None = None  # counting implicit syncs in place of `dispatch_mode`
    restores: list[tuple[Any, str, bool, Any]] = field(default_factory=list)
    skipping: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)  # `tripwire.sync.dynamo`
    swaps: list[Swap] = field(default_factory=list)  # functions whose code counts their calls
    keeping: list[tuple[str, Any]] = field(default_factory=list)  # place-keeping stand-ins not yet in place (`_mark`)


def _call_counted(kind: str, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Record `kind`, then run `func` with recording suppressed so nothing inside counts twice."""
    sync.deliver(kind)
    local = sync._LOCAL
    local.suppress += 1
    try:
        return func(*args, **kwargs)
    finally:
        local.suppress -= 1


class _ExplicitSyncMode(TorchFunctionMode):
    """Function mode recording explicit host pulls (see the module docstring)."""

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if kwargs is None:
            kwargs = {}
        if is_compiling():  # dynamo is tracing this call into a graph: the op as it is (a sync breaks the graph)
            method = getattr(func, "__module__", None) == "torch._tensor"
            if method and getattr(torch.Tensor, func.__name__, None) is func:
                # a tensor method written in Python (`backward`): called as the user called it, so dynamo handles
                # it as it does without a mode, not by tracing the method's body
                return getattr(args[0], func.__name__)(*args[1:], **kwargs)
            return func(*args, **kwargs)
        if func not in _WATCHED:  # nearly every call: nothing to count or mark
            return func(*args, **kwargs)
        return _watched_call(func, func, args, kwargs)


def _watched_call(func: Any, call: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """One call of the watched function `func` (run as `call`) on a counting thread, from the function mode or a
    stand-in (`tripwire.sync.watched`), either one frame below the code that made it: counted if it syncs, else run,
    and its result marked when it is a tensor built in host memory."""
    kind = _SIMPLE_KINDS.get(func)
    if kind is None:
        if func is _TO:
            kind = to_kind(args, kwargs)
        elif func is _COPY:
            kind = copy_kind(args, kwargs)
        elif func in _BUILDERS:
            kind = tensor_kind(args, kwargs, _BUILDERS[func])
        if kind is None:
            result = call(*args, **kwargs)
            if _host_built(func, args, kwargs, result):
                _mark(result)
            return result
    return _call_counted(kind, call, args, kwargs)


def _mark_kept(source: object, result: object) -> None:
    """Mark a place-keeping method's result when it is host-built (`_kept_on_host`): the keeping stand-ins' step."""
    if _kept_on_host(result, source):
        _mark(result)


# Installations whose place-keeping stand-ins wait for the first host-built tensor (`_mark`). Until a tensor is marked
# no input of a place-keeping method can be host-built, so those stand-ins would only call through: SB3's 4,096-step
# PPO run, which builds none, makes 55,000 such calls, 3.5 % of its loop time through a Python frame each.
_WAITING: list[Installation] = []
_WAITING_LOCK = threading.Lock()


def _mark(tensor: torch.Tensor) -> None:
    """`mark_host_born`, first putting the waiting place-keeping stand-ins in place: from here on a place-keeping
    method's result of this tensor, or of one derived from it, is marked too."""
    if _WAITING:
        with _WAITING_LOCK:
            for installation in _WAITING:
                _put_keeping_in_place(installation)
            _WAITING.clear()
    mark_host_born(tensor)


def _put_keeping_in_place(installation: Installation) -> None:
    """Patch the installation's waiting place-keeping stand-ins onto `torch.Tensor` (under `_WAITING_LOCK`)."""
    for name, replacement in installation.keeping:
        _patch(installation, torch.Tensor, name, replacement)
    installation.keeping.clear()


def _kept_on_host(result: object, source: object) -> TypeGuard[torch.Tensor]:
    """Whether a place-keeping method's result is host-built: its input is, and it is a CPU tensor."""
    return host_born(source) and _on_host(result)


def _on_host(result: object) -> TypeGuard[torch.Tensor]:
    return isinstance(result, torch.Tensor) and result.device.type == "cpu"


def _host_built(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], result: object) -> bool:
    """Whether a call built a tensor in host memory: a host builder given no `device=` (`torch.stack`/`cat` of host
    tensors), or a place-keeping method of a host-built tensor; seen on CPU runs only (`copies.host_born`)."""
    if func in _HOST_BUILDERS:
        if "device" in kwargs or not made_by_user(3):  # 3 frames up (past `_watched_call` and the mode or stand-in)
            return False
        if func is _STACK or func is _CAT:
            parts = args[0] if args else kwargs.get("tensors", ())
            if not (parts and all(host_born(part) for part in parts)):
                return False
        return _on_host(result)
    return func in _KEEPS_PLACE and bool(args) and _kept_on_host(result, args[0])


# c10d's ops as the dispatcher sees them -> the `torch.distributed` name a collective is counted under
_C10D_NAMES = {
    "allreduce_": "all_reduce",
    "allreduce_coalesced_": "all_reduce_coalesced",
    "allgather_": "all_gather",
    "_allgather_base_": "all_gather_into_tensor",
    "allgather_coalesced_": "all_gather_coalesced",
    "allgather_into_tensor_coalesced_": "all_gather_into_tensor_coalesced",
    "reduce_scatter_": "reduce_scatter",
    "_reduce_scatter_base_": "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter_tensor_coalesced",
    "alltoall_": "all_to_all",
    "alltoall_base_": "all_to_all_single",
    "broadcast_": "broadcast",
    "reduce_": "reduce",
    "gather_": "gather",
    "scatter_": "scatter",
    "barrier": "barrier",
    "monitored_barrier_": "monitored_barrier",
    "send": "send",
    "recv_": "recv",
    "recv_any_source_": "recv",
}


def _static_implicit_kind(func: Any) -> str:
    """Per-op part of the implicit classification (cached): a kind, `mask`, `rep`, `onehot` or `-`. A c10d op is a
    collective (`collective:all_reduce`): seen at the dispatcher, it is counted however the Python function that
    issued it was referenced (`from torch.distributed import all_reduce` at import); one issued inside a counted
    `torch.distributed` call is not counted again."""
    schema = getattr(func, "_schema", None)
    name = schema.name.split("::", 1)[-1] if schema is not None else ""
    return _static_kind(getattr(func, "namespace", ""), name, getattr(func, "tags", ()))


def _static_kind(namespace: str, name: str, tags: Any) -> str:
    """`_static_implicit_kind` from an op's namespace, name (no overload) and tags."""
    if namespace == "c10d":
        return f"collective:{_C10D_NAMES.get(name, name.strip('_'))}"
    if torch.Tag.data_dependent_output not in tags and torch.Tag.dynamic_output_shape not in tags:
        return _NO_IMPLICIT
    if name == "index":
        return "mask"
    if name == "repeat_interleave":
        return "rep"
    if name == "one_hot":
        return "onehot"
    return f"implicit:{name}"


def _implicit_kind(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """Kind of an aten call that must read device data to size or produce its output, else None."""
    static = _implicit_cache.get(func)
    if static is None:
        static = _implicit_cache[func] = _static_implicit_kind(func)
    return _call_kind(static, args, kwargs)


def _call_kind(static: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """An op's kind for one call's arguments, from its static kind (a boolean mask, a missing output size)."""
    if static == _NO_IMPLICIT:
        return None
    if static == "mask":
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        masked = any(isinstance(i, torch.Tensor) and i.dtype in _MASK_DTYPES for i in indices)
        return "implicit:index(mask)" if masked else None
    if static == "rep":
        return None if kwargs.get("output_size") is not None else "implicit:repeat_interleave"
    if static == "onehot":
        classes = args[1] if len(args) > 1 else kwargs.get("num_classes", -1)
        return "implicit:one_hot" if classes == -1 else None
    return static


class _ImplicitSyncMode(TorchDispatchMode):
    """Dispatch mode recording data-dependent aten ops (see the module docstring)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """Keep torch from wrapping `__torch_dispatch__` in `torch._disable_dynamo`: that wrapper imports dynamo on
        its first call (about 1.3 s, in a loop that never compiles) and adds a frame to every op. Dynamo stays out
        of this frame all the same: counting runs under `dynamo_skips_tripwire`, which puts tripwire's folder on
        dynamo's skip list as soon as dynamo is imported, before anything can compile."""
        return False

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """Let torch.compile compile while this mode is active: without it dynamo skips every frame under a dispatch
        mode and runs it eagerly, so counting would change what is counted. The mode still sees the ops compiled
        code dispatches at run time (all of them with the eager backends, inductor's fallbacks with inductor)."""
        return True

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if kwargs is None:
            kwargs = {}
        kind = _implicit_kind(func, args, kwargs)
        if kind is not None:
            sync.deliver(kind, implicit=not kind.startswith("collective:"))
        return func(*args, **kwargs)


# Where a data-dependent op gets a counting kernel, when this torch build gives the op one there. The autograd keys
# see an op called from Python, from autograd's formulas or from an op that decomposes above autograd, and never one
# that another op's kernel runs inside itself (autograd is switched off below it): the ops a dispatch mode sees. A
# backend key is reached as well by an inference tensor's op outside inference mode (it has no autograd key).
_AUTOGRAD_KEYS: tuple[str, ...] = (
    "AutogradCPU",
    "AutogradCUDA",
    "AutogradHIP",
    "AutogradXPU",
    "AutogradMPS",
    "AutogradHPU",
)
_AUTOGRAD_KEYS += ("AutogradMTIA", "AutogradPrivateUse1", "AutogradOther", "AutogradNestedTensor", "AutogradXLA")
_BACKEND_KEYS = ("CPU", "CUDA", "HIP", "XPU", "MPS", "HPU", "MTIA", "PrivateUse1")
_targets: tuple[int, list[tuple[str, str, str, tuple[str, ...]]]] = (-1, [])


def kernels_available() -> bool:
    """Whether this torch can hand back an op's own kernel (`torch.library.get_kernel`, torch 2.9 and later): then
    implicit syncs are counted by kernels registered over the data-dependent ops alone (`_ImplicitKernels`), else by a
    dispatch mode that sees every op (`_ImplicitSyncMode`)."""
    return hasattr(torch.library, "get_kernel") and hasattr(torch._C, "_dispatch_get_all_op_names")


use_kernels = kernels_available()  # a switch for tests: False counts through the dispatch mode on any torch


def _kernels_here() -> bool:
    """Whether this counter counts implicit syncs with kernels: torch can, and no process group is running. A
    collective's kernel blocks, and a kernel written in Python would hold the interpreter's lock through it while
    other ranks' work needs it; so where collectives run, the dispatch mode counts, as it counts a c10d op issued past
    the patched `torch.distributed` functions (a reference taken before the counter started)."""
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    return use_kernels and not distributed


def _has_kernel(op: str, key: str) -> bool:
    try:
        return bool(torch._C._dispatch_has_computed_kernel_for_dispatch_key(op, key))
    except RuntimeError:  # a key this torch build does not know
        return False


def _implicit_targets() -> list[tuple[str, str, str, tuple[str, ...]]]:
    """`(namespace, name.overload, static kind, keys)` of every registered op an implicit sync can come from: those
    tagged `data_dependent_output` or `dynamic_output_shape` (c10d's collectives are not: see `_kernels_here`). An op
    with a CompositeImplicitAutograd kernel is left out: it decomposes before the backends, and what it decomposes
    into is counted (as a dispatch mode sees it). Listed again when ops have been registered since (a library
    loaded)."""
    global _targets
    names = torch._C._dispatch_get_all_op_names()
    if _targets[0] == len(names):
        return _targets[1]
    found = []
    for full in sorted(names):
        qualified, _, overload = full.partition(".")
        namespace, _, name = qualified.partition("::")
        try:
            tags = torch._C._get_operation_overload(qualified, overload)[2]
        except RuntimeError:  # an op whose schema cannot be read here: nothing to count it by
            continue
        static = _static_kind(namespace, name, tags)
        if static == _NO_IMPLICIT or static.startswith("collective:"):
            continue
        if torch._C._dispatch_has_kernel_for_dispatch_key(full, "CompositeImplicitAutograd"):
            continue
        # `_local_scalar_dense` run at a backend key outside autograd is another op's own read (a CPU `var`), but a
        # top-level one is `.item()`, already counted explicitly
        wanted = _AUTOGRAD_KEYS + (() if name == "_local_scalar_dense" else _BACKEND_KEYS)
        keys = tuple(key for key in wanted if _has_kernel(full, key))
        if keys:
            found.append((namespace, full.split("::", 1)[1], static, keys))
    _targets = (len(names), found)
    return found


def _counting_here() -> bool:
    """Whether this thread counts implicit syncs: it entered a counter or runs carried work (`_LOCAL.implicit`), or
    torch carried a counting thread's modes to it (autograd's device threads run a backward with its caller's
    function modes, as they would a dispatch mode)."""
    if _LOCAL.implicit or _LOCAL.counting > 0 or _in_counted_backward():
        return True
    stack = torch._C._len_torch_function_stack()
    return any(isinstance(torch._C._get_function_stack_at(index), _ExplicitSyncMode) for index in range(stack))


def _in_counted_backward() -> bool:
    """Whether this thread runs part of a backward pass while a counting thread runs one: autograd runs an
    accelerator's part of the graph on a device thread of its own, where a function mode, carried there by torch,
    counted; the stand-ins count there as the mode did. (Another thread's own backward, running at the same time,
    is counted as well.)"""
    return _BACKWARDS[0] > 0 and torch._C._current_graph_task_id() != -1


def _tracked_backward(original: Callable[..., Any]) -> Callable[..., Any]:
    """`torch.autograd._engine_run_backward`, noting a counting thread's backward in `_BACKWARDS` while it runs."""

    @functools.wraps(original)
    def run(*args: Any, **kwargs: Any) -> Any:
        if _LOCAL.counting <= 0:
            return original(*args, **kwargs)
        with _BACKWARDS_LOCK:
            _BACKWARDS[0] += 1
        try:
            return original(*args, **kwargs)
        finally:
            with _BACKWARDS_LOCK:
                _BACKWARDS[0] -= 1

    return run


def _install_stand_ins(installation: Installation) -> None:
    """Replace every watched method and function by a stand-in (`tripwire.sync.watched`) and track backward passes.
    A call that always syncs and a place-keeping method get a stand-in of their own that does what `_watched_call`
    would, without classifying the call on every use. The place-keeping ones are put in place at the first host-built
    tensor (`_mark`), or at once when one marked under an earlier counter is still alive."""
    for (owner_name, name), key in _CANONICAL.items():
        owner = torch.Tensor if owner_name == "Tensor" else torch
        original = getattr(owner, name)
        if key in _SIMPLE_KINDS:
            scalar = key in _SCALAR_READS
            replacement = counted_stand_in(
                _SIMPLE_KINDS[key], original, sync.deliver, _LOCAL, _in_counted_backward, scalar
            )
        elif key in _ONLY_KEEPS_PLACE:
            keeping = keeping_stand_in(original, _mark_kept, _host_born, _LOCAL, _in_counted_backward)
            installation.keeping.append((name, keeping))
            continue
        else:
            replacement = stand_in(key, original, _watched_call, _LOCAL, _in_counted_backward)
        _patch(installation, owner, name, replacement)
    with _WAITING_LOCK:
        if _host_born:  # tensors marked under an earlier counter are still alive: their views must be marked now
            _put_keeping_in_place(installation)
        else:
            _WAITING.append(installation)
    engine = getattr(torch.autograd, "_engine_run_backward", None)
    if engine is not None:
        _patch(installation, torch.autograd, "_engine_run_backward", _tracked_backward(engine))


def _counting_kernel(static: str, original: Any, autograd: bool) -> Callable[..., Any]:
    """A kernel for one op and key: counts the call where this thread counts, then runs the op's own kernel. At a
    backend key it counts only an inference tensor's op outside inference mode (any other top-level call was counted
    at its autograd key; inside inference mode the dispatch mode counts, see `_InferenceWatch`); nothing run inside a
    counted op's kernel is counted."""
    call = original.call_boxed

    def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        local = _LOCAL
        if local.suppress or local.nested or local.by_mode or is_compiling() or not _counting_here():
            return call(keyset, *args, **kwargs)
        if not autograd:
            first = args[0] if args else None
            if not isinstance(first, torch.Tensor) or not first.is_inference() or torch.is_inference_mode_enabled():
                return call(keyset, *args, **kwargs)
        kind = _call_kind(static, args, kwargs)
        if kind is not None:
            sync.deliver(kind, implicit=True)
        local.nested += 1
        try:
            return call(keyset, *args, **kwargs)
        finally:
            local.nested -= 1

    return kernel


class _InferenceWatch:
    """While counters run with kernels: inside `torch.inference_mode` autograd is off for every op, so the kernels at
    the autograd keys never run and a backend kernel cannot tell an op from one another op runs inside itself. There
    the dispatch mode counts, pushed on entering inference mode on a counting thread and popped on leaving it."""

    def __init__(self, installation: Installation) -> None:
        cls = torch.autograd.grad_mode.inference_mode
        enter, leave = cls.__enter__, cls.__exit__
        watch = self

        def __enter__(self: Any) -> None:
            enter(self)
            watch.entered()

        def __exit__(self: Any, *exc: Any) -> None:
            try:
                watch.left()
            finally:
                leave(self, *exc)

        _patch(installation, cls, "__enter__", __enter__)
        _patch(installation, cls, "__exit__", __exit__)
        self.stack = threading.local()
        self.entered()  # a counter started inside inference mode

    def entered(self) -> None:
        pushed: list[TorchDispatchMode | None] = self.stack.__dict__.setdefault("pushed", [])
        mode = None
        if torch.is_inference_mode_enabled() and _counting_here() and not any(pushed):
            mode = _ImplicitSyncMode()
            mode.__enter__()
            _LOCAL.by_mode += 1
        pushed.append(mode)

    def left(self) -> None:
        pushed: list[TorchDispatchMode | None] = self.stack.__dict__.get("pushed", [])
        mode = pushed.pop() if pushed else None
        if mode is not None:
            _LOCAL.by_mode -= 1
            mode.__exit__(None, None, None)

    def close(self) -> None:
        self.left()  # the mode pushed for a counter started inside inference mode


class _ImplicitKernels:
    """Implicit syncs counted by kernels registered over the data-dependent ops' own (`torch.library`): only those ops
    pay for counting, where a dispatch mode costs every op a trip through Python. Counted on the threads a dispatch
    mode would be active on; `close` restores each op's own kernel."""

    def __init__(self, installation: Installation) -> None:
        self.libraries: dict[str, torch.library.Library] = {}
        self.watch: _InferenceWatch | None = None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "overriding a previously registered kernel": on purpose
                for namespace, name, static, keys in _implicit_targets():
                    library = self.libraries.get(namespace)
                    if library is None:
                        library = self.libraries[namespace] = torch.library.Library(namespace, "IMPL")
                    for key in keys:
                        original = torch.library.get_kernel(f"{namespace}::{name}", key)
                        kernel = _counting_kernel(static, original, key.startswith("Autograd"))
                        library.impl(name, kernel, key, with_keyset=True)
            self.watch = _InferenceWatch(installation)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Restore every op's own kernel (the inference-mode patch is restored with the installation's others)."""
        if self.watch is not None:
            self.watch.close()
            self.watch = None
        for library in self.libraries.values():
            library._destroy()
        self.libraries.clear()


class _RoutingProbe(TorchFunctionMode):
    """Records which tensor dunders reach function modes in this torch build."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        self.seen.add(getattr(func, "__name__", ""))
        return func(*args, **(kwargs or {}))


def routed_dunders() -> frozenset[str]:
    """Names of the scalar-conversion dunders that route through function modes (probed once)."""
    global _routed_dunders
    if _routed_dunders is None:
        probe = _RoutingProbe()
        value = torch.ones((), dtype=torch.int64)
        with probe:
            for convert in _ROUTING_PROBES.values():
                convert(value)
        _routed_dunders = frozenset(name for name in _ROUTING_PROBES if name in probe.seen)
    return _routed_dunders


def _counted_call(kind: str, original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Replacement body for a patched sync function."""
    return _call_counted(kind, original, args, kwargs)


def _counted_method(self: Any, kind: str, original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Replacement body for a patched sync method (bound through `functools.partialmethod`)."""
    return _call_counted(kind, original, (self, *args), kwargs)


def _patch(installation: Installation, owner: Any, name: str, replacement: Any) -> None:
    """Replace `owner.name`, remembering how to restore it."""
    had_own = name in vars(owner)
    installation.restores.append((owner, name, had_own, vars(owner).get(name)))
    setattr(owner, name, replacement)


def _patch_sync_functions(installation: Installation) -> None:
    """Count the explicit synchronize entry points (the function objects themselves, so a reference taken before the
    counter started is counted too) and patch any unrouted dunders."""
    targets: list[tuple[Any, str, str]] = [(torch.cuda, "synchronize", "cuda_synchronize")]
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "synchronize"):
        targets.append((accelerator, "synchronize", "accelerator_synchronize"))
    targets.append((torch.cuda.Stream, "synchronize", "stream_synchronize"))
    targets.append((torch.cuda.Event, "synchronize", "event_synchronize"))
    for owner, name, kind in targets:
        function = vars(owner).get(name) if isinstance(owner, type) else getattr(owner, name)
        swap = swap_code(function, functools.partial(_counted_swap, kind))
        if swap is not None:
            installation.swaps.append(swap)
        elif isinstance(owner, type):  # a method written in C: patched on its class
            _patch(installation, owner, name, functools.partialmethod(_counted_method, kind, getattr(owner, name)))
        else:
            _patch(installation, owner, name, functools.partial(_counted_call, kind, getattr(owner, name)))
    for name in [] if use_patches else sorted(set(_DUNDER_KINDS) - routed_dunders()):  # stand-ins cover them all
        method = functools.partialmethod(_counted_method, _DUNDER_KINDS[name], getattr(torch.Tensor, name))
        _patch(installation, torch.Tensor, name, method)
    _patch_collectives(installation)


def _counted_swap(kind: str, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A swapped function's call (`tripwire.sync.swaps`): recorded, then run with recording suppressed."""
    return _call_counted(kind, original, args, kwargs)


def _patch_collectives(installation: Installation) -> None:
    """Count every `torch.distributed` collective and point-to-point call as `collective:<name>`.

    Both namespaces are patched: user code calls `torch.distributed.<name>`, and torch's own helpers call the
    `distributed_c10d` module's globals (those nested calls are suppressed by the outer count, never doubled).
    """
    if not torch.distributed.is_available():
        return
    from torch.distributed import distributed_c10d

    for name in COLLECTIVES:
        original = getattr(distributed_c10d, name, None) or getattr(torch.distributed, name, None)
        if original is None:
            continue
        replacement = functools.wraps(original)(functools.partial(_counted_call, f"collective:{name}", original))
        for owner in (torch.distributed, distributed_c10d):
            if getattr(owner, name, None) is original:
                _patch(installation, owner, name, replacement)


def install(*, implicit: bool) -> Installation:
    """Install what is not yet installed: modes on this thread, patches process-wide."""
    global _implicit_by, _explicit_by
    installation = Installation()
    try:
        installation.skipping.enter_context(dynamo_skips_tripwire())
        if not sync._STATE.counters:
            sync._set_skip_prefixes((os.path.dirname(torch.__file__) + os.sep, sync._TRIPWIRE_DIR))
            _patch_sync_functions(installation)
            if use_patches:
                _install_stand_ins(installation)
                _LOCAL.counting += 1
                installation.counting = True
                _explicit_by = "stand-ins"
            else:
                routed_dunders()
                installation.function_mode = _ExplicitSyncMode()
                installation.function_mode.__enter__()
                _explicit_by = "mode"
        if implicit and not _implicit_by:
            if _kernels_here():
                _LOCAL.implicit += 1
                try:
                    installation.kernels = _ImplicitKernels(installation)
                except BaseException:
                    _LOCAL.implicit -= 1
                    raise
                _implicit_by = "kernels"
            else:
                installation.dispatch_mode = _ImplicitSyncMode()
                installation.dispatch_mode.__enter__()
                _implicit_by = "mode"
    except BaseException:
        uninstall(installation)
        raise
    return installation


@contextlib.contextmanager
def thread_modes(*, implicit: bool) -> Iterator[None]:
    """Push the counting modes on the current (worker) thread; torch modes are thread-local, patches are not.

    Once per thread: carried work inside a thread that already counts (a thread the counter's watch started runs
    a pool task its loop wrapped in `carried`) pushes nothing more, or each implicit sync would count twice."""
    if _LOCAL.carrying:
        yield
        return
    _LOCAL.carrying += 1
    with contextlib.ExitStack() as modes:
        modes.callback(_not_carrying)
        if _explicit_by == "stand-ins":
            _LOCAL.counting += 1
            modes.callback(_not_counting)
        else:
            modes.enter_context(_ExplicitSyncMode())
        if implicit and _implicit_by == "kernels":
            _LOCAL.implicit += 1
            modes.callback(_thread_done)
        elif implicit:
            modes.enter_context(_ImplicitSyncMode())
        yield


def _not_carrying() -> None:
    _LOCAL.carrying -= 1


def _thread_done() -> None:
    _LOCAL.implicit -= 1


def _not_counting() -> None:
    _LOCAL.counting -= 1


Taken = tuple[list[TorchFunctionMode], list[TorchDispatchMode]]


def take_modes_off() -> Taken:
    """Take this thread's counting modes off the top of torch's mode stacks (`ignore_syncs` does, while a counter
    is active): under a mode every torch call, and every read of a tensor property (`.shape`, `.dtype`), makes a
    trip through Python, and a digest makes dozens per tensor, all ignored anyway. A mode someone pushed above
    ours stays, and so do ours beneath it. `put_modes_back` restores exactly what was taken."""
    functions: list[TorchFunctionMode] = []
    dispatches: list[TorchDispatchMode] = []
    while isinstance(_get_current_function_mode(), _ExplicitSyncMode):
        functions.append(_pop_mode())
    while isinstance(dispatch._get_current_dispatch_mode(), _ImplicitSyncMode):
        dispatches.append(dispatch._pop_mode())
    return functions, dispatches


def put_modes_back(taken: Taken) -> None:
    """Push back what `take_modes_off` took, in the order they were."""
    functions, dispatches = taken
    for dispatch_mode in reversed(dispatches):
        dispatch._push_mode(dispatch_mode)
    for function_mode in reversed(functions):
        _push_mode(function_mode)


def uninstall(installation: Installation) -> None:
    """Undo `install` in reverse order; patches are restored even if popping a mode fails."""
    global _implicit_by, _explicit_by
    try:
        if installation.kernels is not None:
            _implicit_by = ""
            _LOCAL.implicit -= 1
            installation.kernels.close()
            installation.kernels = None
        if installation.dispatch_mode is not None:
            _implicit_by = ""
            installation.dispatch_mode.__exit__(None, None, None)
        if installation.function_mode is not None:
            _explicit_by = ""
            installation.function_mode.__exit__(None, None, None)
        if installation.counting:
            _explicit_by = ""
            installation.counting = False
            _LOCAL.counting -= 1
    finally:
        with _WAITING_LOCK:
            _WAITING[:] = [waiting for waiting in _WAITING if waiting is not installation]
            installation.keeping.clear()
        for owner, name, had_own, original in reversed(installation.restores):
            if had_own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)
        installation.restores.clear()
        for swap in reversed(installation.swaps):
            swap.restore()
        installation.swaps.clear()
        installation.skipping.close()
