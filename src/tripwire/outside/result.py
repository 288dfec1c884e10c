"""Results as files: one run of a scenario, saved to a folder, loaded and compared anywhere.

A result folder holds:

    result.json       status (ok, crash, n/a, error or fault, with a one-line cause), the determinism context, the
                      source root and commit, syncs per region, per iteration and per call site (with each site's source
                      line and the project lines that called its function, `tripwire.sync.sites.Caller`), what
                      torch.compile did (graph breaks, recompiles, frames, graphs, eager fallbacks: `compile`, kept
                      the same way), telemetry counts, the seed torch's default generator ended the run with
                      and the threads that drew from it, and what was not measured
    trajectory.json   the checkpoints' digests and specs (`tripwire.bitwise.trajectory`)
    payloads.json     a digest of every event payload field (`tripwire.telemetry.payloads`), when the run had events
    payload_values.pt the numbers behind those digests, kept like values.pt, for measuring a payload difference
    values.pt         the checkpoints' values, each distinct tensor once (or in a store shared by a history walk's
                      results: `tripwire.bitwise.values`), for measuring differences on this machine
    traceback.txt     the full traceback of a crash

Call sites are relative to the declared source root, so two results recorded in two checkouts of one project
compare without false site changes. A result saved before callers were recorded still loads (its sites' `callers`
are None: unknown, never "none"). `Result.syncs` also answers what a `tripwire.sync.budget.check_budget` reads,
so a saved result can be checked against a budget file outside pytest.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tripwire.common.errors import GoldenFileError, read_golden_json
from tripwire.sync.sites import SiteRecord, site_key, via_label

FORMAT = "tripwire-result/1"
STATUSES = ("ok", "crash", "n/a", "error", "fault")  # fault: tripwire failed, not the loop (`outside.blame`)


@dataclass
class SyncSummary:
    """Syncs of one run: per call site (`SiteRecord`), and per region for each iteration, the setup and the tail."""

    records: list[SiteRecord] = field(default_factory=list)
    iterations: list[dict[str, int]] = field(default_factory=list)
    setup: dict[str, int] = field(default_factory=dict)
    tail: dict[str, int] = field(default_factory=dict)
    declared: list[str] = field(default_factory=list)  # the scenario's regions: counted (0) even when none synced

    @property
    def total(self) -> int:
        return sum(record.count for record in self.records)

    def counts_by_region(self, *, by_path: bool = False) -> dict[str, int]:
        counts: Counter[str] = Counter({region: 0 for region in self.declared})
        for record in self.records:
            counts[record.region] += record.count
        return dict(sorted(counts.items()))

    def site_details(self, region: str) -> dict[str, tuple[str, Counter[str]]]:
        details: dict[str, tuple[str, Counter[str]]] = {}
        for record in self.records:
            if record.region == region:
                details.setdefault(record.site, (record.function, Counter()))[1][record.kind] += record.count
        return details

    def site_records(self, region: str | None = None) -> list[SiteRecord]:
        return [record for record in self.records if region is None or record.region == region]

    def site_keys_by_region(self) -> dict[str, Counter[str]]:
        keys: dict[str, Counter[str]] = {}
        for record in self.records:
            keys.setdefault(record.region, Counter())[site_key(record.site, record.function, record.kind)] += (
                record.count
            )
        return keys

    def iteration_counts(self) -> list[dict[str, int]]:
        return [dict(counts) for counts in self.iterations]

    def typical_iteration(self) -> dict[str, int]:
        """Per region, the count most iterations have (the steady state a per-iteration budget caps)."""
        regions = sorted({region for counts in self.iterations for region in counts})
        typical = {}
        for region in regions:
            counts = Counter(iteration.get(region, 0) for iteration in self.iterations)
            typical[region] = max(counts.items(), key=lambda item: (item[1], item[0]))[0]
        return typical

    def to_json(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "regions": self.counts_by_region(),
            "setup": dict(sorted(self.setup.items())),
            "iterations": [dict(sorted(counts.items())) for counts in self.iterations],
            "tail": dict(sorted(self.tail.items())),
            "declared": list(self.declared),
            "sites": [record.to_json() for record in self.records],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SyncSummary:
        return cls(
            [SiteRecord.from_json(item) for item in data.get("sites", [])],
            [_object(item, "syncs.iterations[]") for item in data.get("iterations", [])],
            _object(data.get("setup", {}), "syncs.setup"),
            _object(data.get("tail", {}), "syncs.tail"),
            [str(region) for region in data.get("declared", [])],
        )


@dataclass
class Result:
    """One recorded run (see the module docstring); `tripwire.bitwise.trajectory.Trajectory` objects hold the
    digests."""

    scenario: str
    status: str
    cause: str = ""
    context: dict[str, Any] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)  # root, commit, scenario file
    seconds: float = 0.0
    syncs: SyncSummary = field(default_factory=SyncSummary)
    # what torch.compile did (`tripwire.compile`), kept like syncs; None: recorded before compilation was counted
    compile: SyncSummary | None = None
    telemetry: dict[str, Any] | None = None  # `TelemetryCounts.to_snapshot()` of the run's events
    # the excluded wall-clock fields' scales against the run's seconds (`tripwire.telemetry.clock.clock_golden`)
    clock: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)  # what was not measured, and why
    calls: dict[str, int] = field(default_factory=dict)  # how often each instrumented target was called
    # child processes the loop started, by kind (`tripwire.outside.children`); None: recorded before they were counted
    children: dict[str, int] | None = None
    trajectory: Any = None  # tripwire.bitwise.trajectory.Trajectory (loaded lazily: it imports torch)
    payloads: Any = None  # tripwire.bitwise.trajectory.Trajectory of payload digests, or None
    payload_values: Any = None  # tripwire.bitwise.values.Values of the payloads' numeric fields, or None
    values: Any = None  # tripwire.bitwise.trajectory.Values, or None
    folder: Path | None = None
    traceback: str = ""  # the full traceback of a crash
    ended_by_exit: bool = False  # the loop called os._exit (not saved: `run` ends its process the same way)
    # torch's default generator's seed at the end of the run (`torch.initial_seed()`): two results that differ in it
    # drew other random numbers; None: recorded before it was kept
    seed: int | None = None
    # the generators the loop drew from without seeding them while it ran (`torch`: tripwire.outside.seeds)
    unseeded: tuple[str, ...] = ()
    # (thread name, draws, line of its first) per thread that drew from it (`tripwire.bitwise.draws`); None: recorded
    # before they were kept
    draw_threads: list[tuple[str, int, str]] | None = None
    # the seed Python hashed strings with (`tripwire.outside.seeds.hash_seed`: "0", or "random" when each process
    # draws its own); None: recorded before it was kept
    hash_seed: str | None = None
    # whether CUDA was initialized by the end of the run (its generators' draws go unwatched); None: recorded before
    # it was kept
    cuda_used: bool | None = None
    # (line, generators made there) per line where the loop made a NumPy generator from OS entropy
    # (`tripwire.outside.seeds.OsEntropy`); None: not watched (recorded before it was, or a NumPy it cannot watch)
    entropy: list[tuple[str, int]] | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def summary(self) -> str:
        """`ok in 3.2 s: 48 checkpoints, 312 syncs, 40 events` or the status and its cause."""
        if self.status != "ok":
            return f"{self.status}: {self.cause}"
        events = f", {self.telemetry.get('total', 0)} events" if self.telemetry else ""
        compiled = self.compile.total if self.compile is not None else 0
        compiled_text = f", {compiled} compilation events" if compiled else ""
        checkpoints = len(self.trajectory) if self.trajectory is not None else 0
        return f"ok in {self.seconds:.1f} s: {checkpoints} checkpoints, {self.syncs.total} syncs{compiled_text}{events}"

    def save(self, folder: str | Path, *, values_store: str | Path | None = None) -> Path:
        """Write the result folder (see the module docstring); files of an earlier result there are replaced. With
        `values_store`, each distinct kept tensor is a file of that shared folder (`tripwire.bitwise.values`)."""
        from tripwire.bitwise.values import save_values

        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        for stale in ("payloads.json", "values.pt", "payload_values.pt", "traceback.txt"):
            (out / stale).unlink(missing_ok=True)
        if self.trajectory is not None:
            self.trajectory.save(out / "trajectory.json")
        if self.payloads is not None:
            self.payloads.save(out / "payloads.json")
        if self.values:
            digests = dict(self.trajectory.checkpoints) if self.trajectory is not None else {}
            save_values(out / "values.pt", self.values, digests, values_store)
        if self.payload_values and self.payloads is not None:
            save_values(out / "payload_values.pt", self.payload_values, dict(self.payloads.checkpoints), values_store)
        if self.traceback:
            (out / "traceback.txt").write_text(self.traceback, encoding="utf-8")
        data = {
            "format": FORMAT,
            "scenario": self.scenario,
            "status": self.status,
            "cause": self.cause,
            "seconds": round(self.seconds, 3),
            "context": dict(sorted(self.context.items())),
            "source": self.source,
            "syncs": self.syncs.to_json(),
            "compile": None if self.compile is None else self.compile.to_json(),
            "telemetry": self.telemetry,
            "clock": self.clock,
            "calls": dict(sorted(self.calls.items())),
            "children": self.children,
            "seed": self.seed,
            "unseeded": list(self.unseeded),
            "draw_threads": None if self.draw_threads is None else [list(entry) for entry in self.draw_threads],
            "hash_seed": self.hash_seed,
            "cuda_used": self.cuda_used,
            "entropy": None if self.entropy is None else [list(entry) for entry in self.entropy],
            "notes": list(self.notes) + (["traceback.txt holds the full traceback"] if self.traceback else []),
        }
        # written last, and whole (a temporary file renamed): a folder with a result.json holds a complete result
        partial = out / "result.json.partial"
        partial.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        partial.replace(out / "result.json")
        return out

    @classmethod
    def load(cls, folder: str | Path, *, values: bool = True) -> Result:
        """Read a result folder; a missing or malformed one raises `GoldenFileError` naming the file."""
        from tripwire.bitwise.trajectory import Trajectory
        from tripwire.bitwise.values import load_values

        root = Path(folder)
        if root.exists() and not root.is_dir():
            raise GoldenFileError(f"{root}: a file, not a result folder (record one with `python -m tripwire run`)")
        data = read_golden_json(
            root / "result.json", "no tripwire result here (record one with `python -m tripwire run`)"
        )
        if not isinstance(data, Mapping) or data.get("format") != FORMAT or data.get("status") not in STATUSES:
            raise GoldenFileError(f"{root / 'result.json'}: not a tripwire result (format {FORMAT})")
        trajectory_file, payloads_file, values_file, payload_values_file = (
            root / name for name in ("trajectory.json", "payloads.json", "values.pt", "payload_values.pt")
        )
        try:
            result = cls(
                scenario=str(data.get("scenario", "")),
                status=str(data["status"]),
                cause=str(data.get("cause", "")),
                context=_object(data.get("context", {}), "context"),
                source=_texts(dict(data.get("source", {})), "source"),
                seconds=float(data.get("seconds", 0.0)),
                syncs=SyncSummary.from_json(data.get("syncs", {})),
                compile=SyncSummary.from_json(data["compile"]) if isinstance(data.get("compile"), Mapping) else None,
                telemetry=_telemetry(data.get("telemetry")),
                clock=dict(data["clock"]) if isinstance(data.get("clock"), Mapping) else None,
                notes=[str(note) for note in data.get("notes", [])],
                calls={str(target): int(count) for target, count in dict(data.get("calls", {})).items()},
                children=(
                    None
                    if data.get("children") is None
                    else {str(kind): int(count) for kind, count in dict(data["children"]).items()}
                ),
                seed=None if data.get("seed") is None else int(data["seed"]),
                unseeded=tuple(str(name) for name in data["unseeded"])
                if isinstance(data.get("unseeded"), list)
                else (),
                draw_threads=(
                    None
                    if data.get("draw_threads") is None
                    else [(str(name), int(count), str(first)) for name, count, first in data["draw_threads"]]
                ),
                hash_seed=None if data.get("hash_seed") is None else _text(data["hash_seed"], "hash_seed"),
                cuda_used=None if data.get("cuda_used") is None else bool(data["cuda_used"]),
                entropy=(
                    None
                    if data.get("entropy") is None
                    else [(_text(line, "entropy"), int(count)) for line, count in data["entropy"]]
                ),
                folder=root,
            )
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as error:
            raise GoldenFileError(
                f"{root / 'result.json'}: a field has the wrong type or shape ({type(error).__name__}: {error}): "
                "record the result again"
            ) from None
        result.trajectory = Trajectory.load(trajectory_file) if trajectory_file.exists() else Trajectory()
        result.payloads = Trajectory.load(payloads_file) if payloads_file.exists() else None
        result.values = load_values(values_file) if values and values_file.exists() else None
        result.payload_values = load_values(payload_values_file) if values and payload_values_file.exists() else None
        return result


def describe_sites(records: Sequence[SiteRecord]) -> list[str]:
    """One line per site: `region  file:line in function  [kind×n]  `source line``."""
    return [
        f"{record.region}  {record.site} in {record.function}  [{record.kind}×{record.count}]  `{record.text}`"
        + (f"  ({via_label(record.kind)}: {record.via})" if record.via else "")
        for record in records
    ]


def _telemetry(value: Any) -> dict[str, Any] | None:
    """A result's event counts if they have the shape `TelemetryCounts.to_snapshot()` writes, in every part `compare`
    reads (`total`, counts by type, round and env, each round's order, the payload schema); else a `TypeError` naming
    the part, which `Result.load` reports in one line (a fuzzed `"schema": "0"` loaded, and `compare` raised)."""
    if value is None:
        return None
    counts = _object(value, "telemetry")
    if "total" in counts and not isinstance(counts["total"], int):
        raise TypeError(f"telemetry.total is {type(counts['total']).__name__}, not a count")
    _counts(counts.get("by_type", {}), "telemetry.by_type")
    for section in ("by_round", "by_env"):
        for key, table in _object(counts.get(section, {}), f"telemetry.{section}").items():
            _counts(table, f"telemetry.{section}[{key!r}]")
    for key, order in counts.items():
        if key.startswith("sequence_round_") and not (
            isinstance(order, list) and all(isinstance(label, str) for label in order)
        ):
            raise TypeError(f"telemetry.{key} is not a list of event labels")
    if "schema" in counts:
        for label, fields in _object(counts["schema"], "telemetry.schema").items():
            for path, kind in _object(fields, f"telemetry.schema[{label!r}]").items():
                _text(kind, f"telemetry.schema[{label!r}][{path!r}]")
    return counts


def _counts(value: Any, name: str) -> None:
    """A `TypeError` naming `name` unless `value` maps labels to counts."""
    for label, count in _object(value, name).items():
        if not isinstance(count, int):
            raise TypeError(f"{name}[{label!r}] is {type(count).__name__}, not a count")


def _object(value: Any, name: str) -> dict[str, Any]:
    """`value` as a dict if it is a JSON object (whose keys are text); else a `TypeError` naming `name`, which
    `Result.load` reports in one line (`dict()` of a list of pairs would make keys of any type)."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} is {type(value).__name__}, not an object")
    return dict(value)


def _text(value: Any, name: str) -> str:
    """`value` if it is text; else a `TypeError` naming `name`, which `Result.load` reports in one line."""
    if not isinstance(value, str):
        raise TypeError(f"{name} is {type(value).__name__}, not text")
    return value


def _texts(fields: dict[str, Any], name: str) -> dict[str, Any]:
    """`fields` (a result's `source`: its root, commit and scenario file) if every value is text or null; else a
    `TypeError` naming `name`, which `Result.load` reports in one line."""
    wrong = next((key for key, value in fields.items() if value is not None and not isinstance(value, str)), None)
    if wrong is not None:
        raise TypeError(f"{name}[{wrong!r}] is {type(fields[wrong]).__name__}, not text")  # a key may hold a line break
    return {str(key): value for key, value in fields.items()}
