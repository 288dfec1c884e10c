"""Wall-clock fields against the run's wall time (`tripwire.telemetry.clock`, `GoldenStore.check_clock`): a unit
changed in either direction fails, a machine twice as slow does not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tripwire.common.errors import GoldenFileError, NoGoldenApplies
from tripwire.gates.goldens import GoldenStore
from tripwire.telemetry.clock import (
    ClockUnitChanged,
    clock_differences,
    clock_fields,
    clock_golden,
    kind_of,
    outlasting,
    seconds_per_unit,
    wall_clock_named,
)

FIELDS = ("data.step_time_ms", "data.train_time_s", "data.fps", "STATS::data.elapsed")


def run(step_ms: float = 50.0, train_s: float = 0.25, fps: float = 20.0, elapsed: float = 0.3) -> list[dict[str, Any]]:
    """Five epochs of a small loop's events, as a loop of `wall_s` 1 s reports them."""
    epochs = [{"event_type": "EPOCH", "env_id": 0, "data": {"step_time_ms": step_ms, "fps": fps}} for _ in range(5)]
    end = {"event_type": "ROUND", "data": {"train_time_s": train_s, "flag": True, "name": "x", "steps": [1, 2]}}
    stats = {"event_type": "STATS", "data": {"elapsed": elapsed}}
    other = {"event_type": "OTHER", "data": {"elapsed": 1e9}}  # `STATS::` scopes `elapsed` to STATS events
    return [*epochs, end, stats, other]


def test_fields_are_named_by_label_and_path_and_read_by_kind() -> None:
    found = clock_fields(run(), 1.0, FIELDS)
    assert sorted(found) == [
        "EPOCH::data.fps",
        "EPOCH::data.step_time_ms",
        "ROUND::data.train_time_s",
        "STATS::data.elapsed",
    ]
    step = found["EPOCH::data.step_time_ms"]
    assert (step.kind, step.count, step.median) == ("duration", 5, 50.0)
    assert step.scale == pytest.approx(1.69897, abs=1e-4)  # 50 / 1 s
    assert step.longest_s == pytest.approx(0.05)
    assert found["EPOCH::data.fps"].kind == "rate" and found["STATS::data.elapsed"].longest_s is None
    assert kind_of("data.env_epochs_per_s") == kind_of("data.SPS") == "rate"
    assert kind_of("data.update_time_ms") == "duration" and kind_of("data.scalar_value", "charts/SPS") == "rate"
    assert seconds_per_unit("data.update_time_ms") == 1e-3 and seconds_per_unit("data.elapsed_seconds") == 1.0
    assert seconds_per_unit("data.round_min") == 60.0 and seconds_per_unit("data.elapsed") is None


def test_a_slower_machine_passes_and_a_unit_changed_either_way_fails() -> None:
    golden = clock_golden(clock_fields(run(), 1.0, FIELDS), 1.0)
    slower = clock_fields(run(step_ms=100.0, train_s=0.5, fps=10.0, elapsed=0.6), 2.0, FIELDS)
    assert clock_differences(golden, slower, 2.0) == []
    milliseconds = clock_fields(run(train_s=250.0), 1.0, FIELDS)
    (line,) = clock_differences(golden, milliseconds, 1.0)
    assert line.startswith("ROUND::data.train_time_s: at least 996x larger") and "was its unit changed?" in line
    seconds = clock_fields(run(step_ms=0.05), 1.0, FIELDS)
    (line,) = clock_differences(golden, seconds, 1.0)
    assert line.startswith("EPOCH::data.step_time_ms: at least 980x smaller")
    per_ms = clock_fields(run(fps=0.02), 1.0, FIELDS)
    assert [line.split(": ")[0] for line in clock_differences(golden, per_ms, 1.0)] == ["EPOCH::data.fps"]
    fractions = [{"event_type": "EPOCH", "data": {"fps": fps}} for fps in (0.0, 0.0, 0.0, 0.5, 0.5)]
    zero = clock_fields([*run(fps=0.0), *fractions], 1.0, FIELDS)  # not whole numbers: a median of 0 is 0
    assert zero["EPOCH::data.fps"].median == 0 and not zero["EPOCH::data.fps"].whole
    fractional = clock_golden(clock_fields(run(fps=20.4), 1.0, FIELDS), 1.0)  # neither whole: 0 is no reading
    assert clock_differences(fractional, zero, 1.0) == [
        "EPOCH::data.fps: was positive in its golden, now its median is 0"
    ]


def timer(*readings: float) -> list[dict[str, Any]]:
    """A loop's elapsed-time field as SB3 logs `time/time_elapsed`: the whole seconds since the run began."""
    return [{"event_type": "TIMER", "data": {"time_elapsed": reading}} for reading in readings]


def test_a_whole_number_timer_moved_by_its_timing_passes_and_its_unit_changed_fails() -> None:
    golden = clock_golden(clock_fields(timer(0, 0, 1, 1), 2.9, ["data.time_elapsed"]), 2.9)
    assert golden["fields"]["TIMER::data.time_elapsed"] == {
        "kind": "duration",
        "count": 4,
        "median": 0.5,
        "scale": -0.763,
        "whole": True,
    }
    for readings, wall_s in (((0, 0, 0, 1), 3.1), ((0, 1, 1, 2), 2.7), ((0, 0, 0, 0), 2.2)):
        assert clock_differences(golden, clock_fields(timer(*readings), wall_s, ["data.time_elapsed"]), wall_s) == []
    zero = clock_golden(clock_fields(timer(0, 0, 0, 1), 3.1, ["data.time_elapsed"]), 3.1)  # median 0: no scale
    assert clock_differences(zero, clock_fields(timer(0, 0, 1, 1), 2.9, ["data.time_elapsed"]), 2.9) == []
    milliseconds = clock_fields(timer(350, 1100, 1800, 2600), 2.9, ["data.time_elapsed"])
    (line,) = clock_differences(zero, milliseconds, 2.9)
    assert line.startswith("TIMER::data.time_elapsed: at least 1.55e+03x larger") and "unit changed?" in line
    minutes = timer(1, 2, 3, 4)  # 250 s in whole minutes where the golden had whole seconds
    long = clock_golden(clock_fields(timer(60, 120, 180, 240), 250.0, ["data.time_elapsed"]), 250.0)
    (line,) = clock_differences(long, clock_fields(minutes, 250.0, ["data.time_elapsed"]), 250.0)
    assert line.startswith("TIMER::data.time_elapsed: at least 42.6x smaller")
    fractional = clock_fields(timer(0.4, 0.9, 1.6, 2.1), 2.9, ["data.time_elapsed"])  # not whole: read as it is
    assert clock_differences(clock_golden(fractional, 2.9), fractional, 2.9) == []


def test_a_golden_written_before_whole_was_kept_is_read_as_not_whole() -> None:
    older = {"wall_s": 2.9, "band": 30.0, "fields": {"TIMER::data.time_elapsed": {"kind": "duration", "count": 4}}}
    older["fields"]["TIMER::data.time_elapsed"].update(median=0.5, scale=-0.763)
    assert clock_differences(older, clock_fields(timer(0, 0, 0, 1), 3.1, ["data.time_elapsed"]), 3.1) == []
    fractions = clock_fields(timer(0.0, 0.0, 0.0, 0.4), 3.1, ["data.time_elapsed"])  # neither side whole: as before
    assert clock_differences(older, fractions, 3.1) == [
        "TIMER::data.time_elapsed: was positive in its golden, now its median is 0"
    ]


def test_a_duration_longer_than_the_run_fails_without_a_golden() -> None:
    assert outlasting(clock_fields(run(), 1.0, FIELDS), 1.0) == []
    (line,) = outlasting(clock_fields(run(train_s=250.0), 1.0, FIELDS), 1.0)
    assert line.startswith("ROUND::data.train_time_s: 250 s read in its name's unit, in a run of 1 s")
    with pytest.raises(ValueError, match="positive number of seconds"):
        clock_fields(run(), 0.0, FIELDS)


def test_the_golden_store_records_checks_and_refuses(tmp_path: Path) -> None:
    GoldenStore(tmp_path, update=True).check_clock("s", run(), 1.0, FIELDS)
    written = json.loads((tmp_path / "clock" / "s.json").read_text(encoding="utf-8"))
    assert written["band"] == 30.0 and written["fields"]["EPOCH::data.step_time_ms"]["scale"] == 1.699
    outcome = GoldenStore(tmp_path).check_clock("s", run(step_ms=80.0), 1.3, FIELDS)
    assert outcome.status == "passed" and outcome.detail == "4 wall-clock fields within x/30 of their scale"
    with pytest.raises(ClockUnitChanged, match=r"clock/s.json\): EPOCH::data.step_time_ms: at least 980x smaller"):
        GoldenStore(tmp_path).check_clock("s", run(step_ms=0.05), 1.0, FIELDS)
    with pytest.raises(ClockUnitChanged, match="cannot outlast the run"):  # never written into a golden either
        GoldenStore(tmp_path, update=True).check_clock("s", run(train_s=250.0), 1.0, FIELDS)
    assert json.loads((tmp_path / "clock" / "s.json").read_text(encoding="utf-8")) == written
    assert GoldenStore(tmp_path).check_clock("other", run(), 1.0, FIELDS).status == "skipped"
    with pytest.raises(NoGoldenApplies, match="telemetry clock golden for 'other'"):
        GoldenStore(tmp_path, require=True).check_clock("other", run(), 1.0, FIELDS)
    (tmp_path / "clock" / "bad.json").write_text("[]", encoding="utf-8")
    with pytest.raises(GoldenFileError, match="not a clock golden"):
        GoldenStore(tmp_path).check_clock("bad", run(), 1.0, FIELDS)


@pytest.mark.parametrize(
    ("path", "clock"),
    [
        ("self.env.buf_infos.0.episode.t", True),  # SB3's Monitor, through the vector env's infos
        ("self.ep_info_buffer.3.t", True),  # SB3's episode statistics
        ("self.env.envs.0.t_start", True),
        ("self.start_time", True),
        ("self.env.envs.0.episode_times", True),
        ("tracking_data.Stats / Inference time (ms)", True),
        ("data.update_time_ms", True),
        ("data.train_s", True),
        ("charts/sps", True),
        ("self.t", False),  # a bare `t` outside an episode's statistics: a step counter as often
        ("self.num_timesteps", False),
        ("self.timestep", False),
        ("stats.reward_min", False),  # a minimum, not minutes
        ("self.lifetime", False),
        ("self.policy.weight", False),
    ],
)
def test_a_wall_clock_name_is_told_by_its_last_part(path: str, clock: bool) -> None:
    assert wall_clock_named(path) is clock
