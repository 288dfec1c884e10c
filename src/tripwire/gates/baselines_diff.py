"""`python -m tripwire.gates.baselines_diff BASE HEAD`: what a pull request changed under baselines/, as markdown.

    python -m tripwire.gates.baselines_diff base/baselines baselines >> "$GITHUB_STEP_SUMMARY"

BASE and HEAD are the baselines folders of the two checkouts. Every added, removed or changed golden is listed,
with what moved in it: telemetry snapshots by event count (`tripwire.telemetry.counts.diff_counts`), sync budgets by
region, trajectories by checkpoint, benchmark baselines by benchmark (median, threshold, proxies). A reviewer
reads this to confirm each moved count or budget was meant. It prints "no changes" when nothing moved and
always exits 0 (it flags, the gate judges); a missing folder is a usage error (exit 2).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tripwire.telemetry.counts import diff_counts

MAX_LINES = 40


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def files(root: Path) -> set[str]:
    """Paths (relative, posix) of every file under `root`."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def _budget_lines(base: Any, head: Any) -> list[str]:
    regions_base, regions_head = base.get("regions", {}), head.get("regions", {})
    lines = []
    for region in sorted(set(regions_base) | set(regions_head)):
        before, after = regions_base.get(region), regions_head.get(region)
        if before != after:
            delta = f" ({after - before:+d})" if isinstance(before, int) and isinstance(after, int) else ""
            lines.append(f"region `{region}`: {before} -> {after}{delta}")
    sites_base, sites_head = base.get("sites", {}), head.get("sites", {})
    for region in sorted(set(sites_base) | set(sites_head)):
        old, new = sites_base.get(region, {}), sites_head.get(region, {})
        gone = [f"`{site}`" for site in sorted(set(old) - set(new))]
        came = [f"`{site}`" for site in sorted(set(new) - set(old))]
        if gone or came:
            lines.append(
                f"call sites in `{region}`: " + ", ".join([*(f"-{g}" for g in gone), *(f"+{c}" for c in came)])
            )
    return lines


def _trajectory_lines(base: Any, head: Any) -> list[str]:
    before = {name: digests for name, digests in base.get("checkpoints", [])}
    after = {name: digests for name, digests in head.get("checkpoints", [])}
    changed = [name for name in after if name in before and before[name] != after[name]]
    lines = []
    if changed:
        lines.append(f"{len(changed)} of {len(after)} checkpoints have new digests, first `{changed[0]}`")
    added, removed = sorted(set(after) - set(before)), sorted(set(before) - set(after))
    if added:
        lines.append(f"{len(added)} checkpoints added, e.g. `{added[0]}`")
    if removed:
        lines.append(f"{len(removed)} checkpoints removed, e.g. `{removed[0]}`")
    if base.get("context") != head.get("context"):
        lines.append("determinism context changed")
    return lines


def _static_lines(base: Any, head: Any) -> list[str]:
    """`file: function [kind] a -> b` for each static-audit count that changed."""
    lines = []
    old, new = base.get("sites", {}), head.get("sites", {})
    for file in sorted(set(old) | set(new)):
        for key in sorted(set(old.get(file, {})) | set(new.get(file, {}))):
            a, b = old.get(file, {}).get(key, 0), new.get(file, {}).get(key, 0)
            if a != b:
                lines.append(f"`{file}`: {key} {a} -> {b}")
    return lines


def _median(record: dict[str, Any]) -> float | None:
    values = record.get("cpu_ms") if record.get("clock") == "cpu" else record.get("samples_ms")
    return statistics.median(values) if values else None


def _bench_lines(base: Any, head: Any) -> list[str]:
    before, after = base.get("records", {}), head.get("records", {})
    lines = [f"benchmark `{name}` added" for name in sorted(set(after) - set(before))]
    lines += [f"benchmark `{name}` removed" for name in sorted(set(before) - set(after))]
    for name in sorted(set(before) & set(after)):
        old, new = before[name], after[name]
        for key in ("threshold", "metric", "proxies"):
            if old.get(key) != new.get(key):
                lines.append(f"`{name}` {key}: {old.get(key)} -> {new.get(key)}")
        m_old, m_new = _median(old), _median(new)
        if m_old and m_new and m_old != m_new:
            lines.append(f"`{name}` median round: {m_old:.1f} -> {m_new:.1f} ms ({100 * (m_new / m_old - 1):+.1f}%)")
    return lines


def describe(relative: str, base: Any, head: Any) -> list[str]:
    """What moved in one changed golden (empty when the kind is unknown or a side is not JSON)."""
    if not isinstance(base, dict) or not isinstance(head, dict):
        return []
    if relative.startswith("telemetry/"):
        return diff_counts(base, head)
    if relative.startswith("sync_budgets/"):
        return _budget_lines(base, head)
    if relative.startswith(("trajectories/", "payloads/")):
        return _trajectory_lines(base, head)
    if relative.startswith("static_sync/"):
        return _static_lines(base, head)
    if relative.startswith("bench/"):
        return _bench_lines(base, head)
    return []


def render(base_root: Path, head_root: Path) -> str:
    before, after = files(base_root), files(head_root)
    changed = sorted(p for p in before & after if (base_root / p).read_bytes() != (head_root / p).read_bytes())
    added, removed = sorted(after - before), sorted(before - after)
    if not (changed or added or removed):
        return "### baselines/\n\nno changes under baselines/\n"
    out = [
        "### :warning: this pull request changes baselines/",
        "",
        "Every golden below moved. Check that each change was meant and that the commit message says why.",
        "",
    ]
    out += [f"- added `{p}`" for p in added]
    out += [f"- removed `{p}`" for p in removed]
    for relative in changed:
        out.append(f"- changed `{relative}`")
        details = describe(relative, _load(base_root / relative), _load(head_root / relative))
        shown = details[:MAX_LINES]
        out += [f"  - {line.strip()}" for line in shown]
        if len(details) > len(shown):
            out.append(f"  - ... {len(details) - len(shown)} more")
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m tripwire.gates.baselines_diff BASE_BASELINES_DIR HEAD_BASELINES_DIR", file=sys.stderr)
        return 2
    base, head = Path(args[0]), Path(args[1])
    for label, folder in (("base", base), ("head", head)):
        if not folder.is_dir():
            print(f"error: {label} folder {folder} does not exist; pass each checkout's baselines/", file=sys.stderr)
            return 2
    sys.stdout.write(render(base, head))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
