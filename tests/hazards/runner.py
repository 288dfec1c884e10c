"""`nox -s hazards`: apply every catalogued hazard to a temporary copy of the tree and check the right guardrail fires.

    python tests/hazards/runner.py [--only NAME ...] [--jobs 2] [--markdown docs/hazards.md] [--keep DIR]

Steps: copy src/, tests/guardrails/, benchmarks/, baselines/ and pyproject.toml into a temporary folder (the
clean copy); record the goldens of each scenario the hazards need from the clean copy, then check the clean
copy against them (the control: nothing may fire); then, for each hazard, copy the clean tree, patch it (every
anchor must exist exactly once) and run only the guardrails the hazard names, in a subprocess with PYTHONPATH at
the copy's src/. The benchmark hazard runs last and alone (an interleaved A/B of the clean and patched trees).

Verdict per hazard: `caught` when the expected guardrail fired and nothing outside its tolerated companions (or
the guardrails it implies, `catalogue.IMPLIED`: telemetry payloads beside telemetry counts or a trajectory) did;
`MISSED` when nothing fired; `WRONG GUARDRAIL` otherwise; `ERROR` when the patch or a guardrail run broke. A
control hazard (a change that changes nothing: a verbatim move, a loop reworded as a comprehension) is `clean`
when nothing fired, `FALSE ALARM` otherwise. Exit 1 unless every hazard is caught and every control is clean.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(ROOT / "tests" / "guardrails"))  # hot_path_modules and config_golden, imported when needed

from catalogue import (  # noqa: E402
    BENCH,
    CONFIG,
    EXERCISED,
    HAZARDS,
    IMPLIED,
    IMPORTS,
    LOADS_WITHOUT,
    STATIC_AUDIT,
    AnchorError,
    Hazard,
    apply_edits,
)

COPIED = ("src", "tests/guardrails", "tests/cifar_files.py", "benchmarks", "baselines", "pyproject.toml")
IGNORED = shutil.ignore_patterns("__pycache__", "*.egg-info", ".pytest_cache", "build")
PROBE = HERE / "probe.py"
NOT_SCENARIOS = ("imports", "static", "config", "loads-without", "bench", "exercised")  # run kinds, no scenario
EXERCISE = HERE / "exercise.py"


@dataclass(frozen=True)
class Outcome:
    """What one hazard (or the control) did: the guardrails that fired, with their first failure line."""

    name: str
    expected: str
    fired: dict[str, str]
    verdict: str
    seconds: float


def copy_tree(source: Path, dest: Path) -> Path:
    """The parts of `source` the guardrails need, copied to `dest`."""
    for part in COPIED:
        origin = source / part
        if origin.is_dir():
            shutil.copytree(origin, dest / part, ignore=IGNORED)
        else:
            (dest / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, dest / part)
    return dest


def tree_env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree / "src"), "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}


def run_probe(tree: Path, scenario: str, goldens: Path, mode: str, out: Path | None = None) -> dict[str, str]:
    command = [sys.executable, str(PROBE), str(tree), scenario, str(goldens), mode, *([str(out)] if out else [])]
    done = subprocess.run(command, cwd=tree, env=tree_env(tree), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"probe {mode} of {scenario} in {tree} failed:\n{done.stderr[-3000:]}")
    if out is None:
        return {}
    fired: dict[str, str] = json.loads(out.read_text(encoding="utf-8"))["fired"]
    return fired


def run_imports(tree: Path) -> dict[str, str]:
    """lint-imports on the copy; the first BROKEN contract line when it fails."""
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(lint), "--no-cache"], cwd=tree, env=tree_env(tree), capture_output=True, text=True, check=False
    )
    if done.returncode == 0:
        return {}
    broken = [line.strip() for line in done.stdout.splitlines() if line.rstrip().endswith("BROKEN")]
    return {IMPORTS: broken[0] if broken else done.stdout.strip().splitlines()[-1]}


def run_static(clean: Path, tree: Path) -> dict[str, str]:
    """The static sync audit of the modules the loop reaches: the clean copy's counts budget the patched one."""
    from hot_path_modules import hot_path_modules

    from tripwire.gates.static_audit import audit, budget_payload, check

    recorded = budget_payload(audit(hot_path_modules(clean), clean))  # counts and call lines, as the gate's file
    report = check(audit(hot_path_modules(tree), tree), recorded["sites"], recorded["lines"])
    return {} if report.ok else {STATIC_AUDIT: report.over[0]}


def run_config(clean: Path, tree: Path) -> dict[str, str]:
    """The configuration golden: the clean copy's effective values (defaults, presets and built-in task specs)
    against the patched one's."""
    from config_golden import snapshot_differences

    script = ROOT / "tests" / "guardrails" / "config_golden.py"
    snapshots = []
    for copy in (clean, tree):
        done = subprocess.run(
            [sys.executable, str(script)], cwd=copy, env=tree_env(copy), capture_output=True, text=True, check=False
        )
        if done.returncode:
            raise RuntimeError(f"config snapshot of {copy} failed:\n{done.stderr[-2000:]}")
        snapshots.append(json.loads(done.stdout))
    differences = snapshot_differences(snapshots[0], snapshots[1])
    return {CONFIG: "; ".join(differences)} if differences else {}


def run_loads_without(tree: Path) -> dict[str, str]:
    """The declared "loads without" promises (the copy's pyproject.toml), then what each module was seen to load
    without (the copy's baselines/loads_seen.json), each imported from the copy's src/."""
    from tripwire.common.errors import read_golden_json
    from tripwire.gates.loads_seen import check_seen, read_golden
    from tripwire.gates.loads_without import check_loads_without, read_promises

    broken = check_loads_without(read_promises(tree / "pyproject.toml"), tree / "src")
    if not broken:
        path = tree / "baselines" / "loads_seen.json"
        broken, _ = check_seen(read_golden(read_golden_json(path, f"{path} is missing"), str(path)), tree / "src")
    return {LOADS_WITHOUT: broken[0]} if broken else {}


def commit_base(clean: Path) -> None:
    """Make the clean copy a git repository of one commit: each hazard's copy then diffs against it, as the gate's
    `--against` diffs a change against its base."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "hazards", "GIT_AUTHOR_EMAIL": "hazards@localhost"}
    env |= {"GIT_COMMITTER_NAME": "hazards", "GIT_COMMITTER_EMAIL": "hazards@localhost"}
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "clean copy"]):
        subprocess.run(["git", *command], cwd=clean, env=env, check=True, capture_output=True)


def run_exercised(tree: Path) -> dict[str, str]:
    """The gate's changed-line check: every scenario of the copy run under coverage.py, then the lines the hazard
    changed (git diff against the clean commit) that none of them ran, minus the copy's reviewed exclusions."""
    from tripwire.gates.exercised import check_changed_lines, load_exclusions

    data = tree / "build" / "coverage" / ".coverage"
    data.parent.mkdir(parents=True, exist_ok=True)
    env = {**tree_env(tree), "COVERAGE_FILE": str(data), "COVERAGE_RCFILE": str(tree / "pyproject.toml")}
    for command in (["run", str(EXERCISE), str(tree)], ["combine", "-q"]):
        done = subprocess.run(
            [sys.executable, "-m", "coverage", *command], cwd=tree, env=env, capture_output=True, text=True, check=False
        )
        if done.returncode:
            raise RuntimeError(f"coverage {command[0]} in {tree} failed:\n{done.stderr[-3000:]}")
    exclusions = load_exclusions(tree / "tests" / "guardrails" / "unexercised.toml", tree)
    report = check_changed_lines(tree, "HEAD", data, ["src/esper"], exclusions)
    return {} if report.ok else {EXERCISED: f"{len(report.unseen)} unseen: {report.unseen[0].format()}"}


def run_bench(clean: Path, tree: Path, bench_filter: str) -> dict[str, str]:
    """Paired A/B of the clean copy (base) and the patched copy (head) through `python -m tripwire bench-ab`."""
    out = tree / "build" / "bench-ab"
    command = [sys.executable, "-m", "tripwire", "bench-ab", "--base", str(clean), "--head", str(tree)]
    command += ["--out", str(out), "-k", bench_filter]
    done = subprocess.run(command, cwd=tree, env=tree_env(clean), capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1) or not (out / "bench-ab.json").exists():
        raise RuntimeError(f"bench A/B failed (exit {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    report = json.loads((out / "bench-ab.json").read_text(encoding="utf-8"))
    failed = [outcome for outcome in report["outcomes"] if outcome["fails"]]
    if not failed:
        return {}
    outcome = failed[0]
    ratio = outcome["ratios"].get(report["clock"])
    change = ""
    if ratio is not None:
        change = f" {100 * ratio['change']:+.1f}% [{100 * ratio['low']:+.1f}%, {100 * ratio['high']:+.1f}%]"
    return {BENCH: f"{outcome['name']}{change} {outcome['verdict']} {outcome['note']}".rstrip()}


def judge(hazard: Hazard, fired: dict[str, str]) -> str:
    if hazard.control:
        return "clean" if not fired else "FALSE ALARM"
    if not fired:
        return "MISSED"
    allowed = {hazard.expected, *hazard.tolerated, *IMPLIED.get(hazard.expected, ())}
    if hazard.expected in fired and set(fired) <= allowed:
        return "caught"
    return "WRONG GUARDRAIL"


def run_hazard(hazard: Hazard, clean: Path, goldens: Path, work: Path) -> Outcome:
    start = time.perf_counter()
    tree = work / hazard.name
    shutil.copytree(clean, tree, ignore=IGNORED)
    try:
        apply_edits(tree, hazard.edits)
        fired = check_guardrails(hazard, clean, tree, goldens)
    except (AnchorError, RuntimeError) as error:
        print(f"{hazard.name}: {error}", file=sys.stderr)
        return Outcome(hazard.name, hazard.expected, {}, "ERROR", time.perf_counter() - start)
    return Outcome(hazard.name, hazard.expected, fired, judge(hazard, fired), time.perf_counter() - start)


def check_guardrails(hazard: Hazard, clean: Path, tree: Path, goldens: Path) -> dict[str, str]:
    """Run the guardrail subsets the hazard names on the patched tree; returns what fired."""
    fired: dict[str, str] = {}
    for run in hazard.runs:
        fired.update(check_one(run, hazard, clean, tree, goldens))
    return fired


def check_one(run: str, hazard: Hazard, clean: Path, tree: Path, goldens: Path) -> dict[str, str]:
    if run == "imports":
        return run_imports(tree)
    if run == "static":
        return run_static(clean, tree)
    if run == "config":
        return run_config(clean, tree)
    if run == "loads-without":
        return run_loads_without(tree)
    if run == "bench":
        return run_bench(clean, tree, hazard.bench_filter)
    if run == "exercised":
        return run_exercised(tree)
    return run_probe(tree, run, goldens, "check", tree / f"fired-{run}.json")


def run_control(scenario: str, clean: Path, goldens: Path) -> Outcome:
    """Record the scenario's goldens from the clean copy, then check the clean copy against them."""
    start = time.perf_counter()
    run_probe(clean, scenario, goldens, "record")
    fired = run_probe(clean, scenario, goldens, "check", goldens / f"control-{scenario}" / "fired.json")
    verdict = "clean" if not fired else "FALSE ALARM"
    return Outcome(f"control: clean copy, {scenario}", "(none)", fired, verdict, time.perf_counter() - start)


def table(outcomes: Sequence[Outcome]) -> list[str]:
    lines = ["| hazard | expected guardrail | caught by | verdict | detail | s |", "|---|---|---|---|---|---|"]
    for o in outcomes:
        caught_by = ", ".join(o.fired) or "-"
        detail = " / ".join(o.fired.values()).replace("|", "\\|") or "-"
        lines.append(f"| {o.name} | {o.expected} | {caught_by} | {o.verdict} | {detail} | {o.seconds:.0f} |")
    return lines


def select(only: Sequence[str]) -> list[Hazard]:
    names = {hazard.name for hazard in HAZARDS}
    unknown = sorted(set(only) - names)
    if unknown:
        raise SystemExit(f"error: unknown hazard(s) {', '.join(unknown)}; choose from {', '.join(sorted(names))}")
    return [hazard for hazard in HAZARDS if not only or hazard.name in only]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nox -s hazards --", description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", default=[], metavar="NAME", help="run only these hazards")
    parser.add_argument("--jobs", type=int, default=2, help="hazards checked at once (the bench runs alone)")
    parser.add_argument("--markdown", metavar="FILE", help="also write the table (with timings) to FILE")
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temporary folder)")
    args = parser.parse_args(argv)
    hazards = select(args.only)
    start = time.perf_counter()
    work = Path(args.keep or tempfile.mkdtemp(prefix="hazards-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        clean = copy_tree(ROOT, work / "clean")
        commit_base(clean)
        goldens = work / "goldens"
        scenarios = sorted({run for h in hazards for run in h.runs if run not in NOT_SCENARIOS})
        quick = [h for h in hazards if h.run != "bench"]
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            controls = list(pool.map(partial(run_control, clean=clean, goldens=goldens), scenarios))
            outcomes = list(pool.map(partial(run_hazard, clean=clean, goldens=goldens, work=work), quick))
        outcomes += [run_hazard(h, clean, goldens, work) for h in hazards if h.run == "bench"]
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    total = time.perf_counter() - start
    rows = table([*controls, *outcomes])
    bad = [o.name for o in [*controls, *outcomes] if o.verdict not in ("clean", "caught")]
    verdict = "every hazard caught by its guardrail, every control clean" if not bad else f"FAILED: {', '.join(bad)}"
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    footer = f"{len(outcomes)} hazards, {verdict}; total {total:.0f} s on {os.cpu_count()} cores (load average {load})"
    print("\n".join([*rows, "", footer]))
    if args.markdown:
        Path(args.markdown).write_text(render_markdown(rows, footer), encoding="utf-8")
    return 1 if bad else 0


INTRO = """# Refactor hazards: each one caught by its guardrail

Generated by `nox -s hazards -- --markdown docs/hazards.md` (`tests/hazards/runner.py`). Each hazard is a small text
patch (`tests/hazards/catalogue.py`) applied to a temporary copy of the tree (src/, tests/guardrails/, benchmarks/,
baselines/, pyproject.toml); only the guardrails it names run there, in a subprocess with `PYTHONPATH` at the copy's
`src/`. Scenario goldens (telemetry counts and schema, sync budget, trajectory, telemetry payloads, the wall-clock
fields' scales) are first recorded from the unpatched copy on the same machine, and the unpatched copy must then
pass them in a fresh process (the control rows), so the catalogue holds in any determinism context. The import
hazards run `lint-imports` on the copy; the static-audit hazards audit the modules the copy's loop reaches against
the unpatched copy's counts; the config hazard compares the copy's effective configuration values (defaults and
presets) with the unpatched copy's; the "loads without" hazards import every module the copy's pyproject.toml
promises to load without torch, and every module its baselines/loads_seen.json saw load without it, each in a fresh
interpreter; the slowdown runs the paired `python -m tripwire bench-ab` with the unpatched copy as base and the
patched one as head (units alternating ABBA between two worker processes); the changed-line hazard (and both
controls) run every gate scenario of the patched copy under coverage.py and ask which lines the patch changed (the
clean copy is committed as the base) that no scenario ran.

Controls are changes that change nothing (a function moved verbatim and re-exported, a loop reworded as the
equivalent comprehension): `clean` means no guardrail fired, `FALSE ALARM` fails the session.

`caught` means the expected guardrail fired and nothing outside its tolerated companions did. A trajectory hazard
may also change which lifecycle events happen, so trajectory hazards tolerate a telemetry change; a changed event
stream or changed numerics change the telemetry payload digests too, so those fire beside a telemetry or trajectory
hazard; sync-budget hazards tolerate nothing (an extra `.item()` must not change the numbers). `MISSED` (nothing
fired) and `WRONG GUARDRAIL` fail the session. The `s` column is each row's wall time; rows run two at a time, the
benchmark A/B alone at the end. `nox -s hazards` is a pre-merge step (and runs in the GitHub workflow), not part of
`.ci/run` (docs/ci.md).

"""

OUTRO = """
## Adding a hazard

Add a `Hazard` to `HAZARDS` in `tests/hazards/catalogue.py`: the text to replace (it must occur exactly once, so
a refactor that moves the code fails `tests/hazards/test_catalogue.py` in `nox -s tests` instead of silently
patching nothing), the guardrail that must catch it, and what to run (a scenario of
`tests/guardrails/guardrail_scenarios.py`, `imports`, `static`, `config`, `loads-without`, `exercised` or `bench`,
several joined by `+`); a `Move` edit moves a function to a new module. A control expects `NOTHING`. Then
`nox -s hazards -- --only NAME`.
"""


def render_markdown(rows: Sequence[str], footer: str) -> str:
    descriptions = "\n".join(f"| {h.name} | {h.description} | `{h.edits[0].path}` |" for h in HAZARDS)
    hazards = f"## The hazards\n\n| hazard | the mistake | patched file |\n|---|---|---|\n{descriptions}\n"
    return INTRO + "\n".join(rows) + f"\n\n{footer}\n\n" + hazards + OUTRO


if __name__ == "__main__":
    sys.exit(main())
