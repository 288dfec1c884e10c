"""Sync call sites as records: the budget key of a site, and what identifies one line across edits.

A budget counts syncs per region and remembers the sites it saw by *key*, `file::function [kind]`, never by line
number, so code moving inside a function changes nothing. Within one key, a site's *identity* is its stripped source
line (plus, for a sync torch made on the line's behalf, the torch code that made it): a new `.item()` added to a
function that already syncs is then named at its own line instead of being lumped with the function's old sites,
and a line that only moved is still the same site.

Each site also keeps its *callers*: the project lines that called the function holding it (`SyncEvent.callers`),
identified the same way, by file, function and stripped source line (`caller_identity`), so a helper that syncs
more because someone new calls it is reported at the new call, and a call that only moved is not new. This module
imports no torch.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tripwire.sync import kinds
from tripwire.sync.state import SyncEvent, machinery_via, site_text


def site_key(site: str, function: str, kind: str) -> str:
    """The budget key of a sync: `file::function [kind]` (the line of `site` = `file:line` is dropped)."""
    file = site.rsplit(":", 1)[0] if site.rsplit(":", 1)[-1].isdigit() else site
    return f"{file}::{function} [{kind}]"


def line_identity(text: str, via: str, line: int) -> str:
    """What names one site within its key: its source text (or `line N` when unreadable), and the torch code that
    synced on its behalf (`  <- torch/optim/optimizer.py:_get_value`)."""
    identity = text or f"line {line}"
    return f"{identity}  <- {via}" if via else identity


def stored_via(via: str, kind: str) -> str:
    """A sync's `via` read from a stored result: one naming torch's dispatch machinery reads as none.
    Results recorded while torch wrapped the counter's dispatch mode in `_disable_dynamo` named that wrapper
    (`torch/_compile.py:_disable_dynamo.<locals>.inner`) at every sync counted inside `inference_mode`; the same
    sites recorded now have no `via`, and must match them (`compare` tells sites apart by `via`; a budget does not).
    A compilation event's `via` (its reason) is kept."""
    return "" if via and not kinds.COMPILE.holds(kind) and machinery_via(via) else via


def via_label(kind: str) -> str:
    """What an event's `via` says: the torch code that synced on a line's behalf, or, for a compilation event
    (`compile:...`), why dynamo did what it did."""
    return "reason" if kinds.COMPILE.holds(kind) else "inside torch"


@dataclass(frozen=True, order=True)
class SiteRecord:
    """Syncs counted at one call site: where (`file:line` and function), what kind, on whose behalf, how many."""

    region: str
    site: str
    function: str
    kind: str
    via: str
    text: str
    count: int
    # The project lines that called the site's function, most calls first; None when not recorded (older results).
    callers: tuple[Caller, ...] | None = field(default=None, compare=False)

    @property
    def file(self) -> str:
        return self.site.rsplit(":", 1)[0]

    @property
    def line(self) -> int:
        number = self.site.rsplit(":", 1)[-1]
        return int(number) if number.isdigit() else 0

    @property
    def key(self) -> str:
        return site_key(self.site, self.function, self.kind)

    @property
    def identity(self) -> str:
        return line_identity(self.text, self.via, self.line)

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            "region": self.region,
            "file": self.file,
            "line": self.line,
            "function": self.function,
            "kind": self.kind,
            "via": self.via,
            "text": self.text,
            "count": self.count,
        }
        if self.callers is not None:
            data["callers"] = [caller.to_json() for caller in self.callers]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> SiteRecord:
        callers = data.get("callers")
        return cls(
            str(data["region"]),
            f"{data['file']}:{data['line']}",
            str(data["function"]),
            str(data["kind"]),
            stored_via(str(data.get("via", "")), str(data["kind"])),
            str(data.get("text", "")),
            int(str(data["count"])),
            tuple(Caller.from_json(item) for item in callers) if isinstance(callers, list) else None,
        )


_FRAME = re.compile(r"^(?P<file>.*):(?P<line>\d+) in (?P<function>.*)$")


def caller_identity(file: str, function: str, text: str, line: int) -> str:
    """What names a caller across commits: `file::function `source line`` (`line N` when unreadable), as a line
    identity names a site: moving the call within its function keeps it."""
    return f"{file}::{function} `{text or f'line {line}'}`"


def _function_of(identity: str) -> str:
    """The `file::function` part of a caller identity."""
    return identity.split(" `", 1)[0]


@dataclass(frozen=True)
class Caller:
    """A project line that called the function holding a sync site: where (file, the line numbers it was seen on,
    function), its source line, how many of the site's syncs it led to, and the chains of frames above it (each
    innermost first, `file:line in function`) with their counts, most first."""

    file: str
    lines: tuple[int, ...]
    function: str
    text: str
    count: int
    chains: tuple[tuple[tuple[str, ...], int], ...] = ()

    @property
    def site(self) -> str:
        return f"{self.file}:{','.join(str(line) for line in self.lines)}"

    @property
    def identity(self) -> str:
        return caller_identity(self.file, self.function, self.text, self.lines[0] if self.lines else 0)

    def describe(self) -> str:
        """`file:line in function `source line``."""
        text = f" `{self.text}`" if self.text else ""
        return f"{self.site} in {self.function}{text}"

    def describe_chains(self, shown: int = 2) -> str:
        """` (from a.py:3 in f <- b.py:9 in g)`: the frames above this caller, or "" when none; several chains
        with their counts."""
        chains = [(chain, count) for chain, count in self.chains if chain]
        if not chains:
            return ""
        if len(chains) == 1 and len(self.chains) == 1:
            return f" (from {' <- '.join(chains[0][0])})"
        parts = [f"from {' <- '.join(chain)} ×{count}" for chain, count in chains[:shown]]
        more = f"; {len(chains) - shown} more chains" if len(chains) > shown else ""
        return f" ({'; '.join(parts)}{more})"

    def to_json(self) -> dict[str, object]:
        return {
            "file": self.file,
            "lines": list(self.lines),
            "function": self.function,
            "text": self.text,
            "count": self.count,
            "chains": [{"frames": list(chain), "count": count} for chain, count in self.chains],
        }

    @classmethod
    def from_json(cls, data: object) -> Caller:
        if not isinstance(data, Mapping):
            raise ValueError(f"a caller must be an object, not {data!r}")
        chains = data.get("chains", [])
        return cls(
            str(data["file"]),
            tuple(int(line) for line in data.get("lines", [])),
            str(data["function"]),
            str(data.get("text", "")),
            int(data["count"]),
            tuple((tuple(str(f) for f in chain["frames"]), int(chain["count"])) for chain in chains),
        )


def merge_callers(callers: Iterable[Caller]) -> tuple[Caller, ...]:
    """Callers with one identity merged (line numbers joined, counts and chains summed), most calls first."""
    firsts: dict[str, Caller] = {}
    lines: dict[str, set[int]] = {}
    counts: Counter[str] = Counter()
    chains: dict[str, Counter[tuple[str, ...]]] = {}
    for caller in callers:
        identity = caller.identity
        firsts.setdefault(identity, caller)
        lines.setdefault(identity, set()).update(caller.lines)
        counts[identity] += caller.count
        for chain, count in caller.chains:
            chains.setdefault(identity, Counter())[chain] += count
    merged = [
        Caller(
            first.file,
            tuple(sorted(lines[identity])),
            first.function,
            first.text,
            counts[identity],
            tuple(sorted(chains.get(identity, Counter()).items(), key=lambda item: (-item[1], item[0]))),
        )
        for identity, first in firsts.items()
    ]
    return tuple(sorted(merged, key=lambda caller: (-caller.count, caller.identity)))


def _event_callers(counts: Counter[tuple[tuple[str, ...], str]]) -> tuple[Caller, ...]:
    """Callers of one site from `(SyncEvent.callers, SyncEvent.caller_text)` counts."""
    callers = []
    for (frames, text), count in counts.items():
        if not frames:
            continue
        match = _FRAME.match(frames[0])
        file, line, function = (match["file"], int(match["line"]), match["function"]) if match else (frames[0], 0, "")
        callers.append(Caller(file, (line,), function, text, count, ((tuple(frames[1:]), count),)))
    return merge_callers(callers)


def group_records(events: Iterable[SyncEvent]) -> list[SiteRecord]:
    """`SiteRecord`s of sync events, one per (region, site, function, kind, via), each with its source line and
    callers."""
    counts: dict[tuple[str, str, str, str, str, str, int], Counter[tuple[tuple[str, ...], str]]] = {}
    for event in events:
        fields = (event.region, event.site, event.function, event.kind, event.via, event.path, event.line)
        callers = counts.get(fields)
        if callers is None:
            callers = counts[fields] = Counter()
        callers[(tuple(event.callers), event.caller_text)] += 1  # a list when read back from JSON
    return sorted(
        SiteRecord(
            region, site, function, kind, via, site_text(path, line), sum(callers.values()), _event_callers(callers)
        )
        for (region, site, function, kind, via, path, line), callers in counts.items()
    )


def lines_by_key(records: Iterable[SiteRecord]) -> dict[str, dict[str, dict[str, int]]]:
    """`{region: {key: {line identity: count}}}`: what a budget file records of each site's lines."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for record in records:
        by_key = out.setdefault(record.region, {}).setdefault(record.key, {})
        by_key[record.identity] = by_key.get(record.identity, 0) + record.count
    return out


def callers_by_line(records: Iterable[SiteRecord]) -> dict[str, dict[str, dict[str, dict[str, int]]]]:
    """`{region: {key: {line identity: {caller identity: count}}}}`: what a budget file records of each line's
    immediate callers. Every line whose callers were recorded has an entry, `{}` when no project code called it."""
    out: dict[str, dict[str, dict[str, dict[str, int]]]] = {}
    for record in records:
        if record.callers is None:
            continue
        by_line = out.setdefault(record.region, {}).setdefault(record.key, {}).setdefault(record.identity, {})
        for caller in record.callers:
            by_line[caller.identity] = by_line.get(caller.identity, 0) + caller.count
    return out


def match_lines(recorded: Mapping[str, int], live: Iterable[str]) -> dict[str, str | None]:
    """For each live line identity of one key, the recorded identity it is (None: a new line).

    An identical identity is the same line wherever it moved. A live identity not recorded is paired with a recorded
    one that is no longer seen, most similar text first (`difflib`), since an edited line (`x.item()` becoming
    `x.item() + y`) is still the old site; only the live identities left over are new.
    """
    live = list(dict.fromkeys(live))
    matched: dict[str, str | None] = {identity: identity if identity in recorded else None for identity in live}
    unseen = [identity for identity in recorded if identity not in matched]
    pairs = sorted(
        (
            (-difflib.SequenceMatcher(None, new, old).ratio(), index, old)
            for index, new in enumerate(live)
            if matched[new] is None
            for old in unseen
        )
    )
    taken: set[str] = set()
    for _, index, old in pairs:
        new = live[index]
        if matched[new] is None and old not in taken:
            matched[new] = old
            taken.add(old)
    return matched


def match_callers(recorded: Mapping[str, int], live: Iterable[str]) -> dict[str, str | None]:
    """For each live caller identity, the recorded one it is (None: a new caller): `match_lines` within each calling
    function, so an edited call line is the old caller, while a call from another function is never paired."""
    by_function: dict[str, list[str]] = {}
    for identity in live:
        by_function.setdefault(_function_of(identity), []).append(identity)
    matched: dict[str, str | None] = {}
    for function, identities in by_function.items():
        known = {identity: count for identity, count in recorded.items() if _function_of(identity) == function}
        matched.update(match_lines(known, identities))
    return matched


@dataclass(frozen=True)
class CallerChange:
    """A caller of a NEW or GREW line: new (`before` 0), calling more often (`before` its recorded count), or, for a
    NEW line or one whose callers were not recorded (`before` None), simply one of its callers now."""

    caller: Caller
    before: int | None

    def format(self) -> str:
        caller, chains = self.caller, self.caller.describe_chains()
        if self.before is None:
            return f"caller: {caller.describe()} ×{caller.count}{chains}"
        if self.before == 0:
            return f"new caller: {caller.describe()} ×{caller.count}{chains}"
        delta = caller.count - self.before
        return f"caller grew: {caller.describe()} ×{self.before} -> ×{caller.count} (+{delta}){chains}"


def caller_changes(recorded: Mapping[str, int] | None, live: Sequence[Caller]) -> tuple[CallerChange, ...]:
    """The callers of one NEW or GREW line worth naming: those new or calling more often than `recorded` (their
    identities' counts); with `recorded` None (not recorded), every live caller, with no claim of being new."""
    callers = merge_callers(live)
    if recorded is None:
        return tuple(CallerChange(caller, None) for caller in callers)
    matched = match_callers(recorded, [caller.identity for caller in callers])
    changes = []
    for caller in callers:
        old = matched[caller.identity]
        before = 0 if old is None else recorded[old]
        if caller.count > before:
            changes.append(CallerChange(caller, before))
    return tuple(sorted(changes, key=lambda c: (c.before != 0, -(c.caller.count - (c.before or 0)))))
