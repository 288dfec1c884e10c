"""The noise-aware benchmark gate: calibration-normalized rounds, Mann-Whitney U and a per-benchmark threshold.

For every benchmark the gate compares the per-round values of the baseline and of the current run:

1. Normalize: each round's time (on the record's gated clock: process CPU time on CPU, CUDA-event time on a GPU)
   is divided by the median calibration pass interleaved with that benchmark's rounds, so values are in
   "calibration units" and a baseline recorded on one machine gates on another. Throughput metrics
   (`<unit>_per_s`, higher is better) are gated directly as units per calibration unit.
2. Effect: `change` = median(now) / median(baseline) - 1, signed so that the table reads naturally
   (+ means slower for time, faster for throughput).
3. Decision: a REGRESSION needs BOTH a change worse than the benchmark's threshold AND a one-sided Mann-Whitney
   U test with p < alpha. A large change that is not significant is reported as `~noise` and passes; a
   significant change smaller than the threshold passes as `ok`.

Deterministic proxies (sync counts, aten op counts per epoch) are compared exactly: any difference fails as
CHANGED, because it cannot be noise. A benchmark or proxy present on only one side fails (MISSING / NEW) so a
renamed or dropped benchmark cannot silently leave the gate.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from enum import Enum

from scipy.stats import mannwhitneyu

from tripwire.bench.store import TIME_METRIC, BenchRecord, BenchRun


class Verdict(str, Enum):
    OK = "ok"
    NOISE = "~noise"
    IMPROVED = "improved"
    REGRESSION = "REGRESSION"
    CHANGED = "CHANGED"
    MISSING = "MISSING"
    NEW = "NEW"

    @property
    def fails(self) -> bool:
        return self in (Verdict.REGRESSION, Verdict.CHANGED, Verdict.MISSING, Verdict.NEW)


@dataclass(frozen=True)
class Row:
    """One line of the comparison table."""

    benchmark: str
    metric: str
    unit: str
    baseline: float | None  # raw median in `unit` (not normalized), for reading
    now: float | None
    change: float | None  # relative change of the normalized medians; + = slower (time) / faster (throughput)
    p_value: float | None
    threshold: float | None
    verdict: Verdict
    note: str = ""
    raw_change: float | None = None  # the same relative change on the raw medians, machine differences included
    machine: float | None = None  # calibration now / calibration at the baseline - 1 (+ = this machine is slower)


@dataclass(frozen=True)
class Comparison:
    """Every row, plus what was compared against what."""

    rows: tuple[Row, ...]
    baseline_context: dict[str, str]
    current_context: dict[str, str]

    @property
    def failed(self) -> bool:
        return any(row.verdict.fails for row in self.rows)

    def failures(self) -> list[Row]:
        return [row for row in self.rows if row.verdict.fails]


def metric_unit(record: BenchRecord) -> str:
    if record.metric == TIME_METRIC:
        return "ms"
    return record.metric.removesuffix("_per_s").replace("_", "-") + "/s"


def raw_values(record: BenchRecord) -> list[float]:
    """Per-round values of the gated metric in its own unit (ms, or units per second)."""
    if record.metric == TIME_METRIC:
        return list(record.gated_ms)
    amount = record.units[record.metric.removesuffix("_per_s")]
    return [1000.0 * amount / ms for ms in record.gated_ms]


def normalized_values(record: BenchRecord) -> list[float]:
    """Per-round values in calibration units: time / calibration, or units per calibration time.

    The calibration is the median of the passes interleaved with this benchmark's own rounds, so it was measured
    under the same load as the work. (One figure per run was tried and was worse: on a shared 2-core runner the
    load changes within a run, and the benchmarks that ran in a busy minute moved 20-35 % against it.)
    """
    calibration = statistics.median(record.gated_calibration_ms)
    if record.metric == TIME_METRIC:
        return [ms / calibration for ms in record.gated_ms]
    amount = record.units[record.metric.removesuffix("_per_s")]
    return [amount * calibration / ms for ms in record.gated_ms]


def min_p_value(n: int, m: int) -> float:
    """The smallest one-sided p a Mann-Whitney U test can return for sample sizes n and m."""
    return 1.0 / math.comb(n + m, n)


def compare_record(base: BenchRecord, now: BenchRecord) -> Row:
    """Gate one benchmark's gated metric (threshold and alpha come from the current run's code)."""
    before, after = normalized_values(base), normalized_values(now)
    change = statistics.median(after) / statistics.median(before) - 1.0
    worse_side = "less" if now.higher_is_better else "greater"
    better_side = "greater" if now.higher_is_better else "less"
    p_worse = float(mannwhitneyu(after, before, alternative=worse_side).pvalue)
    p_better = float(mannwhitneyu(after, before, alternative=better_side).pvalue)
    worse = -change if now.higher_is_better else change
    note = ""
    if worse > now.threshold:
        verdict = Verdict.REGRESSION if p_worse < now.alpha else Verdict.NOISE
        p_value = p_worse
    elif -worse > now.threshold and p_better < now.alpha:
        verdict, p_value, note = Verdict.IMPROVED, p_better, "faster than the baseline: consider re-saving it"
    else:
        verdict, p_value = Verdict.OK, min(p_worse, p_better)
    if min_p_value(len(after), len(before)) >= now.alpha:
        note = f"too few rounds ({len(before)} vs {len(after)}) to reach p < {now.alpha}; add rounds"
        if verdict is Verdict.REGRESSION:
            verdict = Verdict.NOISE
    if base.metric != now.metric or base.clock != now.clock:
        note = f"gated metric changed from {base.metric} ({base.clock}) to {now.metric} ({now.clock})"
    raw_before, raw_after = statistics.median(raw_values(base)), statistics.median(raw_values(now))
    machine = statistics.median(now.gated_calibration_ms) / statistics.median(base.gated_calibration_ms) - 1.0
    return Row(
        benchmark=now.name,
        metric=f"{now.metric} ({now.clock})",
        unit=metric_unit(now),
        baseline=raw_before,
        now=raw_after,
        change=change,
        p_value=p_value,
        threshold=now.threshold,
        verdict=verdict,
        note=note,
        raw_change=raw_after / raw_before - 1.0,
        machine=machine,
    )


def compare_proxies(base: BenchRecord, now: BenchRecord, name: str) -> list[Row]:
    """Exact comparison of the deterministic proxies (any difference fails)."""
    before, after = base.proxies, now.proxies
    rows: list[Row] = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if old is None or new is None:
            verdict = Verdict.NEW if old is None else Verdict.MISSING
            note = "proxy not in the baseline" if old is None else "proxy no longer measured"
        elif old != new:
            verdict, note = Verdict.CHANGED, "exact proxy changed: find the cause, or re-save the baseline if intended"
        else:
            verdict, note = Verdict.OK, ""
        change = (new / old - 1.0) if old and new is not None else None
        rows.append(Row(name, key, "count", old, new, change, None, 0.0, verdict, note))
    return rows


def compare_runs(baseline: BenchRun, current: BenchRun) -> Comparison:
    """Compare every benchmark of `current` against `baseline` (gated metric first, then its proxies)."""
    rows: list[Row] = []
    for name in sorted(set(baseline.records) | set(current.records)):
        base, now = baseline.records.get(name), current.records.get(name)
        if base is None and now is not None:
            note = "not in the baseline: re-save the baseline to start gating it"
            rows.append(
                Row(name, now.metric, metric_unit(now), None, None, None, None, now.threshold, Verdict.NEW, note)
            )
        elif now is None and base is not None:
            note = "in the baseline but not run: was it renamed, skipped or deleted?"
            rows.append(Row(name, base.metric, metric_unit(base), None, None, None, None, None, Verdict.MISSING, note))
        elif base is not None and now is not None:
            rows.append(compare_record(base, now))
            rows.extend(compare_proxies(base, now, name))
    return Comparison(tuple(rows), dict(baseline.context), dict(current.context))
