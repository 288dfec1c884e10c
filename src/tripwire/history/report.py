"""The walk's report: a markdown table, a JSON file with every detail, and a picture (commits as rows, checks as
columns, one colour per kind of difference). The picture needs matplotlib (`tripwire-gate[history]`); without it
the report says so and the table and JSON are still written.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tripwire.history.bisect import Finding
from tripwire.history.rows import CHECKS, Row

# Colours of the picture, per cell kind.
COLOURS = {
    "identical": "#d9f0d3",
    "base": "#bdbdbd",
    "ok": "#d9f0d3",
    "fixed": "#a6dba0",
    "low-bit drift": "#fee08b",
    "low-bit drift, amplified": "#fdae61",
    "value change": "#d73027",
    "structure": "#9e6ebd",
    "syncs": "#fc8d59",
    "compile": "#e7298a",
    "instruments": "#80cdc1",
    "telemetry": "#4575b4",
    "crash": "#000000",
    "fault": "#7f7f7f",
    "error": "#7f3b08",
    "n/a": "#f0f0f0",
    "-": "#f0f0f0",
}
LEGEND = {"-": "not compared", "base": "base (first commit)"}


def _cell(text: str, width: int = 70) -> str:
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def markdown(
    rows: Sequence[Row], title: str, findings: Sequence[Finding] = (), meta: dict[str, Any] | None = None
) -> str:
    """The table: one row per commit, the kind of step, then a cell per check (identical cells left blank)."""
    lines = [f"# {title}", ""]
    if meta and "recorded_seconds" in meta:
        lines += [
            f"Recording these {len(rows)} results took {meta['recorded_seconds']:.0f} s of worker time; this report "
            f"took {meta.get('seconds', 0):.1f} s ({meta.get('ran', 0)} run, {meta.get('reused', 0)} reused, "
            f"{len(rows) - meta.get('ran', 0) - meta.get('reused', 0)} cached).",
            "",
        ]
    if findings:
        lines += ["Bisection: the rows are the commits probed, each compared with the nearest earlier one probed.", ""]
    counts = Counter(row.step for row in rows)
    lines.append("Steps: " + ", ".join(f"{kind} {count}" for kind, count in counts.most_common()) + ".")
    lines += [
        "",
        "Each row is compared with the commit named under `compared with`; `+N commits not run` means the row's",
        "differences also carry the changes of N commits between them that the walk skipped (`--paths`, a crash).",
        "`(result of X)`: the commit was not run; it changed nothing its closure holds (every file, folder listing",
        "and question the run of X read, `tripwire.history.reuse`), so X's result stands for it.",
        "",
        "| commit | subject | step | compared with | " + " | ".join(CHECKS[1:]) + " |",
        "|" + "---|" * (len(CHECKS) + 3),
    ]
    for row in rows:
        cells = []
        for check in CHECKS[1:]:
            cell = row.cells[check]
            cells.append("" if cell.kind in ("identical", "base", "-") else _cell(cell.text))
        cause = row.cells["run"].text.split(": ", 1)[-1]
        step = row.step if row.step not in ("crash", "error", "n/a", "fault") else f"{row.step}: {_cell(cause)}"
        step += f" (result of {row.reused_from[:8]})" if row.reused_from else ""
        subject = _cell(row.commit.subject, 60)
        compared = row.compared.removeprefix("vs ")
        lines.append(f"| {row.commit.short} | {subject} | {step} | {compared} | " + " | ".join(cells) + " |")
    if findings:
        lines += ["", "## First commit of each kind of change (bisection)", ""]
        lines += ["| check | first commit | probes | what |", "|---|---|---|---|"]
        for finding in findings:
            first = f"{finding.first.short} {_cell(finding.first.subject, 50)}" if finding.first else "(a range)"
            lines.append(f"| {finding.check} | {first} | {finding.steps} | {_cell(finding.summary, 90)} |")
    return "\n".join(lines) + "\n"


def to_json(rows: Sequence[Row], findings: Sequence[Finding], meta: dict[str, Any]) -> dict[str, Any]:
    """Every row and finding with every detail, for tools."""
    return {
        "format": "tripwire-history/1",
        **meta,
        "rows": [
            {
                "commit": row.commit.sha,
                "subject": row.commit.subject,
                "status": row.status,
                "step": row.step,
                "kinds": row.kinds,
                "compared_with": row.against,
                "commits_between": row.between,
                "merged": row.merged,
                "reused_from": row.reused_from,
                "seconds": round(row.seconds, 2),
                "cells": {
                    check: {"kind": cell.kind, "text": cell.text, "details": list(cell.details)}
                    for check, cell in row.cells.items()
                },
            }
            for row in rows
        ],
        "bisection": [
            {
                "check": finding.check,
                "first": finding.first.sha if finding.first else None,
                "subject": finding.first.subject if finding.first else "",
                "steps": finding.steps,
                "rounds": finding.rounds,
                "probes": finding.probes,
                "summary": finding.summary,
            }
            for finding in findings
        ],
    }


def picture(rows: Sequence[Row], path: Path, title: str) -> list[Path]:
    """Commits as rows, checks as columns, a colour per kind; PNG and SVG. Returns the files written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
        from matplotlib.colors import ListedColormap
        from matplotlib.patches import Patch
    except ImportError:
        return []
    kinds = list(COLOURS)
    grid = [[kinds.index(row.cells[check].kind if row.cells[check].kind in COLOURS else "-") for check in CHECKS]
            for row in rows]  # fmt: skip
    height = max(3.0, 0.22 * len(rows) + 1.5)
    figure, axes = pyplot.subplots(figsize=(9, height))
    axes.imshow(grid, aspect="auto", cmap=ListedColormap(list(COLOURS.values())), vmin=0, vmax=len(kinds) - 1)
    axes.set_xticks(range(len(CHECKS)), CHECKS)
    axes.set_yticks(range(len(rows)), [f"{row.commit.short} {row.commit.subject[:40]}" for row in rows], fontsize=6)
    axes.xaxis.tick_top()
    used = sorted({row.cells[check].kind for row in rows for check in CHECKS} & set(COLOURS), key=kinds.index)
    axes.legend(
        handles=[Patch(color=COLOURS[kind], label=LEGEND.get(kind, kind)) for kind in used],
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=7,
    )
    axes.set_title(title, fontsize=9, pad=24)
    figure.tight_layout()
    written = []
    for suffix in (".png", ".svg"):
        target = path.with_suffix(suffix)
        figure.savefig(target, dpi=120)
        written.append(target)
    pyplot.close(figure)
    return written


def write_report(
    out: Path, rows: Sequence[Row], findings: Sequence[Finding], meta: dict[str, Any], title: str, stem: str
) -> list[Path]:
    """`<stem>.md`, `<stem>.json` and `<stem>.png`/`.svg` under `out` (stem `history` for a walk, `bisect` for a
    bisection, so one folder keeps both); returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    md = out / f"{stem}.md"
    table = markdown(rows, title, findings)  # without the timings: what the picture shows
    md.write_text(markdown(rows, title, findings, meta), encoding="utf-8")
    data = out / f"{stem}.json"
    data.write_text(json.dumps(to_json(rows, findings, meta), indent=1) + "\n", encoding="utf-8")
    return [md, data, *_picture_once(rows, out / stem, title, table)]


def _picture_once(rows: Sequence[Row], path: Path, title: str, table: str) -> list[Path]:
    """The picture, drawn again only when the table it shows changed (drawing 172 rows takes seconds)."""
    key_file = path.with_suffix(".picture-key")
    key = hashlib.sha256(table.encode()).hexdigest()
    drawn = [path.with_suffix(suffix) for suffix in (".png", ".svg")]
    if all(file.exists() for file in drawn) and key_file.exists() and key_file.read_text(encoding="utf-8") == key:
        return drawn
    written = picture(rows, path, title)
    if written:
        key_file.write_text(key, encoding="utf-8")
    return written
