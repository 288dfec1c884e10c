"""`python -m tripwire COMMAND ...`: the harness's command-line tools behind one entry point.

    python -m tripwire run SCENARIO --out DIR   record one result of a scenario on a source tree
    python -m tripwire compare A B          compare two results: a verdict per check, exit 1 on a difference
    python -m tripwire budget write|check   write a sync budget from a result, or check a result against one
    python -m tripwire history ...          walk a scenario over a commit range, or bisect the first of each change
    python -m tripwire bench ...            run a benchmark suite, save a baseline or gate against one
    python -m tripwire bench-ab ...         paired base-vs-head benchmark A/B on this machine
    python -m tripwire baselines-diff A B   what changed between two baselines/ folders (markdown)
    python -m tripwire exercised ...        fail on changed lines no scenario ran, or report what the scenarios ran

Each command's own `--help` lists its options; `python -m tripwire.bench` and friends still work.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

# `python -m tripwire` puts the working folder first on sys.path (unless -P): a `random.py` or `bisect.py` there must
# not shadow the standard library in the harness, so it comes off before any command imports anything.
if not sys.flags.safe_path and sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

COMMANDS = {
    "run": ("tripwire.outside.commands:run_main", "record one result of a scenario on a source tree"),
    "compare": ("tripwire.outside.commands:compare_main", "compare two results; exit 1 on a difference"),
    "budget": ("tripwire.outside.commands:budget_main", "write a sync budget from a result, or check one against it"),
    "history": ("tripwire.history.cli", "walk a scenario over a commit range (or bisect each change)"),
    "bench": ("tripwire.bench.cli", "run a benchmark suite, save a baseline or gate against one"),
    "bench-ab": ("tripwire.bench.ab", "paired base-vs-head benchmark A/B on this machine"),
    "baselines-diff": ("tripwire.gates.baselines_diff", "what changed between two baselines/ folders (markdown)"),
    "exercised": ("tripwire.gates.exercised", "changed lines no scenario ran (coverage.py data), or what they ran"),
}


def usage() -> str:
    lines = ["usage: python -m tripwire COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<16}{summary}" for name, (_, summary) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help"}:
        print(usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}: choose one of {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module_name, _, function = COMMANDS[name][0].partition(":")
    code: int = getattr(importlib.import_module(module_name), function or "main")(rest)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
