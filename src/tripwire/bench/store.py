"""Benchmark runs on disk: reading pytest-benchmark JSON, and writing/reading checksummed baseline files.

A baseline is `<dir>/bench/<device>.json` (`cpu.json`, `cuda.json`): the raw per-round samples, calibration
samples, work units, gate settings and exact proxies of every benchmark, plus the recording context (torch,
Python, CPU, GPU). It ends with a sha256 of its own canonical content, so a corrupted or hand-edited file is
refused with a one-line `BaselineError` naming the file and the fix, rather than silently gating against
numbers nobody measured. Thresholds live in the benchmark code, not in the baseline.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tripwire.common.errors import TripwireError

TRIPWIRE_KEY = "tripwire"  # the extra_info key tripwire.bench.fixture.measure writes
TIME_METRIC = "time_ms"

BASELINE_FORMAT = "tripwire-bench-baseline/1"
SUBDIR = "bench"
RESAVE_HINT = "record a new one with `nox -s bench -- --save` (locally, not under CI) and commit it"


class BaselineError(TripwireError, ValueError):
    """A baseline or results file that is missing, corrupted, hand-edited or of an unknown format."""


class ResultsError(TripwireError, ValueError):
    """A pytest-benchmark JSON file without the data the gate needs."""


@dataclass(frozen=True)
class BenchRecord:
    """One benchmark of one run: raw per-round samples and everything needed to gate it."""

    name: str
    samples_ms: tuple[float, ...]
    calibration_ms: tuple[float, ...]
    units: dict[str, float]
    metric: str
    threshold: float
    alpha: float
    proxies: dict[str, int] = field(default_factory=dict)
    timer: str = "perf_counter"
    clock: str = "wall"  # which samples the gate judges: "wall" (samples_ms) or "cpu" (cpu_ms)
    cpu_ms: tuple[float, ...] = ()
    calibration_cpu_ms: tuple[float, ...] = ()

    @property
    def higher_is_better(self) -> bool:
        return self.metric != TIME_METRIC

    @property
    def gated_ms(self) -> tuple[float, ...]:
        """Per-round times on the gated clock."""
        return self.cpu_ms if self.clock == "cpu" else self.samples_ms

    @property
    def gated_calibration_ms(self) -> tuple[float, ...]:
        return self.calibration_cpu_ms if self.clock == "cpu" else self.calibration_ms


@dataclass(frozen=True)
class BenchRun:
    """Every gated benchmark of one run on one device type, with the machine context it ran in."""

    device: str
    context: dict[str, str]
    records: dict[str, BenchRecord]


def device_key(device: str) -> str:
    """The baseline key of a device string: "cpu", "cuda:1" -> "cuda", "mps" -> "mps"."""
    return device.split(":", 1)[0].strip().lower() or "cpu"


def baseline_path(location: str | Path, device: str) -> Path:
    """`baselines/` -> baselines/bench/cpu.json; `baselines/bench` -> baselines/bench/cpu.json; a .json stays."""
    path = Path(location)
    if path.suffix == ".json":
        return path
    if path.name != SUBDIR:
        path = path / SUBDIR
    return path / f"{device_key(device)}.json"


def _record_from_payload(name: str, payload: dict[str, Any], where: str) -> BenchRecord:
    try:
        record = BenchRecord(
            name=name,
            samples_ms=tuple(float(v) for v in payload["samples_ms"]),
            calibration_ms=tuple(float(v) for v in payload["calibration_ms"]),
            units={str(k): float(v) for k, v in payload["units"].items()},
            metric=str(payload["metric"]),
            threshold=float(payload["threshold"]),
            alpha=float(payload["alpha"]),
            proxies={str(k): int(v) for k, v in payload.get("proxies", {}).items()},
            timer=str(payload.get("timer", "perf_counter")),
            clock=str(payload.get("clock", "wall")),
            cpu_ms=tuple(float(v) for v in payload.get("cpu_ms", ())),
            calibration_cpu_ms=tuple(float(v) for v in payload.get("calibration_cpu_ms", ())),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BaselineError(f"{where}: benchmark {name!r} has a missing or malformed field ({exc!r})") from None
    if record.clock not in ("wall", "cpu"):
        raise BaselineError(f"{where}: benchmark {name!r} has an unknown clock {record.clock!r}")
    values = record.gated_ms + record.gated_calibration_ms
    if (
        len(record.gated_ms) < 3
        or not record.gated_calibration_ms
        or not all(math.isfinite(v) and v > 0 for v in values)
    ):
        raise BaselineError(
            f"{where}: benchmark {name!r} needs >= 3 positive finite {record.clock}-clock samples and a calibration"
        )
    if record.metric != TIME_METRIC and record.metric.removesuffix("_per_s") not in record.units:
        raise BaselineError(f"{where}: benchmark {name!r} gates {record.metric!r} but has no such unit")
    return record


def load_results(path: str | Path) -> BenchRun:
    """Read a `--benchmark-json` file; benchmarks measured with `tripwire.bench.fixture.measure` are kept."""
    source = Path(path)
    try:
        data = json.loads(source.read_text())
    except OSError as exc:
        raise ResultsError(f"{source}: cannot read benchmark results ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{source}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    records: dict[str, BenchRecord] = {}
    devices: set[str] = set()
    for bench in data.get("benchmarks", []):
        payload = bench.get("extra_info", {}).get(TRIPWIRE_KEY)
        if payload is None:
            continue
        name = str(bench.get("name") or bench.get("fullname"))
        try:
            records[name] = _record_from_payload(name, payload, str(source))
        except BaselineError as exc:
            raise ResultsError(str(exc)) from None
        devices.add(device_key(str(payload.get("device", "cpu"))))
    if not records:
        raise ResultsError(
            f"{source}: no benchmark recorded tripwire data (were they run with tripwire.bench.fixture.measure?)"
        )
    if len(devices) > 1:
        raise ResultsError(f"{source}: benchmarks ran on several device types {sorted(devices)}; run one per device")
    machine = data.get("machine_info", {})
    context = {key: str(machine.get(key, "")) for key in ("node", "machine", "python_version", "system")}
    context["cpu"] = str(machine.get("cpu", {}).get("brand_raw", "")) if isinstance(machine.get("cpu"), dict) else ""
    context.update({str(k): str(v) for k, v in machine.get(TRIPWIRE_KEY, {}).items()})
    return BenchRun(device=devices.pop(), context=context, records=records)


def _checksum(body: dict[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _record_payload(record: BenchRecord) -> dict[str, Any]:
    payload = asdict(record)
    payload.pop("name")
    for key in ("samples_ms", "calibration_ms", "cpu_ms", "calibration_cpu_ms"):
        payload[key] = [round(v, 6) for v in getattr(record, key)]
    return payload


def write_baseline(path: str | Path, run: BenchRun) -> Path:
    """Write `run` as a checksummed baseline file (parents created); returns the path written."""
    target = Path(path)
    body: dict[str, Any] = {
        "format": BASELINE_FORMAT,
        "device": run.device,
        "context": dict(sorted(run.context.items())),
        "records": {name: _record_payload(run.records[name]) for name in sorted(run.records)},
    }
    body["sha256"] = _checksum(body)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
    temporary.replace(target)
    return target


def read_baseline(path: str | Path) -> BenchRun:
    """Read and verify a baseline file; every problem is one `BaselineError` line naming the file and the fix."""
    source = Path(path)
    if not source.is_file():
        raise BaselineError(f"{source}: no benchmark baseline for this device; {RESAVE_HINT}")
    try:
        text = source.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise BaselineError(f"{source}: unreadable baseline ({exc}); {RESAVE_HINT}") from None
    return parse_baseline(text, source)


def parse_baseline(text: str, source: Path) -> BenchRun:
    """Verify and decode a baseline's text; `source` names it in errors (a path, or `sha:path` from git)."""
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BaselineError(
            f"{source}: corrupted baseline, not valid JSON ({exc.msg} at line {exc.lineno}); "
            f"restore it with `git checkout -- {source}` or {RESAVE_HINT}"
        ) from None
    if not isinstance(body, dict) or body.get("format") != BASELINE_FORMAT:
        found = body.get("format") if isinstance(body, dict) else type(body).__name__
        raise BaselineError(
            f"{source}: unknown baseline format {found!r} (expected {BASELINE_FORMAT!r}); {RESAVE_HINT}"
        )
    stored = body.pop("sha256", None)
    try:
        actual = _checksum(body)
    except (TypeError, ValueError) as exc:
        raise BaselineError(f"{source}: baseline content cannot be checksummed ({exc}); {RESAVE_HINT}") from None
    if stored != actual:
        raise BaselineError(
            f"{source}: checksum mismatch, the baseline was hand-edited or corrupted; restore it with "
            f"`git checkout -- {source}` or {RESAVE_HINT}"
        )
    records = body.get("records")
    if not isinstance(records, dict) or not records:
        raise BaselineError(f"{source}: baseline holds no benchmarks; {RESAVE_HINT}")
    return BenchRun(
        device=str(body.get("device", "cpu")),
        context={str(k): str(v) for k, v in dict(body.get("context", {})).items()},
        records={name: _record_from_payload(name, payload, str(source)) for name, payload in records.items()},
    )
