"""The cost of a history walk, this tree's tripwire against a base's, side by side in one run.

A guard, run by hand on a quiet machine: absolute figures drift by a third between days here, so the walk's cost is
only ever a ratio measured against a base tree's tripwire in the same run. Each round walks the same commits twice,
with the base's tripwire and with this tree's (`python -m tripwire history --no-reuse`, a fresh `--out`), in an
order that alternates round by round; the ratio is the median over rounds of head CPU time / base CPU time (user and
system, of the walk and every process it started). It exits 1 when the ratio is above `--max-ratio`.

The walk runs over a repository the benchmark writes (`--commits` commits of a small training loop, each changing
its learning rate), or over one you name (`--repo`, `--range`, `--paths`, `--scenario`: esper-lite's own, for the
figures of docs/measurements.md). The written loop imports `torch._dynamo` at its top, as `torch.compile` and
`@torch.compiler.disable` do in most loops today: a fork server that stopped keeping what children import cost 1.5x
on esper-lite before stop 52 (docs/measurements.md, "The cost of a history walk"). Its import builds 60,000 objects,
as a project's does, and every fourth commit crashes on an import: a child of a server that had not collected its
garbage then ran a full collection over the server's heap, 0.25 s a crashed commit (stop 60).

    python benchmarks/walk_cost.py [--base b4215d4] [--rounds 3] [--commits 16] [--jobs 2] [--max-ratio 1.05]
        [--repo PATH --range A..B [--paths P ...] --scenario FILE] [--pythonpath DIR ...] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LOOP = '''"""A small training loop; it imports dynamo at its top, as a loop with a compile-disabled part does."""

import torch
{missing}
LR = {lr}

# a project's import: tables, enums and dataclasses, tens of thousands of objects that live as long as the process
REGISTRY = {{f"op{{index}}": (index, [index], {{"lr": index}}) for index in range(20_000)}}


@torch.compiler.disable
def clip(model):
    return torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)


def train():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    data = torch.randn(64, 8)
    losses = []
    for step in range(20):
        loss = model(data).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        clip(model)
        optimizer.step()
        losses.append(loss.item())
    return model, losses
'''

SCENARIO = """from tripwire.scenario import Checkpoint, Region, Scenario

scenario = Scenario(
    name="walk-cost",
    call="loop:train",
    regions=[Region("loop:train", "train")],
    checkpoints=[Checkpoint("loop:train", capture=("return",))],
)
"""


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def write_repo(folder: Path, commits: int) -> tuple[Path, str, Path]:
    """A git repository of `commits` commits of `loop.py`; returns (repo, range, scenario file)."""
    repo = folder / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    for index in range(commits + 1):
        # every fourth commit crashes on an import, as much of a real history does where its environment is gone
        missing = "import tripwire_walk_cost_gone  # noqa: F401\n" if index % 4 == 3 else ""
        (repo / "loop.py").write_text(LOOP.format(lr=0.01 + 0.001 * index, missing=missing), encoding="utf-8")
        _git(repo, "add", "loop.py")
        env = ["-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
        _git(repo, *env, "commit", "-q", "-m", f"lr step {index}")
    scenario = folder / "scenario.py"
    scenario.write_text(SCENARIO, encoding="utf-8")
    first = _git(repo, "rev-list", "--max-parents=0", "HEAD")
    return repo, f"{first}..HEAD", scenario


def base_tree(folder: Path, ref: str) -> Path:
    """This repository's `ref` checked out (detached) under `folder`: the base's tripwire."""
    tree = folder / "base"
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), ref], cwd=ROOT, check=True)
    return tree


def walk(src: Path, args: argparse.Namespace, repo: Path, span: str, scenario: Path, out: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the walk and its processes) of one walk with the tripwire under `src`."""
    command = [sys.executable, "-m", "tripwire", "history", "--repo", str(repo), "--range", span]
    command += ["--scenario", str(scenario), "--out", str(out), "--jobs", str(args.jobs), "--no-reuse"]
    command += ["--paths", *args.paths] if args.paths else []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), *map(str, args.pythonpath)])}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"walk with {src} failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="b4215d4", help="the base tree's commit (default: the walk figures' own)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commits", type=int, default=16, help="commits of the written repository")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--max-ratio", type=float, default=1.05, help="fail above this head/base CPU ratio")
    parser.add_argument("--repo", type=Path, help="walk this repository instead of a written one")
    parser.add_argument("--range", dest="span", help="with --repo: A..B")
    parser.add_argument("--paths", nargs="+", default=[], help="with --repo: only commits touching these")
    parser.add_argument("--scenario", type=Path, help="with --repo: the scenario file")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--pythonpath", nargs="+", type=Path, default=[], help="folders of packages the walked history needs (pyyaml)"
    )
    args = parser.parse_args(argv)
    if args.repo is not None and (args.span is None or args.scenario is None):
        parser.error("--repo needs --range and --scenario")
    with tempfile.TemporaryDirectory(prefix="walk-cost-") as scratch:
        folder = Path(scratch)
        if args.repo is None:
            repo, span, scenario = write_repo(folder, args.commits)
        else:
            repo, span, scenario = args.repo.resolve(), args.span, args.scenario.resolve()
        base = base_tree(folder, args.base)
        try:
            sides = {"base": base / "src", "head": ROOT / "src"}
            walk(sides["head"], args, repo, span, scenario, folder / "warmup")  # untimed: disk caches, pyc files
            rows: list[dict[str, float]] = []
            for index in range(args.rounds):
                order = ("base", "head") if index % 2 == 0 else ("head", "base")
                row: dict[str, float] = {}
                for side in order:
                    wall, cpu = walk(sides[side], args, repo, span, scenario, folder / f"{side}-{index}")
                    row[f"{side}_wall"], row[f"{side}_cpu"] = wall, cpu
                row["ratio"] = row["head_cpu"] / row["base_cpu"]
                rows.append(row)
                print(
                    f"round {index + 1}: base {row['base_cpu']:.1f} s CPU ({row['base_wall']:.1f} s wall), "
                    f"head {row['head_cpu']:.1f} s CPU ({row['head_wall']:.1f} s wall): {row['ratio']:.2f}x",
                    flush=True,
                )
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False)
    ratio = statistics.median(row["ratio"] for row in rows)
    verdict = "ok" if ratio <= args.max_ratio else "SLOWER"
    print(f"walk cost, head / base {args.base}: {ratio:.2f}x CPU (median of {len(rows)} rounds): {verdict}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        summary = {"base": args.base, "range": span, "rounds": rows, "ratio": ratio, "verdict": verdict}
        args.json.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return 0 if verdict == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
