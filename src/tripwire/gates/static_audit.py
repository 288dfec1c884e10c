"""Static sync audit: every sync-capable call in the hot-path source, per function, against a committed budget.

Dynamic counting (`tripwire.sync`) sees only code that runs. A `torch.cuda.synchronize()` behind
`if x.is_cuda:` never runs on a CPU machine, so CPU CI would never see it; this audit reads the source
instead. It walks each file's AST and counts, per function (qualified name as Python spells it,
`Engine.train_pass`, `outer.<locals>.inner`, `<module>` for top-level code), the calls it can name, each under its
kind in `tripwire.sync.kinds` (the counter's own names, so the audit and the budgets read alike):

    item, cpu, tolist, numpy       `.item()`, `.cpu()`, `.tolist()`, `.numpy()` on anything
    cuda_synchronize               `torch.cuda.synchronize()` (`cuda.synchronize()`)
    accelerator_synchronize        `torch.accelerator.synchronize()`
    event_synchronize              `.synchronize()` on a name that says event (`end_event.synchronize()`)
    stream_synchronize             any other `.synchronize()` (a stream)
    wait_stream, wait_event        `.wait_stream(...)`, `.wait_event(...)` (a stream waits; the host does not)
    to_cpu                         `.to(...)` whose target names the host (`"cpu"`, `torch.device("cpu")`, `host_buf`)
    to_device                      any other `.to(...)` that may change device, and `.cuda(...)`, without
                                   `non_blocking=True`

The rule for `.to(...)`: counted unless `non_blocking=True` is passed or every argument is dtype-like
(`torch.float32`, `torch.long`, ..., a name or attribute ending in `dtype`, a `dtype=` or `memory_format=`
keyword). False positives: a `.to(other_tensor)` that only changes dtype, a user-defined `.to()`; false
negatives: syncs behind other names (`float(t)`, `bool(t)`, data-dependent ops), which the dynamic counter
sees when they run. The audit complements the dynamic counts; it does not replace them.

Which modules: `reachable_modules(entries, src)` derives them from the loop's entry modules: every project module
the entries import, directly or through others, at module level or inside a function (a lazy import still runs),
but not under `if TYPE_CHECKING:`. A module that joins the loop is then audited without anyone listing it.

A budget file (JSON, sorted, reviewed in diffs) maps `file -> {"function [kind]": count}`; line numbers are
shown in failures, never compared, so moving code within a function does not churn it. Reading a failure:

    static sync audit over budget in 1 function:
      NEW src/esper/tolaria/engine.py:214 in VectorizedEngine.train_pass [cuda_synchronize] 0 -> 1

The NEW site (a function/kind the budget never had) comes first; `2 -> 3` rows are known sites that grew.
"""

from __future__ import annotations

import ast
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tripwire.common.errors import GoldenFileError, GuardrailFailure, read_golden_json, update_command
from tripwire.common.files import write_text
from tripwire.sync import kinds
from tripwire.sync.spelling import name_of, names_host

FORMAT = "tripwire-static-sync/1"
# methods named as the kind they are
PLAIN_KINDS = {
    name: name for name in (kinds.ITEM, kinds.CPU, kinds.TOLIST, kinds.NUMPY, kinds.WAIT_STREAM, kinds.WAIT_EVENT)
}
DTYPE_NAMES = {
    "float",
    "float16",
    "float32",
    "float64",
    "bfloat16",
    "half",
    "double",
    "int",
    "int8",
    "int16",
    "int32",
    "int64",
    "long",
    "short",
    "uint8",
    "bool",
    "complex64",
    "complex128",
}


class StaticSyncExceeded(GuardrailFailure):
    """The hot-path source has more sync-capable calls than its static budget allows."""


@dataclass
class StaticSites:
    """Counts per `file -> "function [kind]"`, with the lines each was seen on (for display only)."""

    counts: dict[str, Counter[str]] = field(default_factory=dict)
    lines: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    texts: dict[str, dict[str, Counter[str]]] = field(default_factory=dict)  # each call's stripped source line

    def add(self, file: str, key: str, line: int, text: str = "") -> None:
        self.counts.setdefault(file, Counter())[key] += 1
        self.lines.setdefault(file, {}).setdefault(key, []).append(line)
        self.texts.setdefault(file, {}).setdefault(key, Counter())[text] += 1

    def total(self) -> int:
        return sum(sum(c.values()) for c in self.counts.values())

    def functions(self) -> int:
        return len({(file, key.rsplit(" [", 1)[0]) for file, keys in self.counts.items() for key in keys})


def _is_dtype_like(node: ast.expr) -> bool:
    """`torch.float32`, `torch.long`, `x.dtype`, `dtype`, `param_dtype`: an argument that is a dtype."""
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return name in DTYPE_NAMES or name.endswith("dtype")


def call_kind(call: ast.Call) -> str | None:
    """The sync kind of a call (`tripwire.sync.kinds`), or None when it cannot sync under the rules above."""
    if not isinstance(call.func, ast.Attribute):
        return None
    name = call.func.attr
    if name in PLAIN_KINDS:
        return PLAIN_KINDS[name]
    if name == "synchronize":
        return _synchronize_kind(call.func.value)
    if name not in {"to", "cuda"}:
        return None
    keywords = {kw.arg: kw.value for kw in call.keywords if kw.arg}
    non_blocking = keywords.get("non_blocking")
    if isinstance(non_blocking, ast.Constant) and non_blocking.value is True:
        return None
    if name == "cuda":
        return kinds.TO_DEVICE
    targets = [arg for arg in call.args if not _is_dtype_like(arg)]
    if "device" in keywords:
        targets.append(keywords["device"])
    if not targets:
        return None
    return kinds.TO_CPU if any(names_host(target) for target in targets) else kinds.TO_DEVICE


def _synchronize_kind(receiver: ast.expr) -> str:
    """Which synchronize a `.synchronize()` is, by what it is called on."""
    owner = name_of(receiver)
    if owner == "cuda":
        return kinds.CUDA_SYNCHRONIZE
    if owner == "accelerator":
        return kinds.ACCELERATOR_SYNCHRONIZE
    return kinds.EVENT_SYNCHRONIZE if "event" in owner.lower() else kinds.STREAM_SYNCHRONIZE


class _Visitor(ast.NodeVisitor):
    """Walks one module, keeping the qualified name of the enclosing function or class."""

    def __init__(self, file: str, sites: StaticSites, source_lines: Sequence[str] = ()) -> None:
        self.file = file
        self.sites = sites
        self.scope: list[str] = []
        self.source_lines = source_lines

    def _qualname(self) -> str:
        return ".".join(self.scope) if self.scope else "<module>"

    def _enter(self, name: str, node: ast.AST, is_function: bool) -> None:
        self.scope.append(name)
        if is_function:
            self.scope.append("<locals>")
        self.generic_visit(node)
        if is_function:
            self.scope.pop()
        self.scope.pop()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._enter(node.name, node, is_function=False)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._enter(node.name, node, is_function=True)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._enter(node.name, node, is_function=True)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._enter("<lambda>", node, is_function=True)

    def visit_Call(self, node: ast.Call) -> None:
        kind = call_kind(node)
        if kind is not None:
            scope = list(self.scope)
            if scope and scope[-1] == "<locals>":
                scope.pop()
            function = ".".join(scope) if scope else "<module>"
            lines = self.source_lines
            text = lines[node.lineno - 1].strip() if 0 < node.lineno <= len(lines) else ""
            self.sites.add(self.file, f"{function} [{kind}]", node.lineno, text)
        self.generic_visit(node)


def audit(paths: Iterable[str | Path], root: str | Path = ".") -> StaticSites:
    """Count the sync-capable calls of each file in `paths` (named relative to `root` in the result)."""
    sites = StaticSites()
    base = Path(root).resolve()
    for path in paths:
        resolved = Path(base / path).resolve()
        try:
            source = resolved.read_text(encoding="utf-8")
        except OSError as error:
            raise GoldenFileError(f"{path}: cannot read audited module ({error.strerror})") from None
        name = resolved.relative_to(base).as_posix() if resolved.is_relative_to(base) else str(resolved)
        sites.counts.setdefault(name, Counter())
        _Visitor(name, sites, source.splitlines()).visit(ast.parse(source, filename=name))
    return sites


def _module_file(name: str, src: Path) -> Path | None:
    """The source file of module `name` under `src` (a module file or a package's `__init__.py`), if any."""
    base = src.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported_names(tree: ast.Module, module: str, is_package: bool) -> set[str]:
    """Every module name a module's import statements may load (outside `if TYPE_CHECKING:` blocks)."""
    names: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                origin = f"{anchor}.{node.module}" if node.module else anchor
            else:
                origin = node.module or ""
            names.add(origin)
            names.update(f"{origin}.{alias.name}" for alias in node.names)  # `from pkg import submodule`
        stack.extend(ast.iter_child_nodes(node))
    return names


def reachable_modules(
    entries: Sequence[str], src: str | Path, root: str | Path | None = None, *, within: Sequence[str] = ()
) -> tuple[str, ...]:
    """The source files (relative to `root`, default `src`'s parent) of every module under `src` that the `entries`
    reach through imports, the entries and the packages on the way included, sorted. Only modules of the packages
    `within` (default: the entries' own top-level packages) count: the trainer's code, not a harness beside it."""
    packages = set(within) or {entry.split(".")[0] for entry in entries}
    src_path = Path(src).resolve()
    base = Path(root).resolve() if root is not None else src_path.parent
    seen: dict[str, Path] = {}
    queue = list(entries)
    for entry in entries:
        if _module_file(entry, src_path) is None:
            raise GoldenFileError(f"loop entry {entry!r} is not a module under {src_path}: fix the entry's name")
    while queue:
        name = queue.pop()
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__.py and a/b/__init__.py first
            module = ".".join(parts[:depth])
            path = _module_file(module, src_path) if parts[0] in packages else None
            if path is None or module in seen:
                continue
            seen[module] = path
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            queue.extend(_imported_names(tree, module, path.name == "__init__.py"))
    files = {path.relative_to(base).as_posix() if path.is_relative_to(base) else str(path) for path in seen.values()}
    return tuple(sorted(files))


def budget_payload(sites: StaticSites) -> dict[str, Any]:
    """The budget file's JSON form: format tag, per file the sorted `function [kind]` counts, and per file and key
    the source lines of the calls (what tells a moved call from a new one)."""
    return {
        "format": FORMAT,
        "sites": {file: dict(sorted(counts.items())) for file, counts in sorted(sites.counts.items())},
        "lines": {
            file: {key: dict(sorted(texts.items())) for key, texts in sorted(by_key.items())}
            for file, by_key in sorted(sites.texts.items())
            if by_key
        },
    }


def write_budget(path: str | Path, sites: StaticSites) -> Path:
    """Write the static budget (the regenerate path)."""
    path = Path(path)
    write_text(path, json.dumps(budget_payload(sites), indent=2) + "\n")  # whole or not at all
    return path


def load_budget(path: str | Path) -> dict[str, dict[str, int]]:
    """Read a static budget; a missing or malformed file raises `GoldenFileError` naming it."""
    data = read_golden_json(Path(path), f"static sync budget does not exist (record it with `{update_command()}`)")
    sites = data.get("sites") if isinstance(data, Mapping) and data.get("format") == FORMAT else None
    if not isinstance(sites, Mapping) or not all(
        isinstance(entries, Mapping) and all(isinstance(n, int) and n >= 0 for n in entries.values())
        for entries in sites.values()
    ):
        raise GoldenFileError(f'{path}: not a static sync budget (expected "format": "{FORMAT}" and "sites")')
    return {str(file): {str(k): int(n) for k, n in entries.items()} for file, entries in sites.items()}


def load_budget_lines(path: str | Path) -> dict[str, dict[str, dict[str, int]]] | None:
    """The source lines a static budget recorded per file and key, or None when it recorded none (older files)."""
    data = read_golden_json(Path(path), f"static sync budget does not exist (record it with `{update_command()}`)")
    lines = data.get("lines") if isinstance(data, Mapping) else None
    if lines is None:
        return None
    if not isinstance(lines, Mapping) or not all(
        isinstance(keys, Mapping)
        and all(
            isinstance(texts, Mapping) and all(isinstance(n, int) and n >= 0 for n in texts.values())
            for texts in keys.values()
        )
        for keys in lines.values()
    ):
        raise GoldenFileError(f'{path}: "lines" must map files to {{"function [kind]": {{source line: count}}}}')
    return {
        str(file): {str(key): {str(text): int(n) for text, n in texts.items()} for key, texts in keys.items()}
        for file, keys in lines.items()
    }


@dataclass(frozen=True)
class StaticReport:
    """Outcome of `check`: over-budget rows (NEW first), rows that can be tightened, and calls that only moved."""

    over: tuple[str, ...]
    under: tuple[str, ...]
    moved: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.over

    def format(self) -> str:
        if self.ok:
            notes = [f"{len(self.moved)} call(s) moved" if self.moved else ""]
            notes.append(f"{len(self.under)} can be tightened" if self.under else "")
            shown = "; ".join(note for note in notes if note)
            return "static sync audit within budget" + (f" ({shown})" if shown else "")
        head = f"static sync audit over budget in {len(self.over)} function(s):"
        hint = f"  remove the calls, or regenerate with `{update_command()}` (refused under CI) and commit the diff"
        return "\n".join([head, *(f"  {row}" for row in self.over), *(f"  MOVED {row}" for row in self.moved), hint])


def _short(key: str) -> tuple[str, str]:
    """`Engine.run [item]` -> (`run`, `item`): a function is the same function moved into or out of a class."""
    function, kind = key.rsplit(" [", 1)
    return function.rsplit(".", 1)[-1], kind.rstrip("]")


def _moves(
    sites: StaticSites, budget: Mapping[str, Mapping[str, int]], lines: Mapping[str, Mapping[str, Mapping[str, int]]]
) -> tuple[Counter[tuple[str, str, str]], list[str]]:
    """Calls that only moved: a call line a (file, key) has more of than recorded, paired with the same line gone from
    a (file, key) of the same kind in a function of the same name, or in the same file (a renamed function). Returns
    the moved calls per (file, key, line text), to subtract from the counts, and one row per move for the report."""
    added: list[tuple[str, str, str]] = []
    removed: Counter[tuple[str, str, str]] = Counter()
    for file in set(sites.counts) | set(budget):
        for key in set(sites.counts.get(file, {})) | set(budget.get(file, {})):
            now = sites.texts.get(file, {}).get(key, Counter())
            was = Counter(lines.get(file, {}).get(key, {}))
            added += [(file, key, text) for text, n in (now - was).items() for _ in range(n)]
            removed.update({(file, key, text): n for text, n in (was - now).items()})
    moved: Counter[tuple[str, str, str]] = Counter()
    rows = []
    for file, key, text in added:
        origin = next(
            (
                (old_file, old_key)
                for (old_file, old_key, old_text), n in removed.items()
                if n > 0
                and old_text == text
                and _short(old_key)[1] == _short(key)[1]
                # in a function of the same name (moved to another file), or in the same file (renamed)
                and (_short(old_key) == _short(key) or old_file == file)
            ),
            None,
        )
        if origin is None:
            continue
        removed[(origin[0], origin[1], text)] -= 1
        moved[(file, key, text)] += 1
        moved[(origin[0], origin[1], "")] -= 1  # the origin holds one call fewer, by the move, not a gain
        function = key.rsplit(" [", 1)[0]
        rows.append(f"{file} in {function} [{_short(key)[1]}] `{text}` (moved from {origin[0]} in {origin[1]})")
    return moved, sorted(rows)


def check(
    sites: StaticSites,
    budget: Mapping[str, Mapping[str, int]],
    lines: Mapping[str, Mapping[str, Mapping[str, int]]] | None = None,
) -> StaticReport:
    """Compare audited counts with `budget` per file, function and kind (line numbers never compared). With the
    budget's recorded call lines, a call that only moved (the same line, in a function of the same name, in another
    file or place) is reported MOVED and passes; what moved and changed is a change."""
    moved, moved_rows = _moves(sites, budget, lines) if lines is not None else (Counter(), [])
    moved_in: Counter[tuple[str, str]] = Counter()
    for (file, key, _), n in moved.items():
        moved_in[(file, key)] += n
    new_rows: list[str] = []
    grown: list[str] = []
    under: list[str] = []
    for file in sorted(set(sites.counts) | set(budget)):
        counts, allowed = sites.counts.get(file, Counter()), budget.get(file, {})
        if file not in sites.counts:
            if lines is not None and _all_moved_out(file, allowed, lines, moved_rows):
                continue  # the module went away, and every call it had moved elsewhere
            gone = "audited module is gone or no longer reached from the loop's entry (renamed? regenerate the budget)"
            grown.append(f"{file}: {gone}")
            continue
        for key in sorted(set(counts) | set(allowed)):
            now, was = counts.get(key, 0), allowed.get(key, 0)
            function, kind = key.rsplit(" [", 1)
            numbers = ",".join(str(n) for n in sites.lines.get(file, {}).get(key, []))
            row = f"{file}:{numbers} in {function} [{kind} {was} -> {now}"
            if now - max(moved_in[(file, key)], 0) > was:
                (new_rows if key not in allowed else grown).append(("NEW " if key not in allowed else "") + row)
            elif now - min(moved_in[(file, key)], 0) < was:  # fewer calls, not counting those that moved out
                under.append(row)
    return StaticReport(tuple(new_rows + grown), tuple(under), tuple(moved_rows))


def _all_moved_out(
    file: str, allowed: Mapping[str, int], lines: Mapping[str, Mapping[str, Mapping[str, int]]], moved: list[str]
) -> bool:
    """Whether a module that is gone had no call, or only calls that moved elsewhere."""
    calls = sum(allowed.values())
    return calls == 0 or sum(1 for row in moved if f"(moved from {file} in " in row) == calls


def check_against(
    paths: Sequence[str | Path], budget_path: str | Path, root: str | Path = ".", *, update: bool = False
) -> tuple[StaticSites, StaticReport]:
    """Audit `paths`; write the budget when `update`, else compare and raise `StaticSyncExceeded` when over."""
    sites = audit(paths, root)
    if update:
        write_budget(budget_path, sites)
        return sites, StaticReport((), ())
    report = check(sites, load_budget(budget_path), load_budget_lines(budget_path))
    if not report.ok:
        raise StaticSyncExceeded(report.format())
    return sites, report
