"""Renders a stored-baseline comparison: a terminal table, a markdown table (CI summaries) and a JSON report.

Columns: benchmark, metric, baseline, now, raw, machine, change, p, threshold, verdict.
- `baseline` and `now` are raw medians in the metric's unit, each on the machine and day it was measured;
- `raw` is their relative change (+ = slower for a time, faster for a throughput), machine differences included;
- `machine` is how much slower (+) the calibration step ran now than when the baseline was recorded;
- `change` is what the gate judges: the raw change with the machine divided out (calibration-normalized).
So `raw` and `change` can disagree in sign: 13.7 -> 13.1 env-epochs/s is raw -4.4 %, but on a machine whose
calibration runs 20 % slower it is change +14.7 %. The legend under the table says so, and when the baseline
comes from another machine it says that the p-value cannot tell a machine from a regression there.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tripwire.bench.gate import Comparison, Row

HEADERS = ("benchmark", "metric", "baseline", "now", "raw", "machine", "change", "p", "threshold", "verdict")


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100.0 * value:+.1f}%"


def _number(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "count":
        return str(int(value))
    if abs(value) >= 100:
        return f"{value:,.1f} {unit}"
    return f"{value:.3g} {unit}"


def _cells(row: Row) -> tuple[str, ...]:
    change = _percent(row.change)
    p_value = "-" if row.p_value is None else f"{row.p_value:.2g}"
    if row.unit == "count":
        threshold = "exact"
    else:
        threshold = "-" if row.threshold is None else f"{100.0 * row.threshold:.0f}%"
    verdict = row.verdict.value + (f" ({row.note})" if row.note and row.verdict.fails else "")
    return (
        row.benchmark,
        row.metric,
        _number(row.baseline, row.unit),
        _number(row.now, row.unit),
        "-" if row.unit == "count" else _percent(row.raw_change),
        "-" if row.unit == "count" else _percent(row.machine),
        change,
        p_value,
        threshold,
        verdict,
    )


def summary_line(comparison: Comparison) -> str:
    failures = comparison.failures()
    gated = sum(1 for row in comparison.rows if row.unit != "count")
    if not failures:
        return f"bench gate: PASS ({gated} benchmarks, {len(comparison.rows) - gated} exact proxies)"
    names = ", ".join(f"{row.benchmark} {row.metric} {row.verdict.value}" for row in failures)
    return f"bench gate: FAIL ({len(failures)} of {len(comparison.rows)} rows): {names}"


LEGEND = (
    "baseline, now: raw medians, each on the machine and day it ran; raw: their change (+ = slower time or faster "
    "throughput); machine: how much slower (+) the fixed calibration step ran now than at the baseline; change: "
    "raw with the machine divided out (calibration-normalized), which is what the gate judges against the threshold."
)


def other_machine(comparison: Comparison) -> bool:
    base, now = comparison.baseline_context, comparison.current_context
    return any(
        base.get(key) != now.get(key) for key in ("node", "cpu", "torch", "gpu") if base.get(key) or now.get(key)
    )


def context_lines(comparison: Comparison) -> list[str]:
    base, now = comparison.baseline_context, comparison.current_context
    lines = [LEGEND]
    for key in ("node", "cpu", "gpu", "torch"):
        if base.get(key) or now.get(key):
            same = "" if base.get(key) == now.get(key) else "  (differs)"
            lines.append(f"{key}: baseline {base.get(key) or '-'} | now {now.get(key) or '-'}{same}")
    if other_machine(comparison):
        lines.append(
            "the baseline comes from another machine or build: its rounds and these differ by the machine as well "
            "as by the code, so a p-value here is small whenever the machines differ and only the threshold "
            "decides. For a verdict on the code alone, measure base and head side by side on one machine: "
            "python -m tripwire bench-ab --base <checkout of the base> --head ."
        )
    return lines


def render_text(comparison: Comparison) -> str:
    table = [HEADERS, *(_cells(row) for row in comparison.rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADERS))]
    out = []
    for index, line in enumerate(table):
        out.append("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
        if index == 0:
            out.append("  ".join("-" * width for width in widths))
    out.extend(context_lines(comparison))
    out.append(summary_line(comparison))
    return "\n".join(out)


def markdown_table(headers: tuple[str, ...], rows: list[tuple[tuple[str, ...], bool]]) -> list[str]:
    """A markdown table: the first cell of each row as code, the last in bold where the row fails."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for cells, fails in rows:
        marked = [f"`{cells[0]}`", *cells[1:-1], f"**{cells[-1]}**" if fails else cells[-1]]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in marked) + " |")
    return lines


def render_markdown(comparison: Comparison, plots: list[str] | None = None) -> str:
    rows = [(_cells(row), row.verdict.fails) for row in comparison.rows]
    lines = ["### Benchmark gate", "", *markdown_table(HEADERS, rows), ""]
    lines.extend(f"- {line}" for line in context_lines(comparison))
    lines.extend(f"\n![{plot}]({plot})" for plot in plots or [])
    lines.append(f"\n**{summary_line(comparison)}**")
    return "\n".join(lines) + "\n"


def report_json(comparison: Comparison) -> dict[str, Any]:
    rows = []
    for row in comparison.rows:
        data = asdict(row)
        data["verdict"] = row.verdict.value
        data["fails"] = row.verdict.fails
        rows.append(data)
    return {
        "passed": not comparison.failed,
        "summary": summary_line(comparison),
        "baseline_context": comparison.baseline_context,
        "current_context": comparison.current_context,
        "rows": rows,
    }


def dumps_json(comparison: Comparison) -> str:
    return json.dumps(report_json(comparison), indent=2, sort_keys=True) + "\n"


def publish_report(out: Path, stem: str, markdown: str, json_text: str) -> tuple[Path, Path]:
    """Write `<stem>.md` and `<stem>.json` into `out` and append the markdown to `$GITHUB_STEP_SUMMARY` when set."""
    out.mkdir(parents=True, exist_ok=True)
    paths = out / f"{stem}.md", out / f"{stem}.json"
    paths[0].write_text(markdown, encoding="utf-8")
    paths[1].write_text(json_text, encoding="utf-8")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as handle:
            handle.write(markdown + "\n")
    return paths
