"""Did widening esper-lite's PPO golden tolerance hide a refactor drift? Measured from a history walk's results.

    python examples/esper-lite/golden_tolerance.py --walk build/history/ppo-update-golden --repo ../esper-lite

For every commit of the walk where the golden test exists and the scenario ran, this reads the nine metrics the test
asserts (from the recorded `PPOAgent.update` checkpoint's values) and, from the same commit's own test file, the
golden values and the tolerance it asserts them with. It prints one row per commit where something moved: the
metrics changed from the previous commit (by how much), or the goldens did, or the commit's own test would fail on
this machine at its own tolerance or at the first tolerance, 1e-6. Reading: a metric change between 1e-6 and the
widened tolerance with no golden update is a refactor drift that only the widened tolerance lets through.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
from pathlib import Path
from typing import Any

from tripwire import Result

TEST = "tests/simic/test_ppo_update_golden.py"
CHECKPOINT = "PPOAgent.update#1"
FIRST_TOLERANCE = 1e-6


def goldens_of(source: str) -> tuple[dict[str, float], float]:
    """The K=1 golden metrics a version of the test asserts, and its absolute tolerance."""
    tree = ast.parse(source)
    tolerance = FIRST_TOLERANCE
    goldens: dict[str, float] = {}
    for node in ast.walk(tree):
        target = getattr(node, "target", None) or (getattr(node, "targets", None) or [None])[0]
        name = getattr(target, "id", "")
        if name == "_GOLDENS" and isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            goldens = dict(ast.literal_eval(node.value)[1])
        elif name == "_GOLDEN_ABS_TOLERANCE" and isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value:
            tolerance = float(ast.literal_eval(node.value))
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Subscript):
            call = node.comparators[0]
            key = getattr(node.left.slice, "value", None)
            if isinstance(call, ast.Call) and getattr(call.func, "attr", "") == "approx" and isinstance(key, str):
                if isinstance(call.args[0], ast.Constant):
                    goldens[key] = float(call.args[0].value)
                for keyword in call.keywords:
                    if keyword.arg == "abs" and isinstance(keyword.value, ast.Constant):
                        tolerance = float(keyword.value.value)
    return goldens, tolerance


def metrics_of(folder: Path, keys: list[str]) -> dict[str, float]:
    values = Result.load(folder).values or {}
    checkpoint = values.get(CHECKPOINT, {})
    return {key: float(checkpoint[f"return.{key}"].item()) for key in keys if f"return.{key}" in checkpoint}


def rows(walk: Path, repo: Path) -> list[dict[str, Any]]:
    history = json.loads((walk / "history.json").read_text())
    cache = Path(history["cache"])
    out, previous = [], None
    for row in history["rows"]:
        if row["status"] != "ok":
            continue
        sha = row["commit"]
        source = subprocess.run(["git", "-C", str(repo), "show", f"{sha}:{TEST}"], capture_output=True, text=True)
        goldens, tolerance = goldens_of(source.stdout)
        metrics = metrics_of(cache / sha, list(goldens))
        off = max((abs(metrics[k] - goldens[k]) for k in goldens if k in metrics), default=float("nan"))
        moved = (
            max(abs(metrics[k] - previous["metrics"][k]) for k in metrics if k in previous["metrics"])
            if previous
            else 0.0
        )
        entry = {"sha": sha, "subject": row["subject"], "metrics": metrics, "goldens": goldens}
        entry |= {"tolerance": tolerance, "off": off, "moved": moved}
        entry["golden_changed"] = bool(previous) and goldens != previous["goldens"]
        out.append(entry)
        previous = entry
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--walk", type=Path, required=True, help="the --out folder of the history walk")
    parser.add_argument("--repo", type=Path, required=True, help="the esper-lite checkout the walk ran on")
    args = parser.parse_args()
    header = "| commit | subject | metrics moved (max abs) | goldens updated | off its goldens | own tolerance |"
    print(header + " passes own | passes 1e-6 |")
    print("|---|---|---|---|---|---|---|---|")
    entries = rows(args.walk, args.repo)
    for entry in entries:
        if entry["moved"] == 0.0 and not entry["golden_changed"] and entry["off"] <= FIRST_TOLERANCE:
            continue  # nothing moved, and the commit's own test passes even at the first tolerance
        print(
            f"| {entry['sha'][:8]} | {entry['subject'][:60]} | {entry['moved']:.3g} | "
            f"{'yes' if entry['golden_changed'] else ''} | {entry['off']:.3g} | {entry['tolerance']:g} | "
            f"{'yes' if entry['off'] <= entry['tolerance'] else 'NO'} | {'yes' if entry['off'] <= 1e-6 else 'NO'} |"
        )
    quiet = sum(1 for e in entries if e["moved"] == 0.0 and not e["golden_changed"] and e["off"] <= FIRST_TOLERANCE)
    print(f"\n{len(entries)} commits ran the golden test; {quiet} moved nothing and pass at {FIRST_TOLERANCE:g}.")


if __name__ == "__main__":
    main()
