"""The scaling measurements' helpers: timing after a barrier, percentiles, and the table docs/distributed.md quotes."""

from __future__ import annotations

from esper.scripts.scaling import percentile, table, timed


def test_each_sample_starts_after_a_barrier_and_warm_up_calls_are_dropped() -> None:
    calls: list[str] = []
    samples = timed(lambda: calls.append("run"), lambda: calls.append("barrier"), repeats=4)
    assert len(samples) == 4 and all(sample >= 0 for sample in samples)
    assert calls == ["barrier", "run"] * 7  # three warm-up calls, then four timed


def test_percentiles_and_the_markdown_table() -> None:
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 0.9) == 5.0 and percentile([1.0], 0.5) == 1.0
    rows = [{"exchange": "barrier", "median_us": 55.21, "p90_us": 73.8}, {"ranks": 1, "envs": 8, "rank": 0}]
    assert table(rows).splitlines() == [
        "| exchange | median_us | p90_us |",
        "|---|---|---|",
        "| barrier | 55.2 | 73.8 |",
    ]
