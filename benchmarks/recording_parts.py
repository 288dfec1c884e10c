"""Where a recording's time goes: one loop's own rate, plain and recorded with one part of the recording taken away.

A measurement, not a gate, and a diagnosis: `recording_cost.py` says what recording costs, this says which part of
it. Everything runs in one process (the loop as `__main__` through `runpy`, recorded through
`tripwire.outside.record.record`, as `tripwire run` does), after one untimed run of every variant, in an order that
alternates round by round; each figure is the median over rounds of plain rate / variant rate, the loop's own time
(CleanRL's `SPS`, SB3's `fps`: no interpreter, imports or setup). Variants:

- `recorded`: the test scenario, every instrument (regions, iterations, checkpoints, events) and the sync counter;
- `no checkpoints`, `syncs only` (no checkpoints, no events): the scenario with parts removed;
- `instruments only`: the scenario with no sync counter at all (a counter that installs nothing);
- `not delivered`: the counter installed and classifying, but no sync recorded (no call site, callers or event);
- `no kernels`: the counter without the counting kernels over the data-dependent ops (`implicit=False`).

The last three change tripwire's internals inside this process only, to take a part away; their counts are not
what a recording reports, only their times are of interest. One process: imports, first sight of each call site
and caches are paid in the untimed round; every side starts after a full collection, its heap frozen as a recording
freezes it. One thread under the portable CPU pin, as `tripwire run` uses. Needs the test dependencies
(gymnasium, tyro, tensorboard; stable-baselines3 for `--loop sb3`):

    python benchmarks/recording_parts.py [--loop cleanrl|cleanrl-short|sb3] [--rounds 5] [--json FILE]

`cleanrl` is CleanRL's 2,048-step run, `cleanrl-short` its 256-step run (a PPO update every 64 steps).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import gc
import io
import json
import os
import runpy
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recording_cost import _RATE, CLEANRL, CLEANRL_SCENARIO, LARGE, SB3_LONG, SB3_SCENARIO, SMALL, _env

os.environ.update(_env())  # the portable CPU pin and one thread, before torch is imported

import torch

from tripwire.outside import record as recording
from tripwire.scenario import Scenario, load_scenario
from tripwire.sync import hooks
from tripwire.sync import state as sync_state
from tripwire.sync.counter import SyncCounter

LOOPS = {
    "cleanrl": (CLEANRL, CLEANRL_SCENARIO, LARGE),  # CleanRL's ppo.py, 4 x 512 steps
    "cleanrl-short": (CLEANRL, CLEANRL_SCENARIO, SMALL),  # the same, 4 x 64 steps: a PPO update every 64 steps
    "sb3": (SB3_LONG, SB3_SCENARIO, ("--timesteps", "4096")),  # SB3 PPO, 16 x 256 steps
}


class _Idle(SyncCounter):
    """A sync counter that installs nothing and records nothing: the scenario's instruments alone."""

    def __enter__(self) -> SyncCounter:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def _not_delivered(kind: str, *, implicit: bool = False) -> None:
    """Delivery that records nothing: the stand-ins and kernels still run and classify."""


@contextlib.contextmanager
def _patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    scenario: Callable[[Scenario], Scenario] = lambda scenario: scenario
    change: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext


VARIANTS = (
    Variant("recorded"),
    Variant("no checkpoints", lambda scenario: dataclasses.replace(scenario, checkpoints=())),
    Variant("syncs only", lambda scenario: dataclasses.replace(scenario, checkpoints=(), event_calls=())),
    Variant("instruments only", change=lambda: _patched(recording, "SyncCounter", _Idle)),
    # the counter's hooks bound `deliver` when they were made: the module attribute they read at install time
    Variant("not delivered", change=lambda: _patched(hooks.sync, "deliver", _not_delivered)),
    Variant(
        "no kernels", change=lambda: _patched(recording, "SyncCounter", functools.partial(SyncCounter, implicit=False))
    ),
)


def _rate(output: str) -> int:
    rates = [cleanrl or sb3 for cleanrl, sb3 in _RATE.findall(output)]
    if not rates:
        raise SystemExit(f"the loop printed no rate (SPS or fps): {output[-300:]}")
    return int(rates[-1])


def _plain(script: Path, argv: tuple[str, ...], work: Path) -> int:
    """The loop run as `python script argv` would, in this process: its own last printed rate."""
    buffer, saved, cwd = io.StringIO(), sys.argv, os.getcwd()
    sys.argv = [script.name, *argv]
    os.chdir(work)
    try:
        with contextlib.redirect_stdout(buffer):
            runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.argv = saved
        os.chdir(cwd)
    return _rate(buffer.getvalue())


def _recorded(scenario: Scenario, tree: Path, work: Path) -> tuple[int, dict[str, int]]:
    """The loop's last printed rate under `record`, and what the recording holds (checkpoints, syncs, events): what
    tells each variant took away what it says it did."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        result = recording.record(scenario, tree, workdir=work)
    if result.status != "ok":
        raise SystemExit(f"recording failed ({result.status}): {result.cause}")
    held = {
        "checkpoints": len(result.trajectory) if result.trajectory is not None else 0,
        "syncs": result.syncs.total,
        "events": int(result.telemetry.get("total", 0)) if result.telemetry else 0,
    }
    return _rate(buffer.getvalue()), held


def prepare(loop: str, work: Path, runner: str) -> tuple[Path, tuple[str, ...], Scenario]:
    """`loop`'s script copied into `work/tree` (the copy's path), its arguments, and its test scenario given them;
    SB3's logger pointed into `work`; and the frames of `runner` (the benchmark file running the loop in this
    process) and of this file (whose `_recorded` and `_plain` run it) taken for the launcher's, as under `tripwire
    run`, not the project's callers: taken for the project's, each sync's callers walk would go on past the loop's
    module to them, five frames more than `tripwire run` walks."""
    script, scenario_file, argv = LOOPS[loop]
    tree = work / "tree"
    tree.mkdir()
    shutil.copy(script, tree / script.name)
    scenario = dataclasses.replace(load_scenario(scenario_file), argv=list(argv))
    os.environ["SB3_LOGDIR"] = str(work / "sb3-logs")  # SB3 would leave a logger folder in /tmp each run
    launcher = {str(Path(runner).resolve()), str(Path(__file__).resolve())}
    sync_state._LIBRARY_DIRS = (*sync_state._LIBRARY_DIRS, *sorted(launcher - set(sync_state._LIBRARY_DIRS)))
    return tree / script.name, argv, scenario


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """One side of a measurement, after a full collection with the heap frozen, as a recording freezes it for its own
    loop (which then leaves the freeze alone): the heap grows with every recording kept in this process, and a full
    pass landing in one side's loop (about 150 ms) would decide the ratio."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def measure(loop: str, rounds: int, work: Path) -> list[dict[str, object]]:
    script, argv, base = prepare(loop, work, __file__)
    tree = script.parent
    torch.set_num_threads(1)

    held: dict[str, dict[str, int]] = {}

    def run(variant: Variant | None) -> int:
        with frozen_heap():
            if variant is None:
                return _plain(script, argv, work)
            with variant.change():
                rate, held[variant.name] = _recorded(variant.scenario(base), tree, work)
            return rate

    sides: list[Variant | None] = [None, *VARIANTS]
    rates: dict[str, list[int]] = {("plain" if side is None else side.name): [] for side in sides}
    for index in range(rounds + 1):  # round 0 is untimed: first sight of every call site, imports, caches
        for side in sides if index % 2 == 0 else sides[::-1]:
            rate = run(side)
            if index:
                rates["plain" if side is None else side.name].append(rate)
    rows = []
    for name, measured in rates.items():
        ratios = [plain / rate for plain, rate in zip(rates["plain"], measured)]
        rows.append(
            {
                "variant": name,
                "held": held.get(name, {}),
                "rate": statistics.median(measured),
                "loop_ratio": round(statistics.median(ratios), 3),
                "loop_ratios": [round(ratio, 3) for ratio in ratios],
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loop", choices=sorted(LOOPS), default="cleanrl")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="recording-parts-") as work:
        rows = measure(args.loop, args.rounds, Path(work))
    for row in rows:
        held = ", ".join(f"{count} {what}" for what, count in row["held"].items()) or "nothing recorded"  # type: ignore[attr-defined]
        print(f"{row['variant']:<18} rate {row['rate']:8.0f}  loop time {row['loop_ratio']:.3f}x  "
              f"(rounds {row['loop_ratios']})  [{held}]", flush=True)  # fmt: skip
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {"loop": args.loop, "rounds": args.rounds, "variants": rows}
        args.json.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
