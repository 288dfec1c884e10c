"""Every kind of event tripwire counts, in one table: what it means, whether it stalls a GPU, and who sees it.

A sync event, a static audit row and a budget key all name their kind from here (`item`, `to_device`,
`implicit:nonzero`, `compile:graph_break`), so the counter, the static audit, the budgets and the docs speak one
language. This module loads no torch.

Adding a kind
-------------
1. Add one `Kind` row to `_ROWS` (or, for a family named per op, a `Prefix` row to `PREFIXES`), with a constant
   for it below the table. Say in `meaning` what the user's code did, in one line, and in `stalls_gpu` whether on
   an accelerator the host waits for the device there.
2. Deliver it where the call is seen: the counter's hooks (`tripwire.sync.explicit`, `.implicit`, `.patches`),
   `tripwire.sync.copies` for a copy, or `sync_kind(kinds.X)` around code that syncs for a reason of its own (the
   timer). Name it by its constant, never by a string: `tests/tripwire/sync/test_kinds.py` fails on a kind
   string written anywhere else in tripwire.
3. If the source shows the call, teach the static audit's `call_kind` (`tripwire.gates.static_audit`) to name it and
   set the row's `seen_by` to `BOTH`.
4. Regenerate the docs' table (`python -m tripwire.sync.kinds > /tmp/kinds.md` and paste it between the markers in
   docs/tripwire.md); the same test fails while the two differ.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

__all__ = ["KINDS", "PREFIXES", "Kind", "Prefix", "describe", "is_known", "markdown_table", "stalls_gpu"]

COUNTER, STATIC, BOTH = "counter", "static audit", "counter and static audit"


@dataclass(frozen=True)
class Kind:
    """One kind: its name, what the code did, whether it stalls a GPU, and which instrument reports it."""

    name: str
    meaning: str
    stalls_gpu: bool
    seen_by: str = COUNTER


@dataclass(frozen=True)
class Prefix:
    """A family of kinds named per operation (`implicit:nonzero`, `collective:all_reduce`)."""

    prefix: str
    meaning: str
    stalls_gpu: bool
    seen_by: str = COUNTER

    def of(self, name: str) -> str:
        """The kind of this family for one operation."""
        return f"{self.prefix}{name}"

    def holds(self, kind: str) -> bool:
        return kind.startswith(self.prefix)


_ROWS = (
    Kind("item", "`t.item()`: one element read to the host", True, BOTH),
    Kind("cpu", "`t.cpu()`: the tensor copied to the host", True, BOTH),
    Kind("tolist", "`t.tolist()`: the tensor read to a Python list", True, BOTH),
    Kind("numpy", "`t.numpy()`, `np.asarray(t)`: the tensor read to a NumPy array", True, BOTH),
    Kind("bool", "`bool(t)`, `if t:`, `t.is_nonzero()`: a tensor's truth read on the host", True),
    Kind("float", "`float(t)`: one element read as a Python float", True),
    Kind("int", "`int(t)`: one element read as a Python int", True),
    Kind("index", "`operator.index(t)`, `range(t)`, `seq[t]`: one element read as an index", True),
    Kind("complex", "`complex(t)`: one element read as a Python complex", True),
    Kind("format", "printing or formatting a tensor (`print(t)`, `f'{t}'`): its values read to the host", True),
    Kind("contains", "`x in t`: a membership test read on the host", True),
    Kind(
        "to_cpu",
        "`.to('cpu')` (however spelled; and, counter only, `torch.as_tensor(t, device='cpu')`) of accelerator data:"
        " the host waits for the copy",
        True,
        BOTH,
    ),
    Kind("to_cpu_nonblocking", "`.to('cpu', non_blocking=True)`: queued; reading it before a sync is a race", False),
    Kind(
        "copy_to_cpu",
        "`host.copy_(t)`, `host[i] = t`: accelerator data copied into a host buffer; the host waits",
        True,
    ),
    Kind("copy_to_cpu_nonblocking", "`host.copy_(t, non_blocking=True)`: queued, as `to_cpu_nonblocking`", False),
    Kind(
        "to_device",
        "`.to(device)`, `.cuda()`, `module.to(device)` of host memory, blocking (or non-blocking, pageable, over 1"
        " MiB): the upload waits",
        True,
        BOTH,
    ),
    Kind(
        "copy_to_device",
        "`dev.copy_(host)`, `dev[i] = host` of host memory, blocking (or non-blocking, pageable, over 1 MiB): the"
        " upload waits",
        True,
    ),
    Kind(
        "tensor_to_device",
        "`torch.tensor(data, device=...)`, `torch.as_tensor(host_t, device=...)`, `dev.new_tensor(data)`: host data"
        " uploaded while the host waits",
        True,
    ),
    Kind("cuda_synchronize", "`torch.cuda.synchronize()`: the host waits for every stream of the device", True, BOTH),
    Kind("accelerator_synchronize", "`torch.accelerator.synchronize()`: as `cuda_synchronize`", True, BOTH),
    Kind("stream_synchronize", "`stream.synchronize()`: the host waits for one stream", True, BOTH),
    Kind("event_synchronize", "`event.synchronize()`: the host waits for one recorded event", True, BOTH),
    Kind("timer_sync", "a `tripwire.timing.CUDATimer` reading its end event: the host waits for it", True),
    Kind("save", "`torch.save` of accelerator tensors: each storage copied to the host while the host waits", True),
    Kind("load", "`torch.load` onto an accelerator: each storage copied from host memory while the host waits", True),
    Kind(
        "cuda_empty_cache",
        "`torch.cuda.empty_cache()`: the allocator's cached blocks freed, after a wait for the device",
        True,
    ),
    Kind("accelerator_empty_cache", "`torch.accelerator.empty_cache()`: as `cuda_empty_cache`", True),
    Kind("wait_stream", "`s.wait_stream(other)`: the device orders two streams; the host does not wait", False, STATIC),
    Kind("wait_event", "`s.wait_event(event)`: the device waits for an event; the host does not", False, STATIC),
)
KINDS: dict[str, Kind] = {row.name: row for row in _ROWS}

IMPLICIT = Prefix(
    "implicit:",
    "an op whose output size or value depends on data (`nonzero`, a boolean mask, `unique`): the host reads it",
    True,
)
COLLECTIVE = Prefix("collective:", "a `torch.distributed` collective or point-to-point call: every rank waits", True)
COMPILE = Prefix("compile:", "what torch.compile did (not a sync): a graph break, recompile, frame, graph", False)
PREFIXES: dict[str, Prefix] = {family.prefix: family for family in (IMPLICIT, COLLECTIVE, COMPILE)}

ITEM, CPU, TOLIST, NUMPY = "item", "cpu", "tolist", "numpy"
BOOL, FLOAT, INT, INDEX, COMPLEX = "bool", "float", "int", "index", "complex"
FORMAT, CONTAINS = "format", "contains"
TO_CPU, TO_CPU_NONBLOCKING = "to_cpu", "to_cpu_nonblocking"
COPY_TO_CPU, COPY_TO_CPU_NONBLOCKING = "copy_to_cpu", "copy_to_cpu_nonblocking"
TO_DEVICE, COPY_TO_DEVICE, TENSOR_TO_DEVICE = "to_device", "copy_to_device", "tensor_to_device"
CUDA_SYNCHRONIZE, ACCELERATOR_SYNCHRONIZE = "cuda_synchronize", "accelerator_synchronize"
STREAM_SYNCHRONIZE, EVENT_SYNCHRONIZE = "stream_synchronize", "event_synchronize"
TIMER_SYNC, SAVE, LOAD = "timer_sync", "save", "load"
CUDA_EMPTY_CACHE, ACCELERATOR_EMPTY_CACHE = "cuda_empty_cache", "accelerator_empty_cache"
WAIT_STREAM, WAIT_EVENT = "wait_stream", "wait_event"

# what torch.compile did (`tripwire.compile.trace`), named in the `compile:` family
GRAPH_BREAK, DISABLE, RECOMPILE = COMPILE.of("graph_break"), COMPILE.of("disable"), COMPILE.of("recompile")
FRAME, GRAPH, EAGER = COMPILE.of("frame"), COMPILE.of("graph"), COMPILE.of("eager")
COMPILE_KINDS = (GRAPH_BREAK, DISABLE, RECOMPILE, FRAME, GRAPH, EAGER)
# implicit kinds whose name says more than the op's (`index` with a boolean mask, an op missing its size argument;
# `index_put_` with a boolean mask: `t[mask] = values` turns the mask into indices, unless it is a fill; a torch.linalg
# routine reading its result's error codes, whichever op of it the counter met; `histc` reading its input's range,
# `bincount` its input's minimum and maximum; a padding mask's check and conversion to a nested tensor, a
# `TransformerEncoder`'s fast path outside autograd; a 0-d tensor argument an op's kernel reads with `.item()`:
# `masked_fill`'s value, `linspace`'s endpoints)
MASK_INDEX, MASK_PUT, REPEAT_INTERLEAVE, ONE_HOT, LINALG_CHECK = (
    IMPLICIT.of("index(mask)"),
    IMPLICIT.of("index_put(mask)"),
    IMPLICIT.of("repeat_interleave"),
    IMPLICIT.of("one_hot"),
    IMPLICIT.of("linalg_check"),
)
HISTC, BINCOUNT = IMPLICIT.of("histc"), IMPLICIT.of("bincount")
NESTED_MASK_CHECK, NESTED_FROM_MASK = IMPLICIT.of("nested_mask_check"), IMPLICIT.of("nested_from_mask")
SCALAR_ARGUMENT = IMPLICIT.of("scalar_argument")


def _family(kind: str) -> Prefix | None:
    return next((family for family in PREFIXES.values() if family.holds(kind)), None)


def is_known(kind: str) -> bool:
    """Whether `kind` is a row of the table or a member of one of its families."""
    return kind in KINDS or _family(kind) is not None


def stalls_gpu(kind: str) -> bool:
    """Whether the host waits for the accelerator at an event of this kind (False for an unknown kind)."""
    row = KINDS.get(kind)
    if row is not None:
        return row.stalls_gpu
    family = _family(kind)
    return family is not None and family.stalls_gpu


def describe(kind: str) -> str:
    """What an event of this kind means, in one line ("" for an unknown kind)."""
    row = KINDS.get(kind)
    if row is not None:
        return row.meaning
    family = _family(kind)
    return family.meaning if family is not None else ""


def markdown_table() -> str:
    """The table of kinds as docs/tripwire.md shows it (generated: the docs test compares the two)."""
    lines = ["| kind | what the code did | stalls a GPU | reported by |", "|---|---|---|---|"]
    lines += [f"| `{k.name}` | {k.meaning} | {'yes' if k.stalls_gpu else 'no'} | {k.seen_by} |" for k in _ROWS]
    for family in PREFIXES.values():
        name = f"`{family.prefix}<op>`"
        lines.append(f"| {name} | {family.meaning} | {'yes' if family.stalls_gpu else 'no'} | {family.seen_by} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(markdown_table() + "\n")
