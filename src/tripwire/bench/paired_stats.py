"""The verdict of a paired A/B: per-block head/base ratios, a bootstrap confidence interval, and a tolerance.

Units are measured in blocks of four, ABBA then BAAB: within a block both sides see the same minute of the
machine, and the order cancels a linear drift. Each block gives one ratio, `(head_1 + head_2) / (base_1 +
base_2)` on the gated clock (> 1: head is slower). The estimate is the 20 %-trimmed mean of the log ratios (robust
to a block that a neighbour's burst hit, more efficient than the median) and its 95 % confidence interval comes
from scipy's bootstrap (BCa), seeded so that the same samples always give the same verdict.

Decision, with `change = estimate - 1`:
- REGRESSION: the interval lies wholly above 0 (the slowdown is real) AND the estimate exceeds the tolerance
  (it is large enough to matter);
- IMPROVED: the mirror image;
- ok otherwise; `resolved` says whether the interval lies wholly on one side of the tolerance, which is what
  the driver's sequential sampling aims for before the time budget runs out.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np
from scipy import stats

TRIM = 0.2
CONFIDENCE = 0.95
RESAMPLES = 2000


class PairedVerdict(str, Enum):
    OK = "ok"
    IMPROVED = "improved"
    REGRESSION = "REGRESSION"
    CHANGED = "CHANGED"
    MISSING = "MISSING"
    NEW = "new"

    @property
    def fails(self) -> bool:
        return self in (PairedVerdict.REGRESSION, PairedVerdict.CHANGED, PairedVerdict.MISSING)


@dataclass(frozen=True)
class RatioEstimate:
    """The paired head/base time ratio of one benchmark, as relative changes (+0.05 = head 5 % slower)."""

    change: float
    low: float
    high: float
    blocks: int

    def resolved(self, tolerance: float) -> bool:
        """True when the interval lies wholly on one side of +tolerance (no more blocks would flip the verdict)."""
        return self.low > tolerance or self.high < tolerance


def block_ratios(base: Sequence[float], head: Sequence[float]) -> list[float]:
    """Per-block ratios from unit times in measurement order (two units per side per block)."""
    if len(base) != len(head) or len(base) % 2:
        raise ValueError(f"paired units must come two per side per block, got {len(base)} base and {len(head)} head")
    return [(head[i] + head[i + 1]) / (base[i] + base[i + 1]) for i in range(0, len(base), 2)]


def _trimmed_log_mean(sample: np.ndarray, axis: int = -1) -> np.ndarray:
    result: np.ndarray = stats.trim_mean(sample, TRIM, axis=axis)
    return result


def estimate(ratios: Sequence[float], seed_text: str = "") -> RatioEstimate:
    """Trimmed-mean ratio and its bootstrap interval; `seed_text` (the benchmark name) seeds the resampling."""
    logs = np.log(np.asarray(ratios, dtype=float))
    if len(logs) < 3 or not np.all(np.isfinite(logs)):
        raise ValueError(f"need at least 3 finite positive block ratios, got {list(ratios)}")
    centre = float(_trimmed_log_mean(logs))
    if float(np.ptp(logs)) == 0.0:  # identical ratios: the bootstrap has nothing to resample
        low = high = centre
    else:
        rng = np.random.default_rng(zlib.crc32(seed_text.encode()))
        result = stats.bootstrap(
            (logs,),
            _trimmed_log_mean,
            confidence_level=CONFIDENCE,
            n_resamples=RESAMPLES,
            method="BCa",
            random_state=rng,
        )
        low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
        if not (math.isfinite(low) and math.isfinite(high)):  # BCa degenerates on tiny samples: fall back
            low, high = (float(v) for v in np.quantile(_resampled_means(logs, rng), [0.025, 0.975]))
    return RatioEstimate(math.exp(centre) - 1.0, math.exp(low) - 1.0, math.exp(high) - 1.0, len(logs))


def _resampled_means(logs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    picks = rng.integers(0, len(logs), size=(RESAMPLES, len(logs)))
    return _trimmed_log_mean(logs[picks], axis=1)


def decide(ratio: RatioEstimate, tolerance: float) -> PairedVerdict:
    """REGRESSION / IMPROVED / ok from the interval and the tolerance (see the module docstring)."""
    if ratio.low > 0.0 and ratio.change > tolerance:
        return PairedVerdict.REGRESSION
    if ratio.high < 0.0 and ratio.change < -tolerance:
        return PairedVerdict.IMPROVED
    return PairedVerdict.OK
