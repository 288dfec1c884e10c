"""Sync call sites as records: the budget key of a site, and what identifies one line across edits.

A budget counts syncs per region and remembers the sites it saw by *key*, `file::function [kind]`, never by line
number, so code moving inside a function changes nothing. Within one key, a site's *identity* is its stripped source
line (plus, for a sync torch made on the line's behalf, the torch code that made it): a new `.item()` added to a
function that already syncs is then named at its own line instead of being lumped with the function's old sites,
and a line that only moved is still the same site. This module imports no torch.
"""

from __future__ import annotations

import difflib
import linecache
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tripwire.sync.state import SyncEvent, site_text


def site_key(site: str, function: str, kind: str) -> str:
    """The budget key of a sync: `file::function [kind]` (the line of `site` = `file:line` is dropped)."""
    file = site.rsplit(":", 1)[0] if site.rsplit(":", 1)[-1].isdigit() else site
    return f"{file}::{function} [{kind}]"


def line_identity(text: str, via: str, line: int) -> str:
    """What names one site within its key: its source text (or `line N` when unreadable), and the torch code that
    synced on its behalf (`  <- torch/optim/optimizer.py:_get_value`)."""
    identity = text or f"line {line}"
    return f"{identity}  <- {via}" if via else identity


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
        return {
            "region": self.region,
            "file": self.file,
            "line": self.line,
            "function": self.function,
            "kind": self.kind,
            "via": self.via,
            "text": self.text,
            "count": self.count,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> SiteRecord:
        return cls(
            str(data["region"]),
            f"{data['file']}:{data['line']}",
            str(data["function"]),
            str(data["kind"]),
            str(data.get("via", "")),
            str(data.get("text", "")),
            int(str(data["count"])),
        )


def group_records(events: Iterable[SyncEvent]) -> list[SiteRecord]:
    """`SiteRecord`s of sync events, one per (region, site, function, kind, via), each with its source line."""
    counts: Counter[tuple[str, str, str, str, str, str, int]] = Counter()
    for event in events:
        counts[(event.region, event.site, event.function, event.kind, event.via, event.path, event.line)] += 1
    for path in {fields[5] for fields in counts}:
        if path:
            linecache.checkcache(path)  # the file may have been rewritten since it was first read
    return sorted(
        SiteRecord(region, site, function, kind, via, site_text(path, line), count)
        for (region, site, function, kind, via, path, line), count in counts.items()
    )


def lines_by_key(records: Iterable[SiteRecord]) -> dict[str, dict[str, dict[str, int]]]:
    """`{region: {key: {line identity: count}}}`: what a budget file records of each site's lines."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for record in records:
        by_key = out.setdefault(record.region, {}).setdefault(record.key, {})
        by_key[record.identity] = by_key.get(record.identity, 0) + record.count
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
