"""syrupy integration: a JSON snapshot extension storing event-count and schema goldens under the baselines directory.

`TelemetrySnapshotExtension` writes `<baselines>/telemetry/<test module>/<test name>.json` (the directory
is set by the pytest plugin from the `tripwire_baselines` ini option), not `__snapshots__` beside the test.
When a snapshot differs, its diff starts with a summary from `tripwire.telemetry.counts.diff_counts` that names
each event type whose count or order changed and each payload field renamed, dropped, added or retyped
(`schema of EPOCH_COMPLETED: field data.val_loss dropped`), then syrupy's line diff follows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from syrupy.extensions.json import JSONSnapshotExtension

from tripwire.telemetry.counts import diff_counts

_SETTINGS = {"directory": Path("baselines") / "telemetry"}


def set_snapshot_directory(directory: Path) -> None:
    """Where telemetry snapshots live (the plugin calls this once per session)."""
    _SETTINGS["directory"] = Path(directory)


def snapshot_directory() -> Path:
    """The configured telemetry snapshot directory."""
    return _SETTINGS["directory"]


def _parse(data: Any) -> dict[str, Any] | None:
    """A serialized snapshot as a dict, or None when it is not a JSON object."""
    try:
        parsed = json.loads(str(data))
    except (TypeError, ValueError):
        return None
    return parsed if isinstance(parsed, dict) else None


class TelemetrySnapshotExtension(JSONSnapshotExtension):
    """JSON snapshots under `<baselines>/telemetry/<test module>/`, with a count and schema summary in diffs."""

    @classmethod
    def dirname(cls, *, test_location: Any) -> str:
        return str(snapshot_directory() / test_location.basename)

    def diff_lines(self, serialized_data: Any, snapshot_data: Any) -> Iterator[str]:
        golden, current = _parse(snapshot_data), _parse(serialized_data)
        if golden is not None and current is not None:
            changes = diff_counts(golden, current)
            if changes:
                yield "telemetry changed (golden -> now):"
                for line in changes:
                    yield f"  {line}"
        yield from super().diff_lines(serialized_data, snapshot_data)
