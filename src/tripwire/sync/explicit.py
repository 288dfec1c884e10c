"""Explicit host syncs: the stand-ins on the watched tensor methods and torch functions, or the function mode.

What is explicit: `.item()`, `.cpu()`, `.tolist()`, `.numpy()`, `np.asarray(t)`, `bool/float/int/complex/
operator.index(t)`, printing a tensor, `x in t`, and host-bound copies (`.to(...)`, `copy_`), which
`tripwire.sync.copies` classifies (with the host-to-device copies that block the host). While a counter is active
each watched method and function is replaced on `torch.Tensor` or in `torch` by a stand-in (`tripwire.sync.watched`)
that hands the call to `watched_call` on a counting thread; no other torch call pays anything.

`ExplicitSyncMode` (a `TorchFunctionMode`: every torch call a trip through Python; docs/measurements.md, "The cost of
recording", item 9, measures it on CleanRL's `ppo.py`) does the same and is kept behind `use_patches = False`, for
tests that compare the two call by call. Two differences: a stand-in replaces a name on `torch.Tensor` or in `torch`,
so a reference taken before the counter started (`from torch import zeros` at import, `torch._C.TensorBase.item(t)`)
is not watched, where the mode saw every call; and a sync inside a Python-level torch function with a torch-function
check (`torch.nn.functional.*`) is seen as what it is (`item`, `bool`), where the mode, switched off while its handler
ran that function, saw it only as a kernel's `implicit:_local_scalar_dense`, if at all. Autograd's device threads
count while a counting thread's backward runs (`installation.in_counted_backward`).

Host-built tensors (a host factory or `torch.tensor` without `device=` or with a `device=` that spells the host, their
place-keeping views and casts, and what Python's operators, a few reductions and elementwise functions make of them
alone: `i + 4`, `x.sum()`, `torch.where(done, 0.0, ret)`) are marked as they are made, by the loop's code or by
torch's own (an optimizer's step counters), so that a CPU run can tell a later `.to(device)` of one is an upload
(`tripwire.sync.copies`), and so that a read of one is not counted: the tensor is in host memory on a GPU run too,
and its read waits for nothing there. The same tensors are marked on a CPU run and on a GPU, so one budget serves
both. A tensor a model's math computes from host tensors (`x.softmax(0)`, `F.relu(x)`) is not followed, nor
one built before the counter started: a read of either counts. (An index of a host-built tensor, and a
data-dependent op of host-built tensors alone, are followed from the kernels that watch those ops:
`tripwire.sync.implicit`.)
"""

from __future__ import annotations

import functools
import importlib._bootstrap as _bootstrap
import operator
import os
import sys
import threading
from collections.abc import Callable
from types import BuiltinFunctionType
from typing import Any, TypeGuard

import torch
from torch.compiler import is_compiling
from torch.overrides import TorchFunctionMode

from tripwire.common.quiet import ignoring
from tripwire.sync import kinds
from tripwire.sync import state as sync
from tripwire.sync.copies import (
    _IS_INFERENCE,
    PLACE,
    PLAIN,
    _device_type,
    _host_born,
    accelerator_in_use,
    all_host_born,
    builder_data,
    copy_kind,
    default_device,
    forget_host_born,
    host_born,
    in_host_memory,
    keep,
    lend,
    made_by_user,
    mark_host_born,
    note_host_copy,
    tensor_kind,
    to_kind,
    type_of,
    unseen,
)
from tripwire.sync.installation import (
    Installation,
    as_script_builtin,
    call_counted,
    in_counted_backward,
    patch,
    tracked_backward,
)
from tripwire.sync.spelling import LIKE, NEW_LIKE, keeps, passes_on, rebinds, spelling
from tripwire.sync.watched import (
    WatchedMethod,
    as_caller,
    counted_stand_in,
    keeping_stand_in,
    stand_in,
    torch_function,
)

__all__ = [
    "DUNDER_KINDS",
    "ExplicitSyncMode",
    "install_stand_ins",
    "mark_host_memory",
    "read_settings",
    "routed_dunders",
    "use_patches",
    "watched_call",
]

# The watched tensor methods that always sync, by name, with the kind each counts as
METHOD_KINDS: dict[str, str] = {
    "item": kinds.ITEM,
    "cpu": kinds.CPU,
    "tolist": kinds.TOLIST,
    "numpy": kinds.NUMPY,
    "__array__": kinds.NUMPY,
    "is_nonzero": kinds.BOOL,
    "__bool__": kinds.BOOL,
    "__float__": kinds.FLOAT,
    "__int__": kinds.INT,
    "__index__": kinds.INDEX,
    "__complex__": kinds.COMPLEX,
    "__format__": kinds.FORMAT,
    "__repr__": kinds.FORMAT,
    "__contains__": kinds.CONTAINS,
}
# The scalar conversions Python calls a dunder for, each with a call that reaches it (`routed_dunders` probes them)
_CONVERSIONS: dict[str, Callable[[torch.Tensor], object]] = {
    "__bool__": bool,
    "__float__": float,
    "__int__": int,
    "__index__": operator.index,
    "__complex__": complex,
}
DUNDER_KINDS = {name: METHOD_KINDS[name] for name in _CONVERSIONS}
# Methods whose only op is `_local_scalar_dense` (no autograd formula): a counted one runs below autograd
_SCALAR_NAMES = ("item", "is_nonzero", *_CONVERSIONS)
_SIMPLE_KINDS: dict[Any, str] = {getattr(torch.Tensor, name): kind for name, kind in METHOD_KINDS.items()}
_SIMPLE_KINDS[torch.is_nonzero] = kinds.BOOL
_SCALAR_READS = frozenset({getattr(torch.Tensor, name) for name in _SCALAR_NAMES} | {torch.is_nonzero})

# Host data to a device (or, of a tensor, a move of it)
_BUILDERS: dict[Any, str] = {torch.tensor: "tensor", torch.as_tensor: "as_tensor", torch.asarray: "asarray"}
# Calls whose result, built without `device=`, is in host memory (marked: a later `.to(device)` of it is an upload)
_HOST_BUILDER_NAMES: tuple[str, ...] = ("tensor", "as_tensor", "asarray", "from_numpy", "zeros", "ones", "empty")
_HOST_BUILDER_NAMES += ("full", "arange", "linspace", "eye", "rand", "randn", "randint", "randperm", "stack", "cat")
# ... and the rarer factories: a vectorized env's reset of one environment writes `torch.normal(0, 1, size=(2,))`
# into its device buffer (ElegantRL's `PointChasingVecEnv`); `normal` given tensors is where they are (`_host_built`)
_HOST_BUILDER_NAMES += ("normal", "logspace", "scalar_tensor", "empty_strided", "tril_indices", "triu_indices")
_HOST_BUILDERS = frozenset(getattr(torch, name) for name in _HOST_BUILDER_NAMES)
# Factories whose result is where their input is, unless a `device=` says where (a default device does not apply)
_LIKE = frozenset(getattr(torch, name) for name in LIKE)
_LIKE |= frozenset(getattr(torch.Tensor, name) for name in NEW_LIKE)  # `x.new_zeros(n)`: where `x` is, as `zeros_like`
# Tensor methods whose result stays where their input is (a host tensor's `.float()` is a host tensor)
_PLACE_KEEPING: tuple[str, ...] = ("float", "long", "int", "double", "half", "bool", "view", "reshape", "contiguous")
_PLACE_KEEPING += ("unsqueeze", "squeeze", "flatten", "t", "clone", "detach", "type")
# (Indexing, `split` and the other view ops are not watched: a view's `_base` is the tensor it views, which
# `copies.host_born` reads. `__getitem__` must not be: see `_SLOT_WRAPPERS`.)
_KEEPS_PLACE = frozenset(getattr(torch.Tensor, name) for name in _PLACE_KEEPING)
# Python's operators on tensors, whose result is where their tensors are: host memory when every tensor they take is
# (`i + block_size`, `(step + 1) % n`, `i < n`, over a host tensor of indices), else the device's. With the methods
# that a function mode is handed for some of them (`a + b` reaches it as `Tensor.add`), so both ways of watching
# follow the same calls (`test_every_operator_reaches_a_function_mode_as_a_followed_call`)
_COMPUTING: tuple[str, ...] = tuple(
    f"__{name}__"
    for name in (
        *("add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "floordiv", "rfloordiv", "mod"),
        *("rmod", "pow", "rpow", "neg", "pos", "abs", "invert", "and", "rand", "or", "ror", "xor", "rxor"),
        *("lshift", "rlshift", "rshift", "rrshift", "lt", "le", "gt", "ge", "eq", "ne"),
    )
)
_COMPUTING += ("add", "sub", "mul", "div", "remainder", "pow", "neg", "positive", "abs", "bitwise_and", "bitwise_or")
_COMPUTING += ("bitwise_xor", "lt", "le", "gt", "ge", "eq", "ne")
# Reductions and elementwise math a loop applies to its host bookkeeping (`episode_returns.mean().item()`,
# `if done.any():`): where their tensors are, as the operators' results
_COMPUTING += ("sum", "mean", "max", "min", "amax", "amin", "argmax", "argmin", "prod", "all", "any")
_COMPUTING += ("count_nonzero", "cumsum", "exp", "log", "sqrt", "floor", "ceil", "round", "sign", "clamp", "clip")
_COMPUTING += ("std", "var")
# The elementwise choices and logic of a loop's bookkeeping (`torch.where(done, 0.0, ret)`, `a.maximum(b)`,
# `terminated.logical_or(truncated)`), and what it does to pick, order, fill and reshape it: a replay buffer's
# `priorities.gather(0, idx)`, `scores.topk(k)`, `returns.masked_fill(done, 0.0)`, `lengths.argsort()`,
# `ret.repeat(n)`, `stats.lerp(batch, 0.01)`, `var.clamp_min(eps).rsqrt()`, `gamma.cumprod(0)`
_COMPUTING += ("where", "maximum", "minimum", "logical_and", "logical_or", "logical_xor", "logical_not")
_COMPUTING += ("gather", "index_select", "take_along_dim", "take", "sort", "argsort", "topk", "kthvalue", "median")
_COMPUTING += ("masked_fill", "index_fill", "scatter", "scatter_add", "index_add", "repeat", "tile", "flip", "roll")
_COMPUTING += ("lerp", "clamp_min", "clamp_max", "square", "rsqrt", "reciprocal", "cumprod", "diff", "nan_to_num")
_COMPUTING += ("log1p", "expm1", "trunc", "fmod", "isnan", "isinf", "isfinite", "nansum", "nanmean", "type_as")
# ... and draws from it (`torch.multinomial(priorities, n)`), with the all-true test a distribution validates with
_COMPUTING += ("multinomial", "bernoulli", "_is_all_true", "_is_any_true")
_COMPUTING += ("index_put", "cummax", "cummin", "logsumexp", "isclose")
# Their forms in `torch` (`torch.sum(x)`, `torch.clamp(x, 0, 1)`, `torch.where(done, 0.0, ret)`, `torch.gather`): their
# results where their tensors are, as the methods'
_COMPUTING_FUNCTIONS: tuple[str, ...] = tuple(
    name for name in _COMPUTING if not name.startswith("__") and callable(getattr(torch, name, None))
)
# Functions with no method of the name (a sum tree's `torch.searchsorted(cumulative, draws)`), and the function forms
# of the place-keeping methods (`torch.flatten(x)`: a copy, not a view, of a tensor that is not contiguous)
_COMPUTING_FUNCTIONS += ("searchsorted", "bucketize", "isin", "clone", "flatten", "reshape", "squeeze", "unsqueeze")
_COMPUTING_FUNCTIONS += ("std_mean", "var_mean")
_COMPUTES = frozenset(getattr(torch.Tensor, name) for name in _COMPUTING)
_COMPUTES |= frozenset(getattr(torch, name) for name in _COMPUTING_FUNCTIONS)
# Of those, the ones whose C++ warns in ordinary use (`std()`/`var()` of one element: no degrees of freedom left): run
# on the caller's line (`watched.as_caller`), so the warning is the loop's, not tripwire's
_WARNING = frozenset({"std", "var", "std_mean", "var_mean"})
# torch's own functions, for identity checks that must not meet the stand-ins put in their place
_TO, _COPY, _STACK, _CAT, _NORMAL = torch.Tensor.to, torch.Tensor.copy_, torch.stack, torch.cat, torch.normal
_NEW_TENSOR = torch.Tensor.new_tensor  # `t.new_tensor(data)`: built where `t` is, or where its `device=` says
# Where the watched functions live, for the stand-ins that replace them while a counter is active (`use_patches`)
_WATCHED_METHODS: tuple[str, ...] = (
    *METHOD_KINDS,
    "to",
    "copy_",
    "new_tensor",
    *NEW_LIKE,
    *_PLACE_KEEPING,
    *_COMPUTING,
)
_WATCHED_FUNCTIONS: tuple[str, ...] = ("is_nonzero", *_HOST_BUILDER_NAMES, *LIKE, *_COMPUTING_FUNCTIONS)
_CANONICAL = {("Tensor", name): getattr(torch.Tensor, name) for name in _WATCHED_METHODS}
# Only methods whose slot on `torch.Tensor` is CPython's generic one (the base's attribute is a method or the class's
# own function) may be watched: replacing and deleting a name whose base attribute is a slot wrapper
# (`TensorBase.__getitem__`) leaves the class a slot it never had (a sequence slot: `torch.tensor([t0, t1])` then
# calls `len()` of a 0-d tensor), for the rest of the process.
_SLOT_WRAPPERS = {
    name for name in _WATCHED_METHODS if isinstance(vars(torch._C.TensorBase).get(name), type(object.__init__))
}
assert not _SLOT_WRAPPERS, f"watching {sorted(_SLOT_WRAPPERS)} would change torch.Tensor's type slots"
_CANONICAL |= {("torch", name): getattr(torch, name) for name in _WATCHED_FUNCTIONS}
# Only torch's builtins may be watched in `torch`: dynamo guards a Python function it inlines by its `__dict__`
# (`torch.broadcast_tensors`, written in Python), which a stand-in does not carry, and a loop compiled under a
# recording then fails ("Guard failed on the same frame it was created", LeanRL's `Normal` under inductor)
_PYTHON_FUNCTIONS = {name for name in _WATCHED_FUNCTIONS if not isinstance(getattr(torch, name), BuiltinFunctionType)}
assert not _PYTHON_FUNCTIONS, f"watching {sorted(_PYTHON_FUNCTIONS)} in torch would fail dynamo's guards on them"
# Every function the explicit mode does more with than call it (outside torch.compile); others pass straight through
_WATCHED = frozenset(_CANONICAL.values())
# Place-keeping methods that are nothing else: `watched_call` only marks their results (`_mark_kept`)
_ONLY_KEEPS_PLACE = _KEEPS_PLACE - frozenset(_SIMPLE_KINDS) - frozenset(_BUILDERS) - _HOST_BUILDERS - {_TO, _COPY}
assert not _COMPUTES & (_KEEPS_PLACE | frozenset(_SIMPLE_KINDS) | {_TO, _COPY}), "an operator watched twice"
# Explicit syncs are seen by stand-ins on the watched functions alone (True), or by a function mode that every torch
# call goes through (False: the earlier design, kept as a switch for tests that compare the two call by call)
use_patches = True
_LOCAL = sync._LOCAL
_HOST_COPY_KINDS = frozenset({kinds.CPU, kinds.TO_CPU, kinds.TO_CPU_NONBLOCKING, kinds.COPY_TO_CPU})
_HOST_COPY_KINDS |= {kinds.COPY_TO_CPU_NONBLOCKING}
_routed_dunders: frozenset[str] | None = None


class ExplicitSyncMode(TorchFunctionMode):
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
            return func(*args, **kwargs)  # pass-through
        if func not in _WATCHED:  # nearly every call: nothing to count or mark
            return func(*args, **kwargs)  # pass-through
        return watched_call(func, func, args, kwargs)  # pass-through


def watched_call(func: Any, call: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """One call of the watched function `func` (run as `call`) on a counting thread, from the function mode or a
    stand-in (`tripwire.sync.watched`), either one frame below the code that made it: counted if it syncs, else run,
    and its result marked when it is a tensor built in host memory. The call runs on the maker's line
    (`watched.as_caller`), so what torch warns of there is the loop's."""
    run = as_caller(sys._getframe(2))  # 2 frames up: past the mode or stand-in
    kind = _SIMPLE_KINDS.get(func)
    if kind is None:
        if func is _TO:
            kind = to_kind(args, kwargs)
        elif func is _COPY:  # classified here, from the user's line: its `aten::copy_` is not counted again
            kind = copy_kind(args, kwargs)
            result = call_counted(kind, run, (call, *args), kwargs)  # pass-through
            if kind in _HOST_COPY_KINDS:
                note_host_copy(args[0])
            return result
        elif func is _NEW_TENSOR:
            return _new_tensor(call, run, args, kwargs)
        elif func in _BUILDERS:
            data = builder_data(args, kwargs)
            if isinstance(data, torch.Tensor) and type(data) in PLAIN:  # a subclass's place is its own to say
                return _tensor_of_a_tensor(func, call, run, data, args, kwargs)
            kind = tensor_kind(args, kwargs, _BUILDERS[func])
            if kind is not None:
                # Not suppressed: torch reads its data's tensors one scalar at a time (`torch.tensor(kl_values,
                # device=...)` of 0-d tensors, skrl's KL-adaptive scheduler), each a read of its own that the
                # stand-ins of the conversions count as the loop's (none when the tensor is host-built), then
                # uploads what it read
                sync.deliver(kind)
                return run(call, *args, **kwargs)  # pass-through
        if kind is None:
            result = run(call, *args, **kwargs)  # pass-through
            if func in _COMPUTES:  # an operator or a reduction: of host tensors alone
                mark_computed(args, kwargs, result)
            elif _host_built(func, args, kwargs, result):
                if made_by_user(2):  # 2 frames up: past the mode or stand-in
                    mark_host_memory(result)
                else:  # torch's own (an optimizer's step counter): its reads, not its derived tensors, followed
                    mark_host_born(result)
            return result
    elif _host_born and args and host_born(args[0]):  # a read of host memory: on a GPU run too, no wait
        kind = None
    result = call_counted(kind, run, (call, *args), kwargs)  # pass-through
    if kind in _HOST_COPY_KINDS:
        return copied_to_host(args[0] if args else None, result)
    return result


def copied_to_host(source: object, result: object) -> object:
    """The result of a counted copy to the host (a CPU run): what a `torch.save` of it writes is host memory
    (`copies.note_host_copy`). Stored back by the user's statement under the name its receiver was read from
    (`returns = returns.cpu()`, `spelling.rebinds`), it is host memory for what follows: on a CPU run the copy is the
    device tensor itself, and the loop's name for it now means the copy, whose reads wait for nothing on a GPU run
    (ElegantRL's evaluator reads `returns` element by element after that line) and whose move is an upload. A copy
    passed straight to a call is host memory inside that call (`copies.lend`); one kept under another local name is
    host memory where its function reads it by that name (`copies.keep`): the device tensor it is on this run may
    still be read by its own. On an accelerator the copy is a CPU tensor of its own, and marked wherever it goes: its
    reads were counted on a GPU run unless chained to the copy (ElegantRL's evaluator would have counted 384 there
    that its CPU run did not).

    What is given back is the copy: on a CPU run whose copy the user's line made and torch gave back as `source`
    itself, a tensor of its own where `source` allows one (`host_alias`), marked as host memory, as on a GPU run;
    the rules above are for a copy that cannot be one."""
    if not isinstance(result, torch.Tensor) or type(result) not in PLAIN:  # a subclass is never read
        return result
    if accelerator_in_use():  # a GPU run's copy is a tensor of its own in CPU memory, whatever name holds it
        if type_of(unseen(PLACE, result)) == "cpu":
            mark_host_memory(result)
        return result
    frame = sync.user_call_frame(sys._getframe(1))
    if frame is None:  # torch's own code copied (`Module.cpu()`'s buffers, `torch.save`): given back as torch gives it
        note_host_copy(result)
        return result
    copy = host_alias(source) if result is source else result if _on_host(result) else None
    if copy is not None:  # a tensor of its own: host memory wherever the loop takes it, as a GPU run's copy
        note_host_copy(copy, frame)
        if sync.read_straight_after(frame):  # `x.cpu().numpy()`: read at once, nothing computed of it to follow
            mark_host_born(copy)
        else:
            mark_host_memory(copy)
        return copy
    note_host_copy(result, frame)
    if rebinds(frame):
        mark_host_memory(result)
    elif (lines := passes_on(frame)) is not None:
        _follow_place_keeping()  # the callee's place-keeping results of it are host memory too
        lend(result, frame, lines)
    elif (how := keeps(frame)) is not None:
        keeper = frame.f_back if frame.f_code.co_name in sync.COMPREHENSIONS else frame  # Python 3.11's own frame
        if keeper is not None:
            _follow_place_keeping()  # `cpus[i]`, `cpus[i].long()`: host memory too
            keep(result, keeper, how)
    return result


HOST_COPIES_VARIABLE = "TRIPWIRE_HOST_COPIES"  # `same`: a CPU run's copy is the tensor torch gives back (`host_alias`)
_same_copies = False  # whether it said `same` as the first counter started (`read_settings`), not read at every copy


def read_settings() -> None:
    """Read what the environment asks of the watching, as the first counter starts (`HOST_COPIES_VARIABLE`)."""
    global _same_copies
    _same_copies = os.environ.get(HOST_COPIES_VARIABLE) == "same"


_DETACH: Any = vars(torch._C.TensorBase)["detach"]
_DISPATCH_MODES = torch._C._len_torch_dispatch_stack
_MODES_ON = torch._C._is_torch_function_mode_enabled
_FUNCTORCH_WRAPPED: Callable[[torch.Tensor], bool] = torch._C._functorch.is_functorch_wrapped_tensor


def host_alias(tensor: object) -> torch.Tensor | None:
    """A CPU run's copy to the host of `tensor`, which torch gives back as `tensor` itself: a tensor of its own over
    the same memory (`tensor.detach()`, sharing its storage and version counter), which tripwire marks as host memory
    without marking the device tensor it stands for, as a GPU run's copy is an object of its own. None where such a
    tensor would not behave as `tensor` does for the loop: a subclass or a `Parameter`, one that requires a gradient
    or holds one (its autograd history and `.grad` are its own), one with Python attributes, a sparse or other
    non-strided, nested or quantized tensor, a `torch.func` transform's tensor, an inference tensor or a call inside
    `torch.inference_mode` (an in-place write to the new tensor outside it would raise), or while a dispatch mode
    would see the extra op. `TRIPWIRE_HOST_COPIES=same` in the environment when the counter starts turns it off: every
    copy is the tensor torch gives back, followed by the names the loop's lines spell, for a loop that needs
    `x.cpu() is x`."""
    if type(tensor) is not torch.Tensor or tensor.__dict__ or _DISPATCH_MODES() or _same_copies:
        return None
    if _MODES_ON():  # a loop's function mode sees none of these reads
        if not unseen(_aliasable, tensor) or torch.is_inference_mode_enabled():
            return None
        alias: torch.Tensor = unseen(_DETACH, tensor)
        return alias
    if not _aliasable(tensor) or torch.is_inference_mode_enabled():  # `unseen` written out: every host copy asks
        return None
    return _DETACH(tensor)  # type: ignore[no-any-return]


def _aliasable(tensor: torch.Tensor) -> bool:
    return (
        tensor.layout is torch.strided
        and not tensor.is_nested
        and not tensor.is_quantized
        and not tensor.requires_grad
        and tensor.grad is None
        and not _IS_INFERENCE(tensor)
        and not _FUNCTORCH_WRAPPED(tensor)  # `torch.func`'s levels: its gradients are tracked below the wrapper
    )


def _new_tensor(call: Any, run: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`t.new_tensor(data)`: a tensor of `data` built where `t` is (or where `device=` says). Into device memory it is
    an upload of host data that blocks the host (`tensor_to_device`, as `torch.tensor(data, device=...)`), unless
    `data` is a device tensor already; into host memory it is a host build, marked (torch's own `nn.init.trunc_normal_`
    reads its bounds with `tensor.new_tensor(a, device="cpu").item()`, no wait on a GPU). On a CPU run the place is
    `t`'s host memory or not (`copies.in_host_memory`: a `t` built before the counter is taken for the device's), or
    the `device=` as the call spells it (`_spelled_host`). Not suppressed, as `torch.tensor`'s upload: its data's
    device tensors are read one scalar at a time."""
    source = args[0] if args else None
    device = kwargs.get("device")
    data = args[1] if len(args) > 1 else kwargs.get("data")
    data_in_host = not isinstance(data, torch.Tensor) or in_host_memory(data)  # as both runs hold it
    if accelerator_in_use():
        place = _device_type(device) if device is not None else getattr(source, "device", torch.device("cpu")).type
        on_host = place in (None, "cpu")
        onto_device = not on_host and place != "meta"
        from_device = isinstance(data, torch.Tensor) and data.device.type not in ("cpu", "meta")
    else:
        if device is None:
            on_host = isinstance(source, torch.Tensor) and in_host_memory(source)
        else:
            on_host = _spelled_host(_NEW_TENSOR, device)
        onto_device = not on_host and (device is None or _device_type(device) != "meta")
        from_device = not data_in_host
    if onto_device and not from_device:
        sync.deliver(kinds.TENSOR_TO_DEVICE)
    result = run(call, *args, **kwargs)  # pass-through
    if on_host and _on_host(result) and data_in_host:
        if made_by_user(3):  # past this, `watched_call` and the mode or stand-in
            mark_host_memory(result)
        else:
            mark_host_born(result)
    return result


def _tensor_of_a_tensor(
    func: Any, call: Any, run: Callable[..., Any], data: torch.Tensor, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """`torch.as_tensor(t, device=...)`, `torch.tensor(t, ...)`, `torch.asarray(t, ...)` of a tensor `t`: torch moves
    it with a blocking `t.to(device)` of its own C++, which no stand-in sees. From host memory onto a device it is the
    upload `tensor_to_device`; from a device to the host the download `to_cpu`; to where `t` is, or with no `device=`
    and no default device, nothing moves. On an accelerator the tensors say where they are; on a CPU run, whether `t`
    was built in host memory (`copies.host_born`, as `.to()` reads it) and whether the call spells the host
    (`_spelled_host`; a default device is the device a GPU run sets there, as for host data). What comes back is where
    it landed: an upload's result (on a CPU run, `t` itself) is device memory from then on, a download's is a counted
    copy to the host, and a copy of host memory made on the host is host memory."""
    given = kwargs.get("device")
    # with none given, a default device's handler adds its own to the call: `as_tensor` is a factory to it
    device = given if given is not None else default_device()
    target = _device_type(device) if device is not None else None
    if accelerator_in_use():
        source = unseen(PLACE, data).type
        from_host, from_device = source == "cpu", source not in ("cpu", "meta")
        onto_host, onto_device = target == "cpu", target not in (None, "cpu", "meta")
    else:
        # as `.to()` reads it: a counted copy to the host is `t` itself here, the device tensor given either place
        from_host = host_born(data)
        from_device = not from_host
        onto_host = given is not None and _spelled_host(func, device)
        onto_device = target not in (None, "meta") and not onto_host
    kind = kinds.TENSOR_TO_DEVICE if onto_device and from_host else kinds.TO_CPU if onto_host and from_device else None
    result = call_counted(kind, run, (call, *args), kwargs)  # pass-through
    if kind == kinds.TO_CPU:
        return copied_to_host(data, result)  # as `.cpu()`'s: on a CPU run, possibly `t` itself
    if kind == kinds.TENSOR_TO_DEVICE:
        if result is data:
            forget_host_born(result)  # a CPU run's `t` itself: device memory from here on
    elif result is not data and _on_host(result) and in_host_memory(data):  # a copy of host memory, on the host
        if made_by_user(3):  # past this, `watched_call` and the mode or stand-in
            mark_host_memory(result)
        else:
            mark_host_born(result)
    return result


def _mark_kept(args: tuple[Any, ...], _kwargs: dict[str, Any], result: object) -> None:
    """Mark a place-keeping method's result when it is host-built (`_kept_on_host`): the keeping stand-ins' step."""
    if _kept_on_host(result, args[0]):
        mark_host_memory(result)


def mark_host_results(result: object) -> None:
    """Mark an op's results (a tensor, or each of a tuple's: torch's named tuples, `torch.return_types.max`) that are
    plain CPU tensors, for a caller that knows the op computed them from host memory alone (`mark_computed`;
    `tripwire.sync.implicit`: an index of a host-built tensor): host memory on a GPU run too."""
    for part in result if isinstance(result, tuple) else (result,):
        if _on_host(part):
            mark_host_memory(part)


def mark_computed(args: tuple[Any, ...], kwargs: dict[str, Any], result: object) -> None:
    """Mark the results of an op every tensor of which is host-built (a device tensor among them puts the result on
    the device, a 0-d host tensor with it too), each one a CPU tensor: an operator's, a reduction's (two along a
    dimension: `values, indices = scores.max(dim=0)`), a data-dependent op's (`tripwire.sync.implicit`). Both
    watching ways' step."""
    if args and all_host_born((*args, *kwargs.values()) if kwargs else args):
        mark_host_results(result)


# Installations whose place-keeping stand-ins wait for the first host-built tensor (`mark_host_memory`). Until a
# tensor is marked no input of a place-keeping method can be host-built, so those stand-ins would only call through, a
# Python frame each (SB3's PPO builds none: docs/measurements.md#why-the-code-is-as-it-is).
_WAITING: list[Installation] = []
_WAITING_LOCK = threading.Lock()


def mark_host_memory(tensor: torch.Tensor) -> None:
    """`mark_host_born`, first putting the waiting place-keeping stand-ins in place: from here on a place-keeping
    method's result of this tensor, or of one derived from it, is marked too."""
    _follow_place_keeping()
    mark_host_born(tensor)


def _follow_place_keeping() -> None:
    """Put the waiting place-keeping stand-ins in place: a tensor is about to be host memory."""
    if _WAITING:
        with _WAITING_LOCK:
            for installation in _WAITING:
                _put_keeping_in_place(installation)
            _WAITING.clear()


def _put_keeping_in_place(installation: Installation) -> None:
    """Patch the installation's waiting place-keeping stand-ins onto `torch.Tensor` (under `_WAITING_LOCK`)."""
    for name, replacement in installation.keeping:
        patch(installation, torch.Tensor, name, replacement)
    installation.keeping.clear()


def _kept_on_host(result: object, source: object) -> TypeGuard[torch.Tensor]:
    """Whether a place-keeping method's result is host-built: its input is, and it is a CPU tensor."""
    return host_born(source) and _on_host(result)


def _on_host(result: object) -> TypeGuard[torch.Tensor]:
    return type(result) in PLAIN and type_of(unseen(PLACE, result)) == "cpu"


def _host_built(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], result: object) -> bool:
    """Whether a call built a tensor in host memory, there on a GPU run too: a host builder given no `device=`
    outside a default device (`torch.device(...)` as a context, `torch.set_default_device`), or one whose `device=`
    spells the host (`device="cpu"`, `device=self.cpu_device`; in torch's own code, a device string: Adam's
    `torch.tensor(0.0, device="cpu")` step counter); not `torch.tensor`/`as_tensor` of a tensor (a copy of it, or
    the tensor itself, where it is), and `torch.stack`/`cat` only of host tensors. Or a place-keeping method of a
    host-built tensor. (An operator's results: `mark_computed`.) The same tensors are marked on a CPU run and on a
    GPU run (`copies.host_born`)."""
    if func in _HOST_BUILDERS:
        if not _on_host(result) or default_device() is not None:
            return False
        device = kwargs.get("device")
        if device is not None and not _spelled_host(func, device):
            return False
        if func is _STACK or func is _CAT:
            parts = args[0] if args else kwargs.get("tensors", ())
            return bool(parts) and all(host_born(part) for part in parts)
        if func is _NORMAL and (given := [x for x in (*args, *kwargs.values()) if isinstance(x, torch.Tensor)]):
            return all(host_born(tensor) for tensor in given)  # `normal(mean, std)` of tensors: where they are
        if func in _BUILDERS:
            data = builder_data(args, kwargs)
            return not (isinstance(data, torch.Tensor) or (type(data) in (list, tuple) and _holds_tensor(data)))
        return True
    if func in _LIKE:  # `torch.zeros_like(x)`, `x.new_zeros(n)`: where `x` is, or where its `device=` says
        if not _on_host(result):
            return False
        device = kwargs.get("device")
        return bool(args) and host_born(args[0]) if device is None else _spelled_host(func, device)
    # a place-keeping method, or a `.to` that left a host tensor marked (a dtype's; one to a device unmarks it first)
    return (func in _KEEPS_PLACE or func is _TO) and bool(args) and _kept_on_host(result, args[0])


def _holds_tensor(data: Any) -> bool:
    return any(isinstance(item, torch.Tensor) for item in data)


def _spelled_host(func: Any, device: object) -> bool:
    """Whether a builder's `device=` is the host by what the call says, not by what it holds on this run (on a CPU
    run `device=self.device` holds the host too): the user's line read (`copies.spelling`), and in torch's own code
    a device string, which torch writes only for a place it means (4 frames up: the call's maker, past this, the
    classifier, `watched_call` and the mode or stand-in)."""
    if _device_type(device) != "cpu":
        return False
    if made_by_user(4):
        return spelling(getattr(func, "__name__", "")).target_is_host
    return isinstance(device, str)


# The ids of every stand-in put in `torch` in this process, for `stand_in_guard` (an id may outlive its stand-in and
# name another object: that guard checks the watched name first)
_STAND_IN_IDS: set[int] = set()


def stand_in_guard(source: str, object_id: int) -> str:
    """`torch.NAME` when a failed identity guard on `source` (`G['torch'].cat`) compared it with torch's own function
    or one of tripwire's stand-ins for a watched function: the guard failed because a stand-in stood there (or had),
    which is tripwire's doing, not the loop's. Else ""."""
    name = source.rpartition(".")[2]
    if name not in _WATCHED_FUNCTIONS:
        return ""
    if object_id == id(_CANONICAL[("torch", name)]) or object_id in _STAND_IN_IDS:
        return f"torch.{name}"
    return ""


def build_torch_tables() -> None:
    """Have torch build, before any stand-in stands in `torch`, its tables of its own functions that it builds on first
    use from what `torch` holds then and keeps for the process: `torch.utils._device`'s factory functions (what
    `with torch.device(...)` and `torch.set_default_device` give a device to), `torch.overrides`' three, and dynamo's
    (`tripwire.sync.dynamo` builds those as dynamo is imported). Built while a stand-in stood there, a table held the
    stand-in, not torch's own function, which torch hands on: `torch.zeros` inside `with torch.device("cuda")` gave a
    CPU tensor, during the recording and for the rest of the process. About 10 ms, once.

    `torch.overrides` wraps each of its three in `catch_warnings`, which clears every record of the loop's warnings
    shown once per line; one wraps it outside its table's cache, so that it ran at every counter's start and the
    loop's warning showed again after. That one is called unwrapped, with the warning its wrapper ignores ignored as
    `tripwire.common.quiet` does it; the others call theirs on their first call alone, as torch's own uses do."""
    import torch.utils._device

    torch.utils._device._device_constructors()
    with ignoring(".*is deprecated, please use", UserWarning, "torch"):
        for build in (
            torch.overrides.get_ignored_functions,
            torch.overrides.get_testing_overrides,
            torch.overrides.get_overridable_functions,
        ):
            if not hasattr(build, "cache_info"):  # the wrapper outside the cache
                build = getattr(build, "__wrapped__", build)
            build()


def install_stand_ins(installation: Installation) -> None:
    """Replace every watched method and function by a stand-in (`tripwire.sync.watched`) and track backward passes.
    A method gets a `WatchedMethod`: the class's attribute stays torch's own object, an instance's is the stand-in.
    A call that always syncs and a place-keeping method get a stand-in of their own that does what `watched_call`
    would, without classifying the call on every use. The place-keeping ones are put in place at the first host-built
    tensor of the recording (`mark_host_memory`; none outlives the last one: `copies.forget_tensors`). The functions
    replaced in `torch` are torch's own again while a module is being imported (`hidden_from_imports`)."""
    build_torch_tables()
    handed_over = functools.partial(with_own_functions, installation.namespace)
    for (owner_name, name), key in _CANONICAL.items():
        owner = torch.Tensor if owner_name == "Tensor" else torch
        original = getattr(owner, name)
        if key in _SIMPLE_KINDS:
            scalar = key in _SCALAR_READS
            replacement = counted_stand_in(
                _SIMPLE_KINDS[key],
                original,
                sync.deliver,
                _LOCAL,
                in_counted_backward,
                scalar,
                handed_over,
                host_born,
                receiver=owner is torch,
                copied=copied_to_host if _SIMPLE_KINDS[key] == kinds.CPU else None,
            )
        elif owner is torch and key in _COMPUTES:  # `torch.where(...)`: in place at once (a name in `torch`)
            replacement = keeping_stand_in(
                original, mark_computed, _host_born, _LOCAL, in_counted_backward, handed_over, host_born,
                warns=name in _WARNING, receiver=True,
            )  # fmt: skip
        elif key in _ONLY_KEEPS_PLACE or key in _COMPUTES:
            mark = _mark_kept if key in _ONLY_KEEPS_PLACE else mark_computed
            keeping = keeping_stand_in(
                original, mark, _host_born, _LOCAL, in_counted_backward, handed_over, host_born, warns=name in _WARNING
            )
            installation.keeping.append((name, WatchedMethod(original, keeping)))
            continue
        else:
            replacement = stand_in(
                key, original, watched_call, _LOCAL, in_counted_backward, handed_over, receiver=owner is torch
            )
        if owner is torch.Tensor:
            patch(installation, owner, name, WatchedMethod(original, replacement))
        else:
            replacement = torch_function(replacement, original, name)
            patch(installation, owner, name, replacement)
            installation.namespace.append((name, original, replacement))
            _STAND_IN_IDS.add(id(replacement))
            as_script_builtin(installation, original, replacement)
    with _WAITING_LOCK:  # no tensor is marked yet: the last recording's marks went with it (`forget_tensors`)
        _WAITING.append(installation)
    engine = getattr(torch.autograd, "_engine_run_backward", None)
    if engine is not None:
        patch(installation, torch.autograd, "_engine_run_backward", tracked_backward(engine))
    shield_imports(installation)


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
            for convert in _CONVERSIONS.values():
                convert(value)
        _routed_dunders = frozenset(name for name in _CONVERSIONS if name in probe.seen)
    return _routed_dunders


def patch_unrouted_dunders(installation: Installation) -> None:
    """With the function mode (`use_patches = False`): wrap on `torch.Tensor` the scalar-conversion dunders that do
    not route through function modes in the running torch (in torch 2.14 all of them do)."""
    from tripwire.sync.patches import counted_method

    for name in sorted(set(DUNDER_KINDS) - routed_dunders()):
        method = functools.partialmethod(counted_method, DUNDER_KINDS[name], getattr(torch.Tensor, name))
        patch(installation, torch.Tensor, name, method)


def forget_waiting(installation: Installation) -> None:
    """Drop an installation's place-keeping stand-ins that never went in place (it is being removed)."""
    with _WAITING_LOCK:
        _WAITING[:] = [waiting for waiting in _WAITING if waiting is not installation]
        installation.keeping.clear()


def shield_imports(installation: Installation) -> None:
    """While the installation's stand-ins are in place, every module an import executes sees torch's own functions in
    `torch` (`hidden_from_imports`): a library imported during a recording that keys a table by `torch.stack`, or
    keeps `cat = torch.cat`, keeps torch's own object, as it would without tripwire. Put aside with the other
    patches when the installation is removed."""
    load = getattr(_bootstrap, "_load_unlocked", None)
    if load is None or not installation.namespace:  # an interpreter that loads modules some other way
        return
    patch(installation, _bootstrap, "_load_unlocked", functools.partial(_load_hidden, load, installation.namespace))


_OWN_SHOWN = [0]  # calls running now, on any thread, with torch's own functions in `torch` (imports, handlers)
_OWN_LOCK = threading.Lock()


def _fresh_locks_in_child() -> None:
    """A forked child starts with both locks free (another thread may have held one at the fork: a child importing a
    module would wait forever; `tripwire.sync.state`)."""
    global _WAITING_LOCK, _OWN_LOCK
    _WAITING_LOCK, _OWN_LOCK = threading.Lock(), threading.Lock()


os.register_at_fork(after_in_child=_fresh_locks_in_child)


def with_own_functions(
    namespace: list[tuple[str, Any, Any]], call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """`call(*args, **kwargs)` with torch's own functions in `torch`: an import (`shield_imports`), or a call torch
    hands to a `__torch_function__` handler (`tripwire.sync.watched.reaches_handler`). The outermost such call on any
    thread puts the stand-ins aside and the last to finish puts them back, unless the installation was removed
    meanwhile (`forget_namespace` empties `namespace`). While one runs, a watched function another thread calls
    from `torch` is not counted, as under an import."""
    with _OWN_LOCK:
        _OWN_SHOWN[0] += 1
        if _OWN_SHOWN[0] == 1:
            for name, own, _ in namespace:
                setattr(torch, name, own)
    try:
        return call(*args, **kwargs)  # pass-through
    finally:
        with _OWN_LOCK:
            _OWN_SHOWN[0] -= 1
            if _OWN_SHOWN[0] == 0:
                for name, own, stand_in_for in namespace:
                    if vars(torch).get(name) is own:  # else the import replaced it (a library's wrapper): it stays
                        setattr(torch, name, stand_in_for)


def _load_hidden(load: Callable[[Any], Any], namespace: list[tuple[str, Any, Any]], spec: Any) -> Any:
    """`importlib._bootstrap._load_unlocked`, run with torch's own functions in `torch`."""
    return with_own_functions(namespace, load, (spec,), {})  # pass-through


def forget_namespace(installation: Installation) -> None:
    """Stop putting the installation's stand-ins back in `torch` (it is being removed): an import or handler still
    running on another thread, or one that removed the counter itself, leaves torch's own functions there."""
    with _OWN_LOCK:
        installation.namespace.clear()
