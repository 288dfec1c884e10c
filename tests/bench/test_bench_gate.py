"""The comparison gate: calibration normalization, significance plus threshold, exact proxies, missing/new."""

from __future__ import annotations

from bench_helpers import record, run

from tripwire.bench.gate import Row, Verdict, compare_runs, min_p_value
from tripwire.bench.store import BenchRecord


def gated_row(base: BenchRecord, now: BenchRecord) -> Row:
    """The gated-metric row of comparing one benchmark (each side its own run, calibrated by its own passes)."""
    return compare_runs(run(base), run(now)).rows[0]


def test_identical_runs_pass_with_every_row_ok() -> None:
    comparison = compare_runs(run(record()), run(record()))
    assert not comparison.failed
    assert [row.verdict for row in comparison.rows] == [Verdict.OK]


def test_twenty_percent_slower_rounds_fail_as_a_throughput_regression() -> None:
    row = gated_row(record(), record(scale=1.25))
    assert row.verdict is Verdict.REGRESSION
    assert row.change is not None and abs(row.change - (1 / 1.25 - 1)) < 1e-9
    assert row.p_value is not None and row.p_value < 0.01


def test_slower_time_metric_fails_as_a_regression() -> None:
    row = gated_row(record(metric="time_ms"), record(metric="time_ms", scale=1.25))
    assert row.verdict is Verdict.REGRESSION
    assert row.change is not None and row.change > 0.2


def test_a_change_below_the_threshold_passes_even_when_significant() -> None:
    row = gated_row(record(threshold=0.10), record(threshold=0.10, scale=1.05))
    assert row.p_value is not None and row.p_value < 0.01
    assert row.verdict is Verdict.OK


def test_a_large_change_that_is_not_significant_is_reported_as_noise_and_passes() -> None:
    noisy = (60.0, 180.0, 70.0, 170.0, 65.0, 175.0, 90.0, 190.0, 75.0, 160.0)
    row = gated_row(record(), record(samples=noisy))
    assert row.verdict is Verdict.NOISE
    assert not row.verdict.fails


def test_a_significantly_faster_run_is_improved_and_passes() -> None:
    row = gated_row(record(), record(scale=0.7))
    assert row.verdict is Verdict.IMPROVED
    assert not row.verdict.fails


def test_a_uniformly_slower_machine_is_cancelled_by_the_calibration() -> None:
    row = gated_row(record(), record(scale=2.0, calibration_scale=2.0))
    assert row.verdict is Verdict.OK
    assert row.change is not None and abs(row.change) < 1e-9
    assert row.now is not None and row.baseline is not None and row.now < 0.6 * row.baseline


def test_too_few_rounds_to_reach_alpha_never_fail_and_say_so() -> None:
    row = gated_row(record(samples=(100.0, 100.0, 100.0)), record(samples=(150.0, 150.0, 150.0)))
    assert min_p_value(3, 3) > 0.01
    assert row.verdict is Verdict.NOISE
    assert "too few rounds" in row.note


def test_a_changed_exact_proxy_fails_even_when_time_is_unchanged() -> None:
    base = record(proxies={"syncs_per_epoch": 7, "aten_ops_per_epoch": 900})
    now = record(proxies={"syncs_per_epoch": 8, "aten_ops_per_epoch": 900})
    comparison = compare_runs(run(base), run(now))
    verdicts = {row.metric: row.verdict for row in comparison.rows}
    assert verdicts == {
        "env_epochs_per_s (wall)": Verdict.OK,
        "syncs_per_epoch": Verdict.CHANGED,
        "aten_ops_per_epoch": Verdict.OK,
    }
    assert comparison.failed


def test_a_benchmark_missing_from_the_current_run_fails() -> None:
    comparison = compare_runs(run(record("a"), record("b")), run(record("a")))
    assert [(row.benchmark, row.verdict) for row in comparison.failures()] == [("b", Verdict.MISSING)]


def test_a_benchmark_absent_from_the_baseline_fails_as_new() -> None:
    comparison = compare_runs(run(record("a")), run(record("a"), record("c")))
    assert [(row.benchmark, row.verdict) for row in comparison.failures()] == [("c", Verdict.NEW)]


def test_the_cpu_clock_gates_cpu_time_and_ignores_wall_time_swings() -> None:
    loaded_neighbours = gated_row(record(clock="cpu"), record(clock="cpu", scale=2.0, cpu_scale=1.0))
    slower_code = gated_row(record(clock="cpu"), record(clock="cpu", scale=1.0, cpu_scale=1.25))
    assert loaded_neighbours.verdict is Verdict.OK
    assert slower_code.verdict is Verdict.REGRESSION
    assert slower_code.metric == "env_epochs_per_s (cpu)"
