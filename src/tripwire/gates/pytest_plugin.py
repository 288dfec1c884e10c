"""tripwire's pytest plugin (registered through the `pytest11` entry point).

Fixtures: `sync_counter` (a running `SyncCounter` for the test's duration), `trajectory` (a
`TrajectoryRecorder` stamped with this process's determinism context), `telemetry_counts` (reduce events
to counts and payload schema and assert them against a syrupy snapshot under the baselines directory),
`tripwire_goldens` (the `GoldenStore` for budgets, trajectories and telemetry payload digests) and `gate_log`
(rows for the end-of-run guardrail table).

Options: `--tripwire-update` rewrites sync budgets and trajectory goldens; it and syrupy's
`--snapshot-update` are refused (a usage error) when the `CI` environment variable is set. Ini option
`tripwire_baselines` (default `baselines`) names the baselines directory. Marker: `gpu` (skips with a
stated reason where CUDA is not available).
"""

from __future__ import annotations

import json
import os
import re
import textwrap
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tripwire.common.errors import (
    DEFAULT_AGAINST_COMMAND,
    DEFAULT_UPDATE_COMMAND,
    set_against_command,
    set_update_command,
    update_command,
)
from tripwire.sync.counter import SyncCounter
from tripwire.telemetry.counts import TelemetryCounts, reduce_events

if TYPE_CHECKING:  # torch-importing modules load lazily, so merely having the plugin installed costs no torch import
    from tripwire.bitwise.trajectory import TrajectoryRecorder
    from tripwire.gates.goldens import GoldenStore

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
UPDATE_FLAGS = {"--snapshot-update": "update_snapshots", "--tripwire-update": "tripwire_update"}


@dataclass
class GateLog:
    """Rows of (check, subject, status, detail) printed as a table at the end of the run."""

    rows: list[tuple[str, str, str, str]] = field(default_factory=list)

    def add(self, check: str, subject: str, status: str, detail: str = "") -> None:
        self.rows.append((check, subject, status, detail))


# The session's gate log lives on pytest's config (one per run, also for in-process pytester runs).
GATE_LOG_KEY = pytest.StashKey[GateLog]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tripwire")
    group.addoption(
        "--tripwire-update",
        action="store_true",
        default=False,
        help="rewrite sync budgets and trajectory goldens from this run (refused when CI is set)",
    )
    group.addoption(
        "--tripwire-against",
        default="",
        metavar="REF",
        help="the goldens were just recorded from base tree REF on this machine (set by `nox -s guardrails -- "
        "--against REF`): a check with no golden is then a skip, not a CI failure",
    )
    parser.addini("tripwire_baselines", "directory holding tripwire's goldens", default="baselines")
    parser.addini(
        "tripwire_update_command",
        "the command that records this project's goldens, named in failure messages",
        default=DEFAULT_UPDATE_COMMAND,
    )
    parser.addini(
        "tripwire_against_command",
        "how this project compares a tree against its base when no golden applies, named under CI",
        default=DEFAULT_AGAINST_COMMAND,
    )
    parser.addini(
        "tripwire_round_end",
        "the event label that closes a round in your telemetry (per-round counts); empty: one segment",
        default="",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[GATE_LOG_KEY] = GateLog()
    config.addinivalue_line("markers", "gpu: needs a CUDA device; skipped with a reason where there is none")
    set_update_command(str(config.getini("tripwire_update_command")))
    set_against_command(str(config.getini("tripwire_against_command")))
    active = [flag for flag, dest in UPDATE_FLAGS.items() if getattr(config.option, dest, False)]
    if active and os.environ.get("CI"):
        raise pytest.UsageError(
            f"{' and '.join(active)} refused: CI is set, and goldens are never rewritten in CI; "
            f"regenerate them locally with `{update_command()}` and commit the diff"
        )
    try:
        from tripwire.telemetry.snapshot import set_snapshot_directory
    except ImportError:  # pragma: no cover - syrupy is a test dependency
        return
    set_snapshot_directory(_baselines_dir(config) / "telemetry")


def _baselines_dir(config: pytest.Config) -> Path:
    return Path(config.rootpath) / str(config.getini("tripwire_baselines"))


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") is not None:
        import torch

        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA GPU: torch.cuda.is_available() is False on this machine")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Print the guardrail table: one row per check the gate ran."""
    log = config.stash.get(GATE_LOG_KEY, None)
    if log is None or not log.rows:
        return
    terminalreporter.section("tripwire guardrails")
    against = str(config.getoption("tripwire_against", ""))
    if against:
        terminalreporter.write_line(f"goldens: recorded from base {against} on this machine, just now")
    width = getattr(terminalreporter, "_tw", None)
    for line in format_gate_table(log.rows, getattr(width, "fullwidth", 120)):
        terminalreporter.write_line(line)
    log.rows.clear()


def format_gate_table(rows: list[tuple[str, str, str, str]], width: int = 120) -> list[str]:
    """The gate table: every row with its status; the detail column wraps at word boundaries, never cut."""
    table = [("check", "scenario", "status", "detail"), *rows]
    widths = [max(len(row[i]) for row in table) for i in range(3)]
    indent = sum(widths) + 6
    room = max(40, width - indent)
    lines = []
    for row in table:
        head = "  ".join(row[i].ljust(widths[i]) for i in range(3))
        detail = textwrap.wrap(row[3], room, break_long_words=False, break_on_hyphens=False) or [""]
        lines.append(f"{head}  {detail[0]}".rstrip())
        lines.extend(" " * indent + more for more in detail[1:])
    return lines


_ROWS_AT_SETUP = pytest.StashKey[int]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    """A guardrail test that failed before logging its row still gets one, marked FAILED, with the error's first
    line: the table never drops a failing check."""
    outcome = yield
    report = outcome.get_result()
    log = item.config.stash.get(GATE_LOG_KEY, None)
    if log is None or "gate_log" not in getattr(item, "fixturenames", ()):
        return
    if report.when == "setup":
        item.stash[_ROWS_AT_SETUP] = len(log.rows)
    elif report.when == "call" and report.failed and len(log.rows) == item.stash.get(_ROWS_AT_SETUP, len(log.rows)):
        error = str(call.excinfo.value).strip() if call.excinfo is not None else ""
        first = _ANSI.sub("", error.splitlines()[0]) if error else report.outcome
        name = getattr(item, "originalname", item.name)
        subject = item.callspec.id if hasattr(item, "callspec") else ""
        log.add(name.removeprefix("test_").replace("_", " "), subject, "FAILED", first)


@pytest.fixture
def sync_counter() -> Iterator[SyncCounter]:
    """A SyncCounter active for the whole test; read its counts after the code under test ran."""
    with SyncCounter() as counter:
        yield counter


@pytest.fixture
def trajectory() -> TrajectoryRecorder:
    """A trajectory recorder stamped with this process's determinism context (CPU)."""
    from tripwire.bitwise.trajectory import TrajectoryRecorder
    from tripwire.common.context import capture_context

    return TrajectoryRecorder(context=capture_context())


class TelemetryCountsHelper:
    """Reduce events (counts, order, payload schema) and compare them to this test's syrupy snapshot."""

    def __init__(self, snapshot: Any, round_end: str | None = None) -> None:
        from tripwire.telemetry.snapshot import TelemetrySnapshotExtension

        self.snapshot = snapshot.use_extension(TelemetrySnapshotExtension)
        self.round_end = round_end

    def reduce(self, events: Any, **options: Any) -> TelemetryCounts:
        return reduce_events(events, **{"round_end": self.round_end, **options})

    def check(self, events: Any, *, name: str | None = None, **options: Any) -> TelemetryCounts:
        """Reduce `events` and assert the snapshot matches (a missing snapshot fails)."""
        __tracebackhide__ = True
        counts = events if isinstance(events, TelemetryCounts) else self.reduce(events, **options)
        target = self.snapshot(name=name) if name else self.snapshot
        index = target.index
        if target == counts.to_snapshot():
            return counts
        location = target.extension.get_location(test_location=target.test_location, index=index)
        shown = _relative(Path(location))
        if Path(location).exists() and not _is_counts_snapshot(Path(location)):
            pytest.fail(
                f"{shown}: telemetry snapshot is unreadable (not the JSON tripwire writes): regenerate it with "
                f"`{update_command()}` and review the diff",
                pytrace=False,
            )
        diff = [_ANSI.sub("", line) for line in target.get_assert_diff()]
        raise AssertionError("\n".join([f"telemetry snapshot {shown} differs:", *diff]))


def _relative(path: Path) -> str:
    """`path` relative to the working directory when under it (messages name files as a reviewer sees them)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _is_counts_snapshot(path: Path) -> bool:
    """True when `path` holds a JSON object with the snapshot's `by_type` table."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(data, dict) and isinstance(data.get("by_type"), dict)


@pytest.fixture
def telemetry_counts(snapshot: Any, pytestconfig: pytest.Config) -> TelemetryCountsHelper:
    """`telemetry_counts.check(events)` reduces events and asserts them against the stored snapshot; rounds end at
    the `tripwire_round_end` ini option's label."""
    return TelemetryCountsHelper(snapshot, str(pytestconfig.getini("tripwire_round_end")) or None)


@pytest.fixture(scope="session")
def tripwire_goldens(pytestconfig: pytest.Config) -> GoldenStore:
    """The GoldenStore for sync budgets, trajectories and payloads (`update` follows `--tripwire-update`)."""
    from tripwire.gates.goldens import GoldenStore

    update = bool(pytestconfig.getoption("tripwire_update"))
    against = str(pytestconfig.getoption("tripwire_against"))
    require = bool(os.environ.get("CI")) and not against and not update
    return GoldenStore(_baselines_dir(pytestconfig), update=update, require=require)


@pytest.fixture(scope="session")
def gate_log(pytestconfig: pytest.Config) -> GateLog:
    """Add rows (check, scenario, status, detail) to the table printed at the end of the run."""
    return pytestconfig.stash[GATE_LOG_KEY]


def as_event_dicts(events: Any) -> list[Mapping[str, Any]]:
    """Events as wire dicts: objects with `to_json_dict()` are converted, dicts pass through."""
    return [e.to_json_dict() if hasattr(e, "to_json_dict") else e for e in events]
