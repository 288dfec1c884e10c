"""Renders a paired A/B: a terminal table, markdown (CI job summaries) and JSON with every raw unit.

Columns: benchmark, the two sides' median unit times and throughput (raw, measured in the same run on the same
machine, so they read in the same direction as `change`), `change` with its 95 % interval on the gated clock,
the other clock's change for reference, the tolerance, the blocks measured and the verdict.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict
from typing import Any

from tripwire.bench.paired import CLOCKS, BenchOutcome, PairedComparison
from tripwire.bench.report import markdown_table


def _percent(value: float) -> str:
    return f"{100.0 * value:+.1f}%"


def interval(outcome: BenchOutcome, clock: str) -> str:
    ratio = outcome.ratios.get(clock)
    if ratio is None:
        return "-"
    return f"{_percent(ratio.change)} [{_percent(ratio.low)}, {_percent(ratio.high)}]"


def throughput(outcome: BenchOutcome, times_ms: list[float]) -> str:
    """The first work unit per second at the median unit time, e.g. `12.3 env-epochs/s`."""
    units = outcome.settings.get("units") or {}
    if not units or not times_ms:
        return ""
    unit, amount = next(iter(units.items()))
    per_unit = amount * int(outcome.settings.get("runs_per_unit", 1))
    return f"{1000.0 * per_unit / statistics.median(times_ms):.3g} {unit.replace('_', '-')}/s"


def side_cell(outcome: BenchOutcome, times_ms: list[float]) -> str:
    if not times_ms:
        return "-"
    rate = throughput(outcome, times_ms)
    return f"{statistics.median(times_ms):.1f} ms" + (f" ({rate})" if rate else "")


def headers(comparison: PairedComparison) -> tuple[str, ...]:
    base, head = comparison.labels
    other = next(clock for clock in CLOCKS if clock != comparison.clock)
    return (
        "benchmark",
        base,
        head,
        f"change ({comparison.clock}) [95% CI]",
        f"{other} change",
        "tolerance",
        "blocks",
        "verdict",
    )


def cells(outcome: BenchOutcome, clock: str) -> tuple[str, ...]:
    other = next(c for c in CLOCKS if c != clock)
    ratio = outcome.ratios.get(clock)
    return (
        outcome.name,
        side_cell(outcome, outcome.base.on(clock)),
        side_cell(outcome, outcome.head.on(clock)),
        interval(outcome, clock),
        interval(outcome, other).split(" [")[0],
        f"{100.0 * outcome.tolerance:.0f}%",
        str(ratio.blocks) if ratio else "-",
        outcome.verdict_text,
    )


def legend(comparison: PairedComparison) -> list[str]:
    base, head = comparison.labels
    clock = "process CPU time" if comparison.clock == "cpu" else "wall-clock (CUDA-event on a GPU) time"
    lines = [
        f"change: {head} time / {base} time - 1 on {clock} (+ = {head} slower), from paired units measured in "
        "ABBA/BAAB blocks in two persistent worker processes, one at a time; 20%-trimmed mean of the block "
        "ratios with its 95% bootstrap interval.",
        f"{base} and {head}: raw median unit times (and throughput) on the gated clock, measured in this run on "
        "this machine, so they agree in direction with change.",
        "REGRESSION: the interval lies above 0 and the change exceeds the tolerance; CHANGED: an exact proxy "
        "(aten ops, host syncs per run) differs.",
    ]
    for label in comparison.labels:
        ctx = comparison.contexts.get(label, {})
        lines.append(
            f"{label}: torch {ctx.get('torch', '?')}, {ctx.get('threads', '?')} threads, {ctx.get('cpu', '?')}, "
            f"address-space randomization {ctx.get('aslr', '?')}, benchmarks of one thread in all on CPU "
            f"{ctx.get('single_thread_cpu', '?')}"
        )
    firsts = [
        f"{outcome.name} {base:.2f} s / {head:.2f} s"
        for outcome in comparison.outcomes
        for base, head in [outcome.first_unit_s]
        if base is not None and head is not None
    ]
    if firsts:
        lines.append(
            f"first unit of each benchmark ({comparison.labels[0]} / {comparison.labels[1]}: building it, and "
            f"compiling it where it compiles; kept out of the timings above): {', '.join(firsts)}"
        )
    placed = [f"{outcome.name} {outcome.head.cpus}" for outcome in comparison.outcomes if outcome.head.cpus]
    if placed:
        lines.append(f"CPUs a unit ran on: {', '.join(placed)}")
    return lines


def proxy_lines(comparison: PairedComparison) -> list[str]:
    lines = []
    for outcome in comparison.outcomes:
        for key, (old, new) in outcome.proxies.items():
            mark = "same" if old == new else "CHANGED"
            lines.append(f"{outcome.name} {key}: {old} -> {new} ({mark})")
    return lines


def summary_line(comparison: PairedComparison) -> str:
    failed = [outcome for outcome in comparison.outcomes if outcome.fails]
    base, head = comparison.labels
    if not failed:
        return f"bench A/B: PASS ({len(comparison.outcomes)} benchmarks, {head} vs {base})"
    names = ", ".join(f"{outcome.name} {outcome.verdict_text}" for outcome in failed)
    return f"bench A/B: FAIL ({len(failed)} of {len(comparison.outcomes)}): {names}"


def render_text(comparison: PairedComparison) -> str:
    table = [headers(comparison), *(cells(outcome, comparison.clock) for outcome in comparison.outcomes)]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    out = []
    for index, row in enumerate(table):
        out.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        if index == 0:
            out.append("  ".join("-" * width for width in widths))
    out.extend(proxy_lines(comparison))
    out.extend(legend(comparison))
    out.append(summary_line(comparison))
    return "\n".join(out)


def render_markdown(comparison: PairedComparison, title: str, plots: list[str] | None = None) -> str:
    rows = [(cells(outcome, comparison.clock), outcome.fails) for outcome in comparison.outcomes]
    lines = [f"### {title}", "", *markdown_table(headers(comparison), rows), ""]
    lines.extend(f"- {line}" for line in proxy_lines(comparison) + legend(comparison))
    for plot in plots or []:
        lines.append(f"\n![{plot}]({plot})")
    lines.append(f"\n**{summary_line(comparison)}**")
    return "\n".join(lines) + "\n"


def report_json(comparison: PairedComparison) -> dict[str, Any]:
    outcomes = []
    for outcome in comparison.outcomes:
        data = asdict(outcome)
        data["verdict"] = outcome.verdict.value
        data["proxy_verdict"] = None if outcome.proxy_verdict is None else outcome.proxy_verdict.value
        data["fails"] = outcome.fails
        data["proxies"] = {key: list(pair) for key, pair in outcome.proxies.items()}
        outcomes.append(data)
    return {
        "passed": not comparison.failed,
        "summary": summary_line(comparison),
        "labels": list(comparison.labels),
        "clock": comparison.clock,
        "contexts": comparison.contexts,
        "outcomes": outcomes,
    }


def dumps_json(comparison: PairedComparison) -> str:
    return json.dumps(report_json(comparison), indent=1, sort_keys=True) + "\n"
