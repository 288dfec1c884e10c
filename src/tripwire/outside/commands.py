"""`python -m tripwire run | compare | budget`: record results, compare them and gate them on budgets, outside pytest.

    python -m tripwire run SCENARIO.py --out DIR [--root TREE]    record one result of a scenario on a tree
    python -m tripwire compare A B                                 the verdict table; exit 1 on any difference
    python -m tripwire budget write RESULT FILE [--per-iteration]  a sync budget from a result (not over one in CI)
    python -m tripwire budget check RESULT FILE                    exit 1 when the result exceeds the budget

`run` pins the CPU kernels to the portable level before torch starts (`--cpu-pin avx2`, the default; `native`
leaves them alone), so results recorded on two x86-64 machines compare bitwise. Exit codes: 0 ok (or the scenario
does not apply), 1 a crash, a scenario error, a difference or an exceeded budget, 2 a usage error, 3 tripwire itself
failed while recording (`fault`: the loop may be fine; the result says where, `tripwire.outside.blame`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tripwire.common.closure import Closure
from tripwire.common.errors import TripwireError, naming_update_command
from tripwire.common.files import output_file, output_folder, write_text
from tripwire.common.git import GitError, git_run
from tripwire.common.numerics import apply_portable_cpu_env

if TYPE_CHECKING:  # imported on use: the commands start before torch
    from tripwire.outside.result import Result, SyncSummary
    from tripwire.sync.budget import SyncBudget

FAULT_EXIT = 3  # tripwire failed, not the loop


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _commit_of(root: Path) -> str:
    try:
        done = git_run(root, "rev-parse", "--verify", "-q", operands=("HEAD",))
    except GitError:  # no git on this machine: the result records no commit
        return ""
    return done.stdout.decode("utf-8", "replace").strip() if done.returncode == 0 else ""


def run_main(argv: Sequence[str] | None = None) -> int:
    """`python -m tripwire run` (see the module docstring)."""
    parser = _Parser(prog="python -m tripwire run", description="Record one result of a scenario on a source tree.")
    parser.add_argument("scenario", type=Path, help="a scenario file defining `scenario = Scenario(...)`")
    parser.add_argument("--out", type=Path, required=True, help="the result folder to write")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the source tree (default: this folder)")
    parser.add_argument("--commit", default=None, help="the tree's commit (default: git rev-parse HEAD there)")
    parser.add_argument("--cpu-pin", choices=("avx2", "native"), default="avx2", help="portable CPU kernels or not")
    parser.add_argument("--no-values", action="store_true", help="keep digests only (no values.pt)")
    parser.add_argument("--values-store", type=Path, help="keep each distinct tensor once in this shared folder")
    parser.add_argument("--budget", type=Path, help="also check the syncs against this budget file")
    parser.add_argument(
        "--closure", action="store_true", help="also write closure.json: what of the tree the run read (for reuse)"
    )
    parser.add_argument(
        "--vendor-ops",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="note CPU ops whose bits differ between Intel and AMD under the pin (torch.sqrt, tan, log10, the default "
        "Adam's step, ...) with their lines (default: on; only those ops pay for it)",
    )
    args = parser.parse_args(argv)
    if args.cpu_pin == "avx2":
        if "torch" in sys.modules:  # fine only when the pin was set before torch started (a history fork server)
            from tripwire.common.numerics import cpu_numerics, is_pinned

            if not is_pinned(cpu_numerics()):
                print(
                    "error: torch was imported before the CPU pin could be set: run `python -m tripwire run`",
                    file=sys.stderr,
                )
                return 2
        else:
            apply_portable_cpu_env()
    from tripwire.outside.record import record
    from tripwire.scenario import load_scenario

    root = args.root.resolve()
    if not root.is_dir():
        print(f"error: --root {root} is not a folder", file=sys.stderr)
        return 2
    try:
        scenario = load_scenario(args.scenario)
        output_folder(
            args.out, "--out", noun="result folder"
        )  # before the run: a result is never lost to a path it cannot be saved at
        if args.values_store is not None:
            output_folder(args.values_store, "--values-store")
    except TripwireError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    commit = args.commit if args.commit is not None else _commit_of(root)
    reads = Closure(root) if args.closure else contextlib.nullcontext()
    (args.out / "closure.json").unlink(missing_ok=True)  # an earlier run's, never this result's
    try:
        with reads:
            result = record(
                scenario, root, commit=commit, keep_values=False if args.no_values else None, vendor_ops=args.vendor_ops
            )
    except TripwireError as error:  # refused before the loop ran (an adapter's `when` asked git about '--x')
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        result.save(args.out, values_store=args.values_store)
    except OSError as error:  # the disk filled during the run, say: checked paths can still fail
        print(
            f"error: the result could not be saved to {args.out} ({error.strerror or error}): free space and run again",
            file=sys.stderr,
        )
        return 2
    if isinstance(reads, Closure):  # after the result: a closure never stands beside a result it does not describe
        reads.save(args.out / "closure.json")
    print(f"{scenario.name}: {result.summary()} -> {args.out}")
    for note in result.notes:  # what the recording left out or could not see: said, not only stored
        print(f"  note: {note}")
    code = 0 if result.status in ("ok", "n/a") else FAULT_EXIT if result.status == "fault" else 1
    if args.budget is not None and result.ok:
        code = max(code, _check_budget(result, args.budget, args.out))
    if result.ended_by_exit:  # the loop meant to skip interpreter shutdown (threads it never joins): so does run
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _check_budget(result: Result, budget_file: Path, result_folder: Path) -> int:
    """Check a result's syncs against a budget file, and its compilation events against the file's `compile`
    section when both have one."""
    from tripwire.sync.budget import SyncBudget

    write = f"python -m tripwire budget write {result_folder} {budget_file}"
    with naming_update_command(write):
        try:
            budget = SyncBudget.load(budget_file)
        except TripwireError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    if budget.per_iteration and not budget.regions:  # written with --per-iteration: regenerate it the same way
        write += " --per-iteration"
    with naming_update_command(write):
        return _report_budget(result, budget)


def _report_budget(result: Result, budget: SyncBudget) -> int:
    from tripwire.sync.budget import check_budget

    recorded, marked = budget.context.get("iterations"), len(result.syncs.iterations)
    if isinstance(recorded, int) and recorded != marked:
        print(
            f"sync budget not checked ({budget.source}): it was written from a run of {recorded} iteration(s) and "
            f"this run marked {marked}: a run of another length is held to other totals; record the scenario as it "
            "was recorded, or write the budget again"
        )
        return 1
    reports = [check_budget(result.syncs, budget)]
    if budget.compile is not None and result.compile is not None:
        reports.append(check_budget(result.compile, budget.compile, what="compile"))
    elif budget.compile is not None:
        print("note: the result was recorded before compilation was counted: its compile budget is not checked")
    for report in reports:
        print(report.format())
    return 0 if all(report.ok for report in reports) else 1


def compare_main(argv: Sequence[str] | None = None) -> int:
    """`python -m tripwire compare A B` (see the module docstring)."""
    parser = _Parser(prog="python -m tripwire compare", description="Compare two results; exit 1 on a difference.")
    parser.add_argument("a", type=Path, help="the base result folder")
    parser.add_argument("b", type=Path, help="the result folder compared with it")
    parser.add_argument("--brief", action="store_true", help="the table only, without the details")
    args = parser.parse_args(argv)
    from tripwire.outside.compare import compare_results
    from tripwire.outside.result import Result

    try:
        a, b = Result.load(args.a), Result.load(args.b)
    except TripwireError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if a.scenario and b.scenario and a.scenario != b.scenario:
        print(
            f"error: {args.a} is a result of scenario {a.scenario!r}, {args.b} of {b.scenario!r}: compare two "
            "results of one scenario",
            file=sys.stderr,
        )
        return 2
    try:
        comparison = compare_results(a, b, a_label=str(args.a), b_label=str(args.b))
    except TripwireError as error:  # a kept tensor is read when a comparison needs it: a damaged one says so here
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(comparison.format(details=not args.brief))
    return 0 if comparison.ok else 1


def budget_main(argv: Sequence[str] | None = None) -> int:
    """`python -m tripwire budget write|check RESULT FILE` (see the module docstring)."""
    parser = _Parser(prog="python -m tripwire budget", description="Write or check a sync budget from a result.")
    parser.add_argument("action", choices=("write", "check"))
    parser.add_argument("result", type=Path, help="a result folder (python -m tripwire run ... --out RESULT)")
    parser.add_argument("file", help="the budget file")  # text: a trailing '/' (a folder's name) must be seen
    parser.add_argument("--per-iteration", action="store_true", help="write: cap each iteration, not the totals")
    args = parser.parse_args(argv)
    written_as, args.file = args.file, Path(args.file)
    from tripwire.outside.result import Result
    from tripwire.sync.budget import budget_payload
    from tripwire.sync.sites import callers_by_line, lines_by_key

    try:
        result = Result.load(args.result, values=False)
    except TripwireError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not result.ok:
        print(
            f"error: {args.result} is a {result.status} result ({result.cause}): a run that did not run to the end "
            "cannot be held to or make a budget; fix the run and record it again",
            file=sys.stderr,
        )
        return 1
    if args.action == "check":
        return _check_budget(result, args.file, args.result)
    try:
        output_file(written_as, "budget file")
    except TripwireError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if os.environ.get("CI") and args.file.exists():
        print(f"error: {args.file} exists and CI is set: budgets are never rewritten in CI", file=sys.stderr)
        return 2
    syncs = result.syncs
    if args.per_iteration and not syncs.iterations:
        print("error: the result has no iterations: declare `iteration=` in the scenario", file=sys.stderr)
        return 2
    per_iteration = {region: max(it.get(region, 0) for it in syncs.iterations) for region in syncs.typical_iteration()}
    context: dict[str, object] = {key: result.context[key] for key in ("device", "torch") if key in result.context}
    context["iterations"] = len(syncs.iterations)  # a check on a run that marked another number fails
    compiled = result.compile
    payload = budget_payload(
        {} if args.per_iteration else syncs.counts_by_region(),
        syncs.site_keys_by_region(),
        context,
        lines_by_key(syncs.records),
        per_iteration if args.per_iteration else None,
        callers=callers_by_line(syncs.records),
        # compilation happens in the first iterations: always budgeted by totals, so a recompile per round fails
        compile=None if compiled is None else _events_payload(compiled),
    )
    try:  # whole or not at all, as `write_budget` writes it: sorted, indented JSON with a trailing newline
        write_text(args.file, json.dumps(payload, indent=2) + "\n")
    except OSError as error:
        print(
            f"error: budget file {args.file} could not be written ({error.strerror or error}); nothing was written",
            file=sys.stderr,
        )
        return 2
    what = "per iteration" if args.per_iteration else "totals"
    compiled_text = f", {compiled.total} compilation events" if compiled is not None else ""
    print(f"wrote {args.file} ({what}; {syncs.total} syncs in {len(syncs.counts_by_region())} regions{compiled_text})")
    return 0


def _events_payload(summary: SyncSummary) -> dict[str, Any]:
    """A budget payload of every event of a summary, by totals: regions, sites, lines and callers."""
    from tripwire.sync.budget import budget_payload
    from tripwire.sync.sites import callers_by_line, lines_by_key

    return budget_payload(
        summary.counts_by_region(),
        summary.site_keys_by_region(),
        None,
        lines_by_key(summary.records),
        callers=callers_by_line(summary.records),
    )
