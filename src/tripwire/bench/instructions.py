"""Instruction counts of benchmark units under valgrind's callgrind: a deterministic measure of host work.

    python -m tripwire.bench.instructions --path <tree>/src --path <tree>/benchmarks \\
        --suite workloads:paired_benchmarks -k train_pass --units 3 --warmup 1 [--json out.json]
    python -m tripwire.bench.instructions ... --compare base.json [--tolerance 0.002]

The outer process starts ONE valgrind process (`valgrind --tool=callgrind`) running this module with `--inner`.
The inner process imports the suite (a `module:function` returning `name -> tripwire PairedBench`) with
instrumentation off, builds each selected workload and runs its warm-up units uninstrumented, then switches
callgrind's instrumentation on and, around every measured `run()` call, zeroes the counters and dumps them with a
label naming the benchmark, unit and run; `prepare()` happens before the zeroing and is not counted. A unit's count
is the sum of its `runs_per_unit` dumps (instructions of every thread of the process while `run()` executed).

What happens under valgrind, and how Python issues valgrind's client requests, is in
`tripwire.bench.instructions_inner`.

Environment of the inner process: `PYTHONHASHSEED=0`, `OMP_NUM_THREADS=1`, `MKL_NUM_THREADS=1`, torch on one
thread (a benchmark asking for more threads is counted on one: OpenMP's spin-waits would make the count depend on
scheduling); `PYTHONPATH` is a folder holding this tool's own `tripwire` package, then the `--path` folders.

A count depends on the valgrind, Python and torch versions and on the CPU vendor and features valgrind reports,
so base and head are meant to be counted in the same job; `--compare` refuses files whose contexts differ.
Exit codes: 0 pass, 1 more instructions than `--tolerance` allows, or a benchmark on one side only; 2 usage or
environment errors (no valgrind, the suite failed, a malformed file), one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tripwire.bench.instructions_inner import LABEL, InstructionsError, count_inner, run_label
from tripwire.bench.paired import shim_dir

EXIT_FAIL = 1
EXIT_USAGE = 2
FORMAT = "tripwire-instructions/1"
INNER_ENV = {"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# Context fields that must agree before two counts are compared.
CONTEXT_KEYS = ("valgrind", "python", "torch", "machine", "cpu")

# ---------------------------------------------------------------------------------------------------- dump files

_HEADER_END = re.compile(r"^(summary|totals):")


def read_dump(path: Path) -> tuple[str, int]:
    """(trigger label, instructions) from the header of one callgrind dump file."""
    trigger = events = summary = None
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if line.startswith("desc: Trigger:"):
                trigger = line.split(":", 2)[2].strip()
            elif line.startswith("events:"):
                events = line.split(":", 1)[1].split()
            elif _HEADER_END.match(line):
                summary = line.split(":", 1)[1].split()
                break
    if trigger is None or events is None or summary is None or "Ir" not in events:
        raise InstructionsError(f"{path}: not a callgrind dump with an Ir summary (truncated or another tool's file)")
    return trigger.removeprefix("Client Request:").strip(), int(summary[events.index("Ir")])


def collect_runs(dump_dir: Path, stem: str) -> dict[str, int]:
    """label -> instructions for every dump our inner process labelled (other dumps, e.g. at exit, are ignored)."""
    counts: dict[str, int] = {}
    for path in sorted(dump_dir.glob(f"{stem}.*")):
        label, instructions = read_dump(path)
        if label.startswith(LABEL + " "):
            if label in counts:
                raise InstructionsError(f"{path}: the dump {label!r} appears twice; count in an empty folder")
            counts[label] = instructions
    return counts


# ---------------------------------------------------------------------------------------------------- results


@dataclass
class BenchCount:
    """Instructions of each measured unit of one benchmark (and of each run inside a unit), and what they cost.

    `cost`: seconds under valgrind, wall and process CPU (`unit_s`, `unit_cpu_s` per unit; `build_and_warmup_s`,
    `build_and_warmup_cpu_s` for `make()` and the uncounted warm-up units, run uninstrumented).
    """

    name: str
    runs_per_unit: int
    per_run: list[list[int]]
    cost: dict[str, Any] = field(default_factory=dict)

    @property
    def units(self) -> list[int]:
        return [sum(runs) for runs in self.per_run]

    @property
    def median(self) -> float:
        return float(statistics.median(self.units))

    @property
    def spread(self) -> float:
        """(max - min) / median of the unit counts."""
        units = self.units
        return (max(units) - min(units)) / self.median if self.median else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "runs_per_unit": self.runs_per_unit,
            "units": self.units,
            "per_run": self.per_run,
            "median": self.median,
            "spread": self.spread,
            "cost": self.cost,
        }


@dataclass
class CountRun:
    """One valgrind process's counts, its context and what it cost (`import_s`, `import_cpu_s`, `total_s`,
    `total_cpu_s`: importing the suite under valgrind, and the whole valgrind process)."""

    benches: dict[str, BenchCount]
    context: dict[str, str]
    cost: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "context": self.context,
            "cost": self.cost,
            "benchmarks": {name: bench.to_json() for name, bench in self.benches.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], origin: str) -> CountRun:
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise InstructionsError(f"{origin}: not a {FORMAT} file (write one with --json)")
        try:
            benches = {
                str(name): BenchCount(
                    name=str(name),
                    runs_per_unit=int(entry["runs_per_unit"]),
                    per_run=[[int(count) for count in unit] for unit in entry["per_run"]],
                    cost=dict(entry.get("cost", {})),
                )
                for name, entry in data["benchmarks"].items()
            }
            if any(not bench.per_run or not all(bench.per_run) for bench in benches.values()):
                raise ValueError("a benchmark without units")
            return cls(benches, dict(data["context"]), dict(data.get("cost", {})))
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise InstructionsError(f"{origin}: malformed {FORMAT} file ({type(exc).__name__}: {exc})") from exc


def assemble(manifest: Mapping[str, Any], runs: Mapping[str, int], context: dict[str, str]) -> CountRun:
    """Join the inner manifest with the dumps; every run the manifest promises must have exactly one dump."""
    benches: dict[str, BenchCount] = {}
    for index, entry in enumerate(manifest["benchmarks"]):
        per_run = []
        for unit in range(len(entry["unit_s"])):
            labels = [run_label(index, unit, run) for run in range(entry["runs_per_unit"])]
            missing = [label for label in labels if label not in runs]
            if missing:
                raise InstructionsError(f"callgrind wrote no dump {missing[0]!r} for {entry['name']}")
            per_run.append([runs[label] for label in labels])
        cost = {key: value for key, value in entry.items() if key not in ("name", "runs_per_unit")}
        benches[entry["name"]] = BenchCount(entry["name"], entry["runs_per_unit"], per_run, cost)
    cost = {key: float(manifest[key]) for key in ("import_s", "import_cpu_s") if key in manifest}
    return CountRun(benches, {**manifest["context"], **context}, cost)


# ---------------------------------------------------------------------------------------------------- outer side


def valgrind_version(valgrind: str) -> str:
    result = subprocess.run([valgrind, "--version"], capture_output=True, text=True, check=False)
    return result.stdout.strip() or "unknown"


def count(
    suite: str,
    paths: Sequence[Path],
    keywords: Sequence[str] = (),
    *,
    units: int = 3,
    warmup: int = 1,
    valgrind: str = "valgrind",
    keep: Path | None = None,
    python: str = sys.executable,
) -> CountRun:
    """Start one valgrind process that counts `units` units of every selected benchmark; return the counts."""
    program = shutil.which(valgrind)
    if program is None:
        raise InstructionsError(f"{valgrind!r} not found: install valgrind (e.g. `apt-get install valgrind`)")
    if units < 1 or warmup < 0:
        raise InstructionsError(f"--units must be >= 1 and --warmup >= 0, got {units} and {warmup}")
    started, cpu_started = time.perf_counter(), _children_cpu_s()
    with tempfile.TemporaryDirectory(prefix="tripwire-instructions-") as scratch:
        work = keep if keep is not None else Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        if any(work.glob("callgrind.out*")):
            raise InstructionsError(f"--keep {work}: it already holds callgrind.out files; name an empty folder")
        manifest_path = work / "manifest.json"
        shim = shim_dir(Path(scratch))
        env = {
            **os.environ,
            **INNER_ENV,
            "PYTHONPATH": os.pathsep.join(str(p) for p in [shim, *(Path(p).resolve() for p in paths)]),
        }
        command = [
            program,
            "--tool=callgrind",
            "--instr-atstart=no",
            "--dump-line=no",
            f"--callgrind-out-file={work / 'callgrind.out'}",
            f"--log-file={work / 'valgrind.log'}",
            python,
            "-m",
            "tripwire.bench.instructions",
            "--inner",
            str(manifest_path),
            "--suite",
            suite,
            "--units",
            str(units),
            "--warmup",
            str(warmup),
            *(arg for word in keywords for arg in ("-k", word)),
        ]
        result = subprocess.run(command, env=env, stdout=2, check=False)  # its prints join our stderr
        manifest = _read_manifest(manifest_path, result.returncode, work)
        runs = collect_runs(work, "callgrind.out")
        counted = assemble(manifest, runs, {"valgrind": valgrind_version(program)})
    counted.cost["total_s"] = time.perf_counter() - started
    counted.cost["total_cpu_s"] = _children_cpu_s() - cpu_started
    return counted


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _read_manifest(path: Path, returncode: int, work: Path) -> dict[str, Any]:
    try:
        manifest: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise InstructionsError(
            f"the process under valgrind exited with {returncode} and left no manifest; see its output above"
            f" and valgrind's log ({work / 'valgrind.log'}, kept with --keep DIR)"
        ) from None
    if "error" in manifest:
        raise InstructionsError(f"under valgrind: {manifest['error']}")
    return manifest


# ---------------------------------------------------------------------------------------------------- comparison


@dataclass(frozen=True)
class Verdict:
    name: str
    base: float | None
    head: float | None
    status: str  # ok, MORE, fewer, MISSING, NEW

    @property
    def fails(self) -> bool:
        return self.status in ("MORE", "MISSING", "NEW")

    @property
    def change(self) -> float | None:
        if self.base is None or self.head is None or not self.base:
            return None
        return self.head / self.base - 1.0


def compare(base: CountRun, head: CountRun, tolerance: float) -> list[Verdict]:
    """Median unit count of head against base: more than `tolerance` more instructions fails (MORE)."""
    differing = [key for key in CONTEXT_KEYS if base.context.get(key) != head.context.get(key)]
    if differing:
        key = differing[0]
        raise InstructionsError(
            f"the counts come from different contexts ({key}: {base.context.get(key)!r} vs "
            f"{head.context.get(key)!r}); count base and head in the same job"
        )
    verdicts = []
    for name in sorted(set(base.benches) | set(head.benches)):
        if name not in head.benches:
            verdicts.append(Verdict(name, base.benches[name].median, None, "MISSING"))
        elif name not in base.benches:
            verdicts.append(Verdict(name, None, head.benches[name].median, "NEW"))
        else:
            before, after = base.benches[name].median, head.benches[name].median
            change = after / before - 1.0 if before else 0.0
            status = "MORE" if change > tolerance else "fewer" if change < -tolerance else "ok"
            verdicts.append(Verdict(name, before, after, status))
    return verdicts


# ---------------------------------------------------------------------------------------------------- output


def render(run: CountRun) -> str:
    context = run.context
    lines = [
        f"instructions per unit (callgrind Ir; {context.get('valgrind', '?')}, python {context.get('python', '?')}, "
        f"torch {context.get('torch', '-')}, {context.get('cpu', '?')})",
        f"{'benchmark':<24} {'runs/unit':>9} {'median':>15} {'spread':>8} {'CPU s/unit':>10}  units",
    ]
    for bench in run.benches.values():
        cpu = bench.cost.get("unit_cpu_s") or [0.0]
        lines.append(
            f"{bench.name:<24} {bench.runs_per_unit:>9} {bench.median:>15,.0f} {bench.spread:>8.3%} "
            f"{statistics.median(cpu):>10.1f}  " + " ".join(str(unit) for unit in bench.units)
        )
    cost = run.cost
    lines.append(
        f"valgrind process: {cost.get('total_s', 0.0):.0f} s wall, {cost.get('total_cpu_s', 0.0):.0f} s CPU; "
        f"importing the suite {cost.get('import_cpu_s', 0.0):.0f} s CPU"
    )
    return "\n".join(lines)


def render_verdicts(verdicts: Sequence[Verdict], tolerance: float) -> str:
    lines = [f"{'benchmark':<24} {'base':>14} {'head':>14} {'change':>9}  verdict (tolerance {tolerance:.2%})"]
    for verdict in verdicts:
        change = "-" if verdict.change is None else f"{verdict.change:+.3%}"
        base = "-" if verdict.base is None else f"{verdict.base:,.0f}"
        head = "-" if verdict.head is None else f"{verdict.head:,.0f}"
        lines.append(f"{verdict.name:<24} {base:>14} {head:>14} {change:>9}  {verdict.status}")
    return "\n".join(lines)


def load(path: Path) -> CountRun:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InstructionsError(f"{path}: cannot read it ({exc.strerror})") from exc
    except ValueError as exc:
        raise InstructionsError(f"{path}: not JSON ({exc})") from exc
    return CountRun.from_json(data, str(path))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tripwire.bench.instructions", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--suite", help="module:function returning name -> PairedBench (e.g. workloads:paired_benchmarks)"
    )
    parser.add_argument("--path", action="append", default=[], help="folder put on the inner PYTHONPATH (repeatable)")
    parser.add_argument("-k", dest="keywords", action="append", default=[], help="benchmarks whose name contains it")
    parser.add_argument("--units", type=int, default=3, help="measured units per benchmark (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="uncounted warm-up units per benchmark (default 1)")
    parser.add_argument("--json", type=Path, help="write the counts here")
    parser.add_argument("--compare", type=Path, help="a --json file of the base side: gate these counts against it")
    parser.add_argument("--current", type=Path, help="a --json file to use instead of counting")
    parser.add_argument("--tolerance", type=float, default=0.002, help="allowed extra instructions (default 0.002)")
    parser.add_argument("--valgrind", default="valgrind", help="the valgrind executable (default: valgrind on PATH)")
    parser.add_argument("--keep", type=Path, help="keep valgrind's dumps and log in this (empty) folder")
    parser.add_argument("--inner", type=Path, metavar="MANIFEST", help=argparse.SUPPRESS)
    return parser


def _inner_main(args: argparse.Namespace) -> int:
    status = 0
    try:
        manifest = count_inner(args.suite, args.keywords, args.units, args.warmup)
    except Exception as exc:  # the outer process reports it as one line
        text = " ".join(str(exc).split()) or type(exc).__name__
        manifest = {"error": text if isinstance(exc, InstructionsError) else f"{type(exc).__name__}: {text}"}
        status = EXIT_USAGE
    args.inner.write_text(json.dumps(manifest), encoding="utf-8")
    return status


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.inner is not None:
        return _inner_main(args)
    try:
        if not 0.0 <= args.tolerance < 1.0:
            raise InstructionsError(f"--tolerance is a fraction in [0, 1), got {args.tolerance}")
        if args.current is not None:
            head = load(args.current)
        elif args.suite:
            head = count(
                args.suite,
                [Path(p) for p in args.path],
                args.keywords,
                units=args.units,
                warmup=args.warmup,
                valgrind=args.valgrind,
                keep=args.keep,
            )
        else:
            raise InstructionsError("name a suite to count (--suite module:function) or a --current file")
        base = load(args.compare) if args.compare is not None else None
        print(render(head))
        if args.json is not None:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(head.to_json(), indent=1) + "\n", encoding="utf-8")
        if base is None:
            return 0
        verdicts = compare(base, head, args.tolerance)
    except InstructionsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(render_verdicts(verdicts, args.tolerance))
    return EXIT_FAIL if any(verdict.fails for verdict in verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())
