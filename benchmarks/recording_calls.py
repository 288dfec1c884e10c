"""What a recording adds to a loop, counted: the Python and C calls of one run plain and one recorded.

A measurement, not a gate, and the one of its kind a noisy machine cannot blur: `recording_parts.py` times the same
loop, and on a machine whose speed moves by 2x within minutes its ratios move with it; a count of calls does not. The
loop runs in one process (as `recording_parts.py` runs it: `runpy`, recorded through `tripwire.outside.record`), each
side once untimed first (imports, first sight of every call site, caches), then once under `sys.setprofile`, which
counts every Python call and every call of a C function made while the script's module runs (the loop and its own
setup; not the recording's start, end and report). A call is tripwire's when its code is in tripwire's
package (a C function's when tripwire's code calls it); the rest are the loop's, torch's and the libraries'.
Needs the test dependencies, as `recording_parts.py` does:

    python benchmarks/recording_calls.py [--loop cleanrl|cleanrl-short|sb3] [--top 25] [--json FILE]

Run it on two trees (`PYTHONPATH=<tree>/src`) to see what a change saves; the counts are the same run to run, up to
what the loop itself does differently (a different number of episodes ending), which the plain side shows.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import gc
import json
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recording_parts import (  # first: it pins the CPU and threads before torch is imported
    LOOPS,
    _plain,
    _recorded,
    prepare,
)

# isort: split
import tripwire

_TRIPWIRE = str(Path(tripwire.__file__).resolve().parent)


@dataclasses.dataclass
class Calls:
    """The calls one run made: all of them, and tripwire's by function (`file:function`)."""

    total: int = 0
    tripwire: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)


def _counted(run: Any, script: Path) -> Calls:
    """The calls made while `script` runs as `__main__` under `run` (its module's frame on the stack: the loop and its
    setup, not the recording's own start, end and report)."""
    calls = Calls()
    own: dict[Any, str | None] = {}  # code object -> "file:function" when tripwire's, else None
    path = str(script)
    inside: list[FrameType] = []  # the script's module frame, while it runs

    def name(frame: FrameType) -> str | None:
        code = frame.f_code
        known = own.get(code, "")
        if known == "":
            inside = code.co_filename.startswith(_TRIPWIRE)
            known = own[code] = f"{Path(code.co_filename).name}:{code.co_qualname}" if inside else None
        return known

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if not inside:
            if event == "call" and frame.f_code.co_name == "<module>" and frame.f_code.co_filename == path:
                inside.append(frame)
            return
        if event == "return" and frame is inside[0]:
            inside.clear()
            return
        if event == "call":
            calls.total += 1
            mine = name(frame)
            if mine is not None:
                calls.tripwire[mine] += 1
        elif event == "c_call":
            calls.total += 1
            if name(frame) is not None:
                calls.tripwire[f"C {getattr(arg, '__qualname__', getattr(arg, '__name__', '?'))}"] += 1

    gc.collect()
    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return calls


def measure(loop: str, work: Path) -> tuple[Calls, Calls]:
    script, argv, scenario = prepare(loop, work, __file__)

    def plain() -> None:
        _plain(script, argv, work)

    def recorded() -> None:
        _recorded(scenario, script.parent, work)

    plain()  # untimed: imports, caches
    recorded()
    return _counted(plain, script), _counted(recorded, script)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loop", choices=sorted(LOOPS), default="cleanrl")
    parser.add_argument("--top", type=int, default=25, help="tripwire's functions listed, most calls first")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="recording-calls-") as work:
        plain, recorded = measure(args.loop, Path(work))
    own = sum(recorded.tripwire.values())
    print(f"{args.loop}: plain {plain.total:,} calls, recorded {recorded.total:,} "
          f"(+{recorded.total - plain.total:,}; {own:,} of them tripwire's or made by it)")  # fmt: skip
    for function, count in recorded.tripwire.most_common(args.top):
        print(f"  {count:>9,}  {function}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "loop": args.loop,
            "plain": plain.total,
            "recorded": recorded.total,
            "tripwire": own,
            "tripwire_by_function": dict(recorded.tripwire.most_common()),
        }
        args.json.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
