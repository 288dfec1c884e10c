"""What a recording costs a loop, in machine instructions: the one measure of its time a noisy machine cannot move.

A measurement, not a gate. `recording_parts.py` times a loop plain and recorded; on a machine whose speed moves by 2x
within seconds, its ratios move with it, and a change of a few per cent is lost. This runs the same loop under
valgrind's callgrind, which counts the instructions the process executes, the same from run to run: the loop
(`runpy`, recorded through `tripwire.outside.record`, as `recording_parts.py` runs it) once short and once long,
each plain and recorded, after an untimed run of each side; instructions are counted only while a side runs
(`callgrind_control -i on/off`), each side dumped apart. The long run's count less the short run's is the loop's
own iterations alone, with the process's imports, the recording's start, end and report, and the loop's own setup
left out: their ratio, recorded over plain, is what a recording costs each iteration. It needs valgrind
(`apt install valgrind`) and the test dependencies, and takes about four minutes a tree:

    python benchmarks/recording_instructions.py [--loop cleanrl|sb3] [--json FILE]

`PYTHONPATH=<tree>/src` measures another tree's tripwire with this file. Instructions are not time (a cache miss
costs more than an add), but a change that removes work removes its instructions, whatever the machine does.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# the short and long runs of each loop: the same iterations, a quarter as many in the short one (so the long run's
# extra iterations are three times the short run's)
RUNS = {
    "cleanrl": (
        ("--num-envs", "4", "--num-steps", "128", "--total-timesteps", "512"),
        ("--num-envs", "4", "--num-steps", "128", "--total-timesteps", "2048"),
    ),
    "sb3": (("--timesteps", "1024"), ("--timesteps", "4096")),
}
SIDES = ("short-plain", "short-recorded", "long-plain", "long-recorded")
_TRIGGER = re.compile(r"^desc: Trigger: dump (\S+)$", re.MULTILINE)
_TOTALS = re.compile(r"^totals: (\d+)", re.MULTILINE)


def counted(folder: Path) -> dict[str, int]:
    """Instructions of each side, from the dumps callgrind wrote into `folder` (each names its side as its trigger)."""
    found: dict[str, int] = {}
    for dump in sorted(folder.glob("callgrind.out.*")):
        text = dump.read_text(encoding="utf-8", errors="replace")
        side, totals = _TRIGGER.search(text), _TOTALS.search(text)
        if side is not None and totals is not None:
            found[side.group(1)] = int(totals.group(1))
    missing = [side for side in SIDES if side not in found]
    if missing:
        raise SystemExit(f"callgrind wrote no count for {', '.join(missing)} in {folder}: see its log there")
    return found


def summary(sides: dict[str, int]) -> dict[str, float]:
    """The loop's iterations alone (long less short), plain and recorded, their ratio and what recording adds; and
    what a recording's start and end cost (the short run's difference less its iterations', a third of the long
    run's extra)."""
    plain = sides["long-plain"] - sides["short-plain"]
    recorded = sides["long-recorded"] - sides["short-recorded"]
    if plain <= 0:
        raise SystemExit(f"the long run counted no more than the short one ({sides}): the loop did not run longer")
    return {
        "loop_plain": plain,
        "loop_recorded": recorded,
        "loop_ratio": recorded / plain,
        "loop_added": recorded - plain,
        "start_and_end": sides["short-recorded"] - sides["short-plain"] - (recorded - plain) / 3,
    }


def _child(loop: str) -> None:
    """Under callgrind: each side once uncounted, then each counted and dumped apart."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import recording_parts as parts  # first: it pins the CPU and threads before torch is imported

    # isort: split
    import torch

    short, long = RUNS[loop]
    with tempfile.TemporaryDirectory(prefix="recording-instructions-") as folder:
        work = Path(folder)
        script, _argv, scenario = parts.prepare(loop, work, __file__)
        torch.set_num_threads(1)

        def run(recorded: bool, argv: tuple[str, ...]) -> None:
            with parts.frozen_heap():
                if recorded:
                    parts._recorded(dataclasses.replace(scenario, argv=list(argv)), script.parent, work)
                else:
                    parts._plain(script, argv, work)

        def control(*arguments: str) -> None:
            subprocess.run(["callgrind_control", *arguments, str(os.getpid())], check=True, stdout=subprocess.DEVNULL)

        run(False, short)
        run(True, short)
        for name, argv in (("short", short), ("long", long)):
            for recorded in (False, True):
                gc.collect()
                control("-i", "on")
                run(recorded, argv)
                control("-i", "off")
                control(f"--dump={name}-{'recorded' if recorded else 'plain'}")


def measure(loop: str, folder: Path) -> dict[str, int]:
    """Run the loop under callgrind, its dumps and log in `folder`; the instructions of each side."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind is not installed: install it (apt install valgrind) to count instructions")
    command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--dump-instr=no", "--collect-jumps=no"]
    command += [f"--callgrind-out-file={folder / 'callgrind.out.%p'}", sys.executable, __file__, "--child", loop]
    with (folder / "log").open("w", encoding="utf-8") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the loop under callgrind exited {done.returncode}: see {folder / 'log'}")
    return counted(folder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loop", choices=sorted(RUNS), default="cleanrl")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child)
        return 0
    with tempfile.TemporaryDirectory(prefix="recording-instructions-") as folder:
        sides = measure(args.loop, Path(folder))
    figures = summary(sides)
    print(
        f"{args.loop}: the loop's iterations plain {figures['loop_plain']:,.0f} instructions, recorded "
        f"{figures['loop_recorded']:,.0f}: {figures['loop_ratio']:.3f}x (+{figures['loop_added']:,.0f}); a "
        f"recording's start and end +{figures['start_and_end']:,.0f}"
    )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {"loop": args.loop, "sides": sides, **figures}
        args.json.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
