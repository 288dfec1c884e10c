"""What torch.compile did, read from dynamo's structured trace: graph breaks, recompiles, frames, graphs, fallbacks.

Dynamo reports every compilation through `torch._logging.trace_structured` (the stream `TORCH_TRACE` and tlparse
read); a handler on its logger (`torch.__trace`) receives each record as it happens, on the thread that compiles.
`TraceReader` turns the records that matter into `CompileNote`s, one per thing a refactor can change:

- `compile:graph_break`, from a `dynamo_graph_break_reason` artifact: named at the user line that broke the graph,
  its reason the break's type (`Failed to trace builtin operator`);
- `compile:disable`, the same for a call into a `torch.compiler.disable`d function: named at the calling line;
- `compile:recompile`, from `compilation_metrics` with a `recompile_reason`: named at the line whose guard failed
  when dynamo says which (`if n > 3:`), else at the recompiled function's `def` (a resumed function: where it
  resumes), its reason the guard (`n <= 3`, `tensor 'x' dtype mismatch. expected Float, actual Double`);
- `compile:frame`, every `compilation_metrics` (one frame compiled), and `compile:graph`, every
  `dynamo_output_graph` of that compilation (one graph produced), named there too;
- `compile:eager`, `compilation_metrics` with a `fail_type`: the frame runs eagerly; its reason the failure's first
  line.

A reason keeps what names the change and drops what names the machine: compile ids (`0/1: `), the source excerpt
and absolute paths dynamo appends to a guard (`# if n > 3:  # .../f.py:11 in g`), object addresses and the ids an
identity guard compares with and its description of the object (`___check_obj_id(L['self'].mode, <id>)`).

A recompile whose failed guard is tripwire's doing (the identity of `torch.cat` in a function compiled before a
counter put its stand-in there, `tripwire.sync.explicit.stand_in_guard`) is not the loop's: without tripwire it
would not have happened. That compilation's notes are kept out of the loop's counts and said once in the counter's
notes, so a budget of no recompiles in a warmed-up step does not fail on tripwire's account. Functions are
named by their qualified name, read from the source (`Policy.forward`, not `forward`); a resume function dynamo
generates after a break (`torch_dynamo_resume_in_forward_at_17`) is named as the function it resumes. This module
loads no torch: the handler is plain `logging`.
"""

from __future__ import annotations

import ast
import functools
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tripwire.sync.kinds import DISABLE, EAGER, FRAME, GRAPH, GRAPH_BREAK, RECOMPILE

TRACE_LOGGER = "torch.__trace"  # torch._logging._internal.trace_log

_BREAK_AT = re.compile(r"Graph break in user code at (?P<file>.+):(?P<line>\d+)\s*$", re.MULTILINE)
_BREAK_REASON = re.compile(r"Graph Break Reason: (?P<reason>.*?)(?:\n\s*\n\s*User code traceback:|\Z)", re.DOTALL)
_FRAME_LINE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>.+)$', re.MULTILINE)
_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<name>.+)_at_\d+$")
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")
# an identity guard: the id it compares with is an address, and what follows describes the object (torch 2.11: its
# repr, a code object's with its file's absolute path)
_ID_GUARD = re.compile(r"(___check_(?:obj|type)_id\((?P<source>.+?), )(?P<id>\d+)\)(?:, type=<.*>)?")
_GUARD_AT = re.compile(r"  # (?P<path>[^\s#]+):(?P<line>\d+) in \S+(?: \(.*\))?$")
_GENERIC = ("Encountered graph break", "Failed to handle graph break gracefully")


@dataclass(frozen=True)
class CompileNote:
    """One thing dynamo did: its kind, the user line it is named at (absolute file, line), the function there and
    why (empty for frames and graphs)."""

    kind: str
    file: str
    line: int
    function: str
    reason: str = ""


def first_reason(text: str) -> str:
    """The line that names a break or failure: the first non-generic line of dynamo's message, addresses removed."""
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(_GENERIC) and not line.startswith(("Explanation:", "Hint:")):
            return _ADDRESS.sub("", line.rstrip(":"))
    return _ADDRESS.sub("", text.strip().splitlines()[0]) if text.strip() else ""


def _first_guard(text: str) -> str:
    first = text.strip().lstrip("[").strip().splitlines()[0].strip().strip('",')
    return re.sub(r"^\d+/\d+: ", "", first)


def _guard_text(text: str) -> str:
    """The first failed guard without its compile id and what dynamo appends after `  # ` (source, paths)."""
    return _first_guard(text).split("  # ", 1)[0].strip()


def guard_reason(text: str) -> str:
    """The first failed guard of a recompile, without its compile id, dynamo's appended source and paths, and the id
    an identity guard compares with (an address: `___check_obj_id(L['self'].mode, <id>)`)."""
    return _ID_GUARD.sub(r"\1<id>)", _ADDRESS.sub("", _guard_text(text)))


def id_guard(text: str) -> tuple[str, int] | None:
    """The source and id of a recompile's first failed guard when it is an identity guard (`___check_obj_id`), else
    None: `("G['torch'].cat", 1398...)`."""
    found = _ID_GUARD.search(_guard_text(text))
    return (found.group("source"), int(found.group("id"))) if found and "obj_id" in found.group(1) else None


def guard_line(text: str, file: str) -> int | None:
    """The line of `file` whose code installed the failed guard (`if n > 3:`), when dynamo says (it appends a
    shortened `path:line in function` to guards that user code installed), else None."""
    where = _GUARD_AT.search(_first_guard(text))
    if where is None:
        return None
    shortened = where.group("path").replace("\\", "/")
    return int(where.group("line")) if file.replace("\\", "/").endswith(shortened) else None


def graph_break(payload: str, is_user: Callable[[str], bool] = lambda file: True) -> CompileNote | None:
    """The note of a `dynamo_graph_break_reason` artifact, or None when it does not name a line.

    The break is named at the innermost frame of its user traceback that `is_user` accepts (outside torch and
    tripwire, as a sync's call site is): a break inside `torch.nn.utils.clip_grad_norm_` is the user's line that
    called it, and one dynamo meets while it traces a function mode (a `SyncCounter`'s) is named where it is met
    without the mode."""
    where = _BREAK_AT.search(payload)
    if where is None:
        return None
    file, line = where.group("file"), int(where.group("line"))
    head, _, traceback = payload.partition("User code traceback:")
    frames = [
        (m.group("file"), int(m.group("line")), m.group("function"))
        for m in _FRAME_LINE.finditer(traceback.split("Traceback (most recent call last):", 1)[0])
    ]
    if not is_user(file):
        user = [frame for frame in frames if is_user(frame[0])]
        if user:
            file, line = user[-1][0], user[-1][1]
    why = _BREAK_REASON.search(head + "\n\nUser code traceback:")
    reason = first_reason(why.group("reason")) if why else ""
    named = [frame[2] for frame in frames if frame[0] == file and frame[1] == line]
    function = qualname_at(file, line) or (named[-1] if named else "<unknown>")
    if "torch.compiler.disable" in head:
        return CompileNote(DISABLE, file, line, function, "torch.compiler.disable")
    return CompileNote(GRAPH_BREAK, file, line, function, reason)


def frame_notes(metrics: Mapping[str, Any], graphs: int) -> list[CompileNote]:
    """The notes of one frame's compilation (`compilation_metrics`) that produced `graphs` graphs."""
    file = str(metrics.get("co_filename") or "<unknown>")
    line = int(metrics.get("co_firstlineno") or 0)
    name = str(metrics.get("co_name") or "<unknown>")
    resumed = _RESUME.match(name)
    function = qualname_at(file, line) or (resumed.group("name") if resumed else name)
    notes = [CompileNote(FRAME, file, line, function)]
    notes += [CompileNote(GRAPH, file, line, function)] * graphs
    if metrics.get("recompile_reason"):
        reason = str(metrics["recompile_reason"])
        at = guard_line(reason, file) or line  # the line whose guard failed, else the function's `def`
        notes.append(CompileNote(RECOMPILE, file, at, qualname_at(file, at) or function, guard_reason(reason)))
    if metrics.get("fail_type"):
        failure = first_reason(str(metrics.get("fail_reason") or metrics["fail_type"]))
        notes.append(CompileNote(EAGER, file, line, function, failure))
    return notes


@functools.lru_cache(maxsize=256)
def _definitions(file: str) -> tuple[tuple[int, int, str], ...]:
    """Every function of a source file as (first line, last line, qualified name), innermost last."""
    try:
        with open(file, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return ()
    found: list[tuple[int, int, str]] = []
    _walk(tree, "", found)
    return tuple(found)


def _walk(node: ast.AST, prefix: str, found: list[tuple[int, int, str]]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = f"{prefix}{child.name}"
            first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
            found.append((first, child.end_lineno or child.lineno, name))
            _walk(child, f"{name}.<locals>.", found)
        elif isinstance(child, ast.ClassDef):
            _walk(child, f"{prefix}{child.name}.", found)
        else:
            _walk(child, prefix, found)


def qualname_at(file: str, line: int) -> str:
    """The qualified name of the innermost function whose source holds `line` ("" when none or unreadable)."""
    holding = [(first, name) for first, last, name in _definitions(file) if first <= line <= last]
    return max(holding)[1] if holding else ""


class TraceReader(logging.Handler):
    """A handler for dynamo's structured trace: calls `sink` with each `CompileNote`, on the compiling thread.

    A frame's graphs and graph breaks are kept per compile id and delivered with its `compilation_metrics`, which
    closes it; a compilation whose recompile `tripwires` names (a guard that failed on tripwire's own doing: it
    returns what, else "") is not the loop's: its notes are counted in `tripwires_own` instead of delivered."""

    def __init__(
        self,
        sink: Callable[[CompileNote], None],
        is_user: Callable[[str], bool] = lambda file: True,
        tripwires: Callable[[str], str] = lambda reason: "",
    ) -> None:
        super().__init__(logging.DEBUG)
        self.sink = sink
        self.is_user = is_user
        self.tripwires = tripwires
        self.unreadable: list[str] = []  # records this reader failed on: counts would be short, and say so
        # (function, file, line, what of tripwire's) -> compilations of the loop's frames tripwire caused
        self.tripwires_own: dict[tuple[str, str, int, str], int] = {}
        self._graphs: dict[tuple[Any, Any], int] = {}
        self._breaks: dict[tuple[Any, Any], list[CompileNote]] = {}

    def flush(self) -> None:
        """Deliver the graph breaks of compilations that never closed (a compile interrupted by an error)."""
        breaks, self._breaks = self._breaks, {}
        for notes in breaks.values():
            for note in notes:
                self.sink(note)

    def emit(self, record: logging.LogRecord) -> None:
        metadata = getattr(record, "metadata", None)
        if not isinstance(metadata, dict):
            return
        try:
            self._read(metadata, getattr(record, "payload", None))
        except Exception as error:  # an unknown trace format must never break the compile it watches
            self.unreadable.append(f"{sorted(metadata)[:3]}: {type(error).__name__}: {error}")

    def _read(self, metadata: dict[str, Any], payload: Any) -> None:
        compile_id = (metadata.get("frame_id"), metadata.get("frame_compile_id"))
        artifact = metadata.get("artifact")
        if isinstance(artifact, dict) and artifact.get("name") == "dynamo_graph_break_reason":
            note = graph_break(str(payload or ""), self.is_user)
            if note is not None:
                self._breaks.setdefault(compile_id, []).append(note)
        elif "dynamo_output_graph" in metadata:
            self._graphs[compile_id] = self._graphs.get(compile_id, 0) + 1
        elif isinstance(metadata.get("compilation_metrics"), dict):
            metrics = metadata["compilation_metrics"]
            notes = self._breaks.pop(compile_id, []) + frame_notes(metrics, self._graphs.pop(compile_id, 0))
            reason = str(metrics.get("recompile_reason") or "")
            caused = self.tripwires(reason) if reason.strip() else ""
            if caused:
                frame = next(note for note in notes if note.kind == FRAME)
                key = (frame.function, frame.file, frame.line, caused)
                self.tripwires_own[key] = self.tripwires_own.get(key, 0) + 1
                return
            for note in notes:
                self.sink(note)
