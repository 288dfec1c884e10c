"""Benchmark plots a reviewer reads at a glance, as PNG and SVG (matplotlib, headless).

- `plot_paired`: for a paired A/B, each benchmark's unit times of both sides relative to the base median (box
  and points), and its change with the 95 % interval against the tolerance band (red when it fails).
- `plot_baseline`: for `--compare` against a stored baseline, each benchmark's calibration-normalized rounds of
  the baseline and of this run, and, where git holds earlier versions of the baseline file, the baseline's
  median across those commits (its history).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tripwire.bench.paired import PairedComparison
    from tripwire.bench.store import BenchRun

FORMATS = ("png", "svg")
BASE_COLOUR, HEAD_COLOUR, FAIL_COLOUR = "#4c72b0", "#dd8452", "#c44e52"


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(figure: Any, out: Path, stem: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for extension in FORMATS:
        path = out / f"{stem}.{extension}"
        figure.savefig(path, dpi=110, bbox_inches="tight")
        written.append(path)
    return written


def _boxes(axis: Any, groups: Sequence[Sequence[float]], positions: Sequence[float], colour: str) -> None:
    parts = axis.boxplot(
        groups,
        positions=positions,
        widths=0.3,
        orientation="horizontal",
        patch_artist=True,
        showfliers=False,
        manage_ticks=False,
    )
    for box in parts["boxes"]:
        box.set_facecolor(colour)
        box.set_alpha(0.45)
    for position, values in zip(positions, groups):
        axis.scatter(values, [position] * len(values), s=6, color=colour, alpha=0.6, zorder=3)


def plot_paired(comparison: PairedComparison, out: Path, stem: str = "bench-ab") -> list[Path]:
    """Distributions of both sides and each benchmark's interval; returns the files written."""
    measured = [outcome for outcome in comparison.outcomes if comparison.clock in outcome.ratios]
    if not measured:
        return []
    plt = _pyplot()
    base_label, head_label = comparison.labels
    height = 1.0 + 0.55 * len(measured)
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, height), sharey=True)
    rows = list(range(len(measured)))[::-1]
    base_groups, head_groups = [], []
    for outcome in measured:
        reference = statistics.median(outcome.base.on(comparison.clock))
        base_groups.append([value / reference for value in outcome.base.on(comparison.clock)])
        head_groups.append([value / reference for value in outcome.head.on(comparison.clock)])
    _boxes(left, base_groups, [row + 0.18 for row in rows], BASE_COLOUR)
    _boxes(left, head_groups, [row - 0.18 for row in rows], HEAD_COLOUR)
    left.set_yticks(rows, [outcome.name for outcome in measured])
    left.set_xlabel(f"unit time / {base_label} median ({comparison.clock} clock)")
    left.scatter([], [], color=BASE_COLOUR, label=base_label)
    left.scatter([], [], color=HEAD_COLOUR, label=head_label)
    left.legend(loc="lower right", fontsize="small")
    for row, outcome in zip(rows, measured):
        ratio = outcome.ratios[comparison.clock]
        colour = FAIL_COLOUR if outcome.fails else "black"
        right.errorbar(
            100 * ratio.change,
            row,
            xerr=[[100 * (ratio.change - ratio.low)], [100 * (ratio.high - ratio.change)]],
            fmt="o",
            color=colour,
            capsize=4,
        )
        right.axvspan(-100 * outcome.tolerance, 100 * outcome.tolerance, ymin=0, ymax=1, color="#dddddd", alpha=0.15)
    right.axvline(0.0, color="grey", linewidth=0.8)
    right.set_xlabel(f"change, % ({head_label} vs {base_label}), 95% interval; band = tolerance")
    figure.suptitle(f"paired A/B: {head_label} vs {base_label}")
    written = _save(figure, out, stem)
    plt.close(figure)
    return written


def plot_baseline(
    baseline: BenchRun, current: BenchRun, history: Sequence[tuple[str, BenchRun]], out: Path, stem: str = "bench"
) -> list[Path]:
    """Baseline vs this run per benchmark (normalized rounds), and the baseline's history where there is one."""
    from tripwire.bench.gate import normalized_values

    names = sorted(set(baseline.records) & set(current.records))
    if not names:
        return []
    plt = _pyplot()
    columns = 2 if history else 1
    figure, axes = plt.subplots(1, columns, figsize=(6 * columns + 1, 1.0 + 0.55 * len(names)), squeeze=False)
    left = axes[0][0]
    rows = list(range(len(names)))[::-1]
    base_groups, now_groups = [], []
    for name in names:
        reference = statistics.median(normalized_values(baseline.records[name]))
        base_groups.append([v / reference for v in normalized_values(baseline.records[name])])
        now_groups.append([v / reference for v in normalized_values(current.records[name])])
    _boxes(left, base_groups, [row + 0.18 for row in rows], BASE_COLOUR)
    _boxes(left, now_groups, [row - 0.18 for row in rows], HEAD_COLOUR)
    left.set_yticks(rows, names)
    left.set_xlabel("gated metric / baseline median (calibration-normalized)")
    left.scatter([], [], color=BASE_COLOUR, label="baseline")
    left.scatter([], [], color=HEAD_COLOUR, label="this run")
    left.legend(loc="lower right", fontsize="small")
    if history:
        right = axes[0][1]
        history = [*history, ("this run", current)]
        for name in names:
            points = [
                (index, statistics.median(normalized_values(run.records[name])))
                for index, (_, run) in enumerate(history)
                if name in run.records
            ]
            if points:
                first = points[0][1]
                right.plot([i for i, _ in points], [v / first for _, v in points], marker="o", label=name)
        right.set_xticks(range(len(history)), [label for label, _ in history], rotation=45, ha="right")
        right.set_ylabel("median / the first version's")
        right.set_title("baseline history (committed versions), then this run")
        right.legend(fontsize="x-small")
    left.set_title("the stored baseline vs this run")
    written = _save(figure, out, stem)
    plt.close(figure)
    return written
