"""Wall-clock fields of telemetry (durations, rates) checked against the wall clock the run really took.

Payload goldens leave a loop's durations and rates out: they differ between two runs of the same seed. So a unit
written wrong (milliseconds into a `train_time_s`, `perf_counter_ns()` where milliseconds were, a rate per
millisecond) changed no digest, no count and no schema, and passed. Such a field is checked on another scale instead:

- **Its scale against the run's wall clock is golden.** A field's scale is the log10 of its median value over the run
  divided by the run's wall time in seconds (a duration), or multiplied by it (a rate: its name ends in `_per_s`,
  `fps`, `sps`, `_hz`: `RATE_NAMES`). A slower or faster machine moves a field and the wall clock together, a unit
  error moves the field alone, by 60 (minutes), 1,000 (milli) or more. A later run passes when every field is within
  a factor `band` (default 30) of its golden scale, either way.
- **A whole-number field is read to within one unit.** A timer kept in whole seconds (SB3's `time/time_elapsed`)
  reads 0 or 1 in a run of 3 s by its timing alone, so its median moves between 0, 0.5 and 1 with nothing changed.
  Where every reading of a field is a whole number (`whole` in its golden), its median stands for anything within
  one unit either way, and it fails only when even the nearest ends of the two ranges are more than the band apart;
  a median of 0 or 1 cannot have shrunk. (A golden written before `whole` was kept is read as not whole.)
- **A duration whose name says its unit is never longer than the run** (`_s`, `_ms`, `_us`, `_ns`, `_seconds`,
  `_min`: `UNITS`), with or without a golden: seconds written into a `_ms` field pass it, milliseconds into a `_s`
  field do not.

Fields are chosen by the same patterns as a payload's exclusions (`tripwire.telemetry.payloads.excluded`, with
`LABEL::PATH`), and named `LABEL::PATH` (`BATCH_EPOCH_COMPLETED::data.train_time_s`); only numbers count (a bool, a
string or a list is not a clock reading). A failure (`ClockUnitChanged`) names the field, how far it moved and its
median in a run of so many seconds.

`wall_clock_named(path)` tells a clock reading by its name alone (`episode.t`, `start_time`, `update_time_ms`):
`compare` says so when nothing else differs in a trajectory.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from tripwire.common.errors import GuardrailFailure
from tripwire.common.names import excluded
from tripwire.telemetry.counts import DEFAULT_DETAIL_KEYS, event_label
from tripwire.telemetry.payloads import event_fields, patterns_for

DEFAULT_BAND = 30.0  # a factor either way: a day's or a machine's drift is far inside it, milli- is far outside
RATE_NAMES = ("*_per_s", "*_per_sec", "*_per_second", "*fps", "*sps", "*_hz")  # the field name's last part
# A duration's unit by the end of its name: seconds per unit
UNITS = {
    "_ns": 1e-9,
    "_us": 1e-6,
    "_ms": 1e-3,
    "_s": 1.0,
    "_sec": 1.0,
    "_secs": 1.0,
    "_seconds": 1.0,
    "_min": 60.0,
    "_mins": 60.0,
    "_minutes": 60.0,
}


class ClockUnitChanged(GuardrailFailure):
    """A wall-clock field moved against the run's wall clock by more than the band, or outlasted the run."""


@dataclass(frozen=True)
class ClockField:
    """One wall-clock field over a run: its kind, how many readings, their median and its scale (module docstring)."""

    key: str  # LABEL::PATH
    kind: str  # "duration" or "rate"
    count: int
    median: float
    scale: float | None  # log10; None when no reading was positive
    longest_s: float | None  # the longest reading in seconds, for a duration whose name says its unit
    whole: bool = False  # every reading a whole number: the median is known to within one unit

    @classmethod
    def from_json(cls, key: str, row: Mapping[str, Any]) -> ClockField:
        """A field as `to_json` wrote it (a result's `clock`); the longest reading is not kept."""
        scale = row.get("scale")
        median = float(row.get("median", 0.0))
        count = int(row.get("count", 0))
        return cls(key, str(row.get("kind")), count, median, scale, None, row.get("whole") is True)

    def to_json(self) -> dict[str, Any]:
        """Rounded for reading in a diff: a scale to 0.001 (0.2 %), a median to 4 significant digits."""
        scale = None if self.scale is None else round(self.scale, 3)
        median = float(f"{self.median:.4g}")
        return {"kind": self.kind, "count": self.count, "median": median, "scale": scale, "whole": self.whole}


# A name that says its value is a wall-clock reading, whatever its unit: a time, times, a timestamp, an elapsed or a
# duration as a word of it (`start_time`, `episode_times`, `Inference time (ms)`; not `timesteps`), a unit of time at
# its end (`train_s`, `step_ms`; not `_min`, which is a minimum as often), a rate (`RATE_NAMES`), or the seconds since
# an episode began as gymnasium's and SB3's episode statistics keep them (`episode.t`, SB3's `ep_info_buffer.3.t`,
# and the Monitor's `t_start`)
_TIME_WORD = re.compile(r"(?:^|[^a-z])(?:time|times|timestamp|elapsed|duration)(?:[^a-z]|$)")
_TIME_UNIT = re.compile(f"(?:{'|'.join(re.escape(suffix) for suffix, seconds in UNITS.items() if seconds < 60)})$")
_EPISODE_WORDS = ("episode", "ep_info", "monitor")  # where a bare `t` is an episode's seconds


def wall_clock_named(path: str) -> bool:
    """Whether a dotted field name (`self.env.buf_infos.0.episode.t`) names a wall-clock reading by its last part:
    what two runs of one loop differ in by their timing alone, and a checkpoint or payload leaves out."""
    parts = path.lower().split(".")
    name = parts[-1]
    if name == "t_start" or (name == "t" and any(word in part for part in parts[:-1] for word in _EPISODE_WORDS)):
        return True
    return bool(_TIME_WORD.search(name) or _TIME_UNIT.search(name)) or any(
        fnmatchcase(name, pattern) for pattern in RATE_NAMES
    )


def kind_of(path: str, label: str = "") -> str:
    """`rate` when the field's last name part, or the last part of its event's label, reads as a rate
    (`RATE_NAMES`: a logged scalar such as CleanRL's `charts/SPS` holds its rate in `data.scalar_value`), else
    `duration`."""
    names = [path.rsplit(".", 1)[-1], label.replace(":", "/").rsplit("/", 1)[-1]]
    rate = any(fnmatchcase(name.lower(), pattern) for name in names if name for pattern in RATE_NAMES)
    return "rate" if rate else "duration"


def seconds_per_unit(path: str) -> float | None:
    """Seconds per unit of a duration whose name says its unit (`step_time_ms` -> 0.001), None when it does not."""
    name = path.rsplit(".", 1)[-1].lower()
    found = [suffix for suffix in UNITS if name.endswith(suffix)]
    return UNITS[max(found, key=len)] if found else None


def _against_run(median: float, kind: str, wall_s: float) -> float:
    """A reading against its run's wall clock, the quantity a scale is the log10 of."""
    return median / wall_s if kind == "duration" else median * wall_s


def clock_fields(
    events: Iterable[Mapping[str, Any]],
    wall_s: float,
    fields: Sequence[str],
    *,
    detail_keys: Sequence[str] = DEFAULT_DETAIL_KEYS,
) -> dict[str, ClockField]:
    """Every numeric field the `fields` patterns select, over the whole run of `wall_s` seconds, by `LABEL::PATH`."""
    if not (wall_s > 0 and math.isfinite(wall_s)):
        raise ValueError(f"the run's wall time must be a positive number of seconds, not {wall_s!r}")
    readings: dict[str, list[float]] = {}
    for event in events:
        label = event_label(event, detail_keys)
        patterns = patterns_for(label, fields)
        for path, value in event_fields(event).items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not excluded(path, patterns):
                continue
            if math.isfinite(value):
                readings.setdefault(f"{label}::{path}", []).append(float(value))
    found = {}
    for key, values in sorted(readings.items()):
        label, path = key.split("::", 1)
        kind = kind_of(path, label)
        median = statistics.median(values)
        scale = None
        if median > 0:
            scale = math.log10(_against_run(median, kind, wall_s))
        unit = seconds_per_unit(path) if kind == "duration" else None
        longest = max(values) * unit if unit is not None else None
        whole = all(value.is_integer() for value in values)
        found[key] = ClockField(key, kind, len(values), median, scale, longest, whole)
    return found


def outlasting(found: Mapping[str, ClockField], wall_s: float) -> list[str]:
    """One line per duration, its unit read from its name, longer than the whole run."""
    return [
        f"{field.key}: {field.longest_s:.4g} s read in its name's unit, in a run of {wall_s:.3g} s: a duration cannot "
        "outlast the run; is the value in another unit than its name says?"
        for field in found.values()
        if field.longest_s is not None and field.longest_s > wall_s * 1.05 + 0.05
    ]


def clock_golden(found: Mapping[str, ClockField], wall_s: float, band: float = DEFAULT_BAND) -> dict[str, Any]:
    """The golden form: the run's wall time, the band and each field's kind, count, median and scale."""
    fields = {key: field.to_json() for key, field in found.items()}
    return {"wall_s": round(wall_s, 2), "band": band, "fields": fields}


def _whole_gap(recorded: Mapping[str, Any], golden_wall_s: float, field: ClockField, wall_s: float) -> float:
    """log10 of how far apart two medians are when one or both are whole numbers, each standing for anything within
    one unit of it (not below 0): 0 where the ranges meet, positive where the run's is larger, negative smaller."""
    ranges = []
    for median, whole, seconds in (
        (float(recorded.get("median", 0.0)), recorded.get("whole") is True, golden_wall_s),
        (field.median, field.whole, wall_s),
    ):
        low, high = (max(median - 1.0, 0.0), median + 1.0) if whole else (median, median)
        ranges.append((_against_run(low, field.kind, seconds), _against_run(high, field.kind, seconds)))
    (golden_low, golden_high), (low, high) = ranges
    if golden_high > 0 and low > golden_high:
        return math.log10(low / golden_high)
    if high > 0 and golden_low > high:
        return -math.log10(golden_low / high)
    return 0.0


def clock_differences(golden: Mapping[str, Any], found: Mapping[str, ClockField], wall_s: float) -> list[str]:
    """One line per field whose scale moved by more than the golden's band (module docstring); a field the golden
    lacks or that is gone is left to the schema golden, which names it."""
    band = float(golden.get("band", DEFAULT_BAND))
    golden_wall_s = float(golden.get("wall_s", wall_s))
    lines = []
    for key, recorded in dict(golden.get("fields", {})).items():
        field = found.get(key)
        if field is None:
            continue
        before = recorded.get("scale")
        whole = field.whole or recorded.get("whole") is True
        if whole and golden_wall_s > 0:
            gap = _whole_gap(recorded, golden_wall_s, field, wall_s)
            if abs(gap) <= math.log10(band):
                continue
            moved, within = abs(gap), "at least "
        elif (before is None) != (field.scale is None):
            was = "never positive" if before is None else "positive"
            lines.append(f"{key}: was {was} in its golden, now its median is {field.median:.4g}")
            continue
        elif before is None or field.scale is None or abs(field.scale - before) <= math.log10(band):
            continue
        else:
            gap, moved, within = field.scale - before, abs(field.scale - before), ""
        way = "larger" if gap > 0 else "smaller"
        lines.append(
            f"{key}: {within}{10**moved:.3g}x {way} against the run's wall clock than its golden ({field.kind}, median "
            f"{field.median:.4g} in a run of {wall_s:.3g} s; golden median {recorded.get('median', float('nan')):.4g} "
            f"in {golden.get('wall_s', float('nan')):.3g} s; band x/{band:g}): was its unit changed?"
        )
    return lines
