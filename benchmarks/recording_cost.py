"""The cost of recording from outside: a loop run plain against the same loop under `python -m tripwire run`.

A measurement, not a gate. After one untimed round, each round runs every loop twice, plain and recorded, in fresh
processes, in an order that alternates round by round, so drift in the machine's speed reaches both sides alike; the
ratio reported is the median over rounds of recorded wall time / plain wall time; for a loop that prints its own
rate (CleanRL's `SPS:`, SB3's `fps`: steps per second over the training loop alone), also the median of plain rate /
recorded rate, the loop's own time without the interpreter, the imports and the setup, which a short run's whole-
process figure dilutes (and a recording's frozen heap can flatter, `tripwire.outside.record`). Both sides run with
the same CPU pin and one thread, what a recording uses, so the ratio is the instruments' cost alone. Wall time is
the whole process (interpreter, `import torch`, the loop); tripwire's own import is part of the cost it reports.

Loops: CleanRL's `ppo.py` and `sac_continuous_action.py` as published (tests/tripwire/third_party) at two sizes
each (SAC on Pendulum: 300 random steps, then an update at each step and about 42 syncs an update), the SB3 PPO
script of tests/tripwire/loops and a longer one (benchmarks/loops, which prints SB3's own `fps`), the PPO loop of
tests/tripwire/loops that compiles its parts with inductor, with their test scenarios (every instrument placed,
checkpoints and events included) and, for CleanRL's PPO, the same scenario stripped to sync counting (no
checkpoints, no events), which says where the time goes. Needs the test dependencies (gymnasium, tyro, tensorboard,
stable-baselines3). Run it on a quiet machine:

    python benchmarks/recording_cost.py [--rounds 5] [--json build/recording_cost.json] [--pin-cost]
        [--only NAME] [--esper-lite ../esper-lite]

With `--pin-cost`, each script's loop also runs plain on the machine's native CPU kernels, a third side of each
round: plain pinned / plain native is what the portable pin alone costs (`tripwire run --cpu-pin native` does not pay
it, and records results that compare only with other native results from the same kind of CPU).

With `--esper-lite PATH` (a checkout of the original, 11ebe0f6), also the original's own CLI training loop
(`examples/esper-lite/cli_training_loop.py`: 1 round, 1 env, 5 epochs on mock data), plain being the scenario's
function with its adapter and nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tripwire.common.numerics import portable_cpu_env

TESTS = Path(__file__).resolve().parents[1] / "tests" / "tripwire"


@dataclass(frozen=True)
class Loop:
    name: str
    script: Path | None  # None: the scenario calls a function of a tree outside this repository (`root`)
    scenario: Path
    argv: tuple[str, ...]
    stripped: bool = False  # the scenario's checkpoints and events removed: sync counting alone
    root: Path | None = None  # that tree, run in place (the plain side runs the scenario's function, adapted)
    beside: tuple[Path, ...] = ()  # folders the script imports, copied beside it


CLEANRL = TESTS / "third_party" / "cleanrl" / "ppo.py"
CLEANRL_SCENARIO = TESTS / "third_party" / "cleanrl_ppo_scenario.py"
SB3_SCENARIO = TESTS / "loops" / "sb3_script_scenario.py"
SB3_LONG = Path(__file__).resolve().parent / "loops" / "sb3_script.py"  # prints SB3's progress table (its fps)
SAC = TESTS / "third_party" / "cleanrl" / "sac_continuous_action.py"
SAC_SCENARIO = TESTS / "third_party" / "cleanrl_sac_scenario.py"
SAC_BUFFERS = (SAC.parent / "cleanrl_utils",)
COMPILED = TESTS / "loops" / "compiled_script.py"  # compiles its policy step, its GAE and its update, LeanRL-style
COMPILED_SCENARIO = TESTS / "loops" / "compiled_script_scenario.py"
SMALL = ("--num-envs", "2", "--num-steps", "32", "--total-timesteps", "256", "--update-epochs", "2")
LARGE = ("--num-envs", "4", "--num-steps", "128", "--total-timesteps", "2048")
SAC_ARGS = ("--env-id", "Pendulum-v1", "--learning-starts", "300", "--batch-size", "32", "--no-cuda")
SAC_SMALL = (*SAC_ARGS, "--total-timesteps", "600")  # its test scenario: an update at each of the last 300 steps
SAC_LARGE = (*SAC_ARGS, "--total-timesteps", "3000")
LOOPS = (
    Loop("cleanrl ppo.py, 4 x 64 steps", CLEANRL, CLEANRL_SCENARIO, SMALL),
    Loop("cleanrl ppo.py, 4 x 512 steps", CLEANRL, CLEANRL_SCENARIO, LARGE),
    Loop("cleanrl ppo.py, 4 x 512 steps, syncs only", CLEANRL, CLEANRL_SCENARIO, LARGE, stripped=True),
    Loop("sb3 PPO, 4 x 64 steps", TESTS / "loops" / "sb3_script.py", SB3_SCENARIO, ()),
    Loop("sb3 PPO, 16 x 256 steps", SB3_LONG, SB3_SCENARIO, ("--timesteps", "4096")),
    Loop("compiled PPO loop (inductor), 4 x 64 steps", COMPILED, COMPILED_SCENARIO, ()),
    Loop("cleanrl sac, 300 + 300 steps", SAC, SAC_SCENARIO, SAC_SMALL, beside=SAC_BUFFERS),
    Loop("cleanrl sac, 300 + 2700 steps", SAC, SAC_SCENARIO, SAC_LARGE, beside=SAC_BUFFERS),
)


ESPER_LITE_SCENARIO = Path(__file__).resolve().parents[1] / "examples" / "esper-lite" / "cli_training_loop.py"

# The plain side of a scenario that calls a function (`Loop.root`): its adapters' wraps applied, its thread count set,
# the function called, nothing counted or digested. An adapter with a condition, aliases, targets, patches or options
# is refused rather than half applied. Importing the scenario file imports `tripwire.scenario` (20 ms,
# no torch), which the plain side pays too.
_PLAIN_CALL = """
import importlib, importlib.util, sys
scenario_file, tree = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location("plain_scenario", scenario_file)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
scenario = module.scenario
sys.path[:0] = [f"{tree}/{path}" for path in scenario.paths]
import torch
torch.set_num_threads(scenario.threads)
for adapter in scenario.adapters:
    if adapter.when is not None or adapter.aliases or adapter.targets or adapter.patches or adapter.options:
        sys.exit(f"{scenario_file}: the plain side applies an adapter's wraps only, for every tree; this one has more")
    for target, adapt in adapter.wraps.items():
        owner_name, attribute = target.split(":")
        owner = importlib.import_module(owner_name)
        setattr(owner, attribute, adapt(getattr(owner, attribute)))
scenario.call()
"""


def _env(*, pinned: bool = True) -> dict[str, str]:
    """The environment of a timed process: one thread, and the portable CPU pin a recording uses unless `pinned` is
    false (the native kernels a plain run gets when nothing pins them)."""
    env = dict(os.environ)
    if pinned:
        env.update(portable_cpu_env())
    else:
        for name in portable_cpu_env():
            env.pop(name, None)
    env.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0"})
    # bytecode is cached as a user's would be: without the cache the recorded side alone compiles tripwire each run
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


# A loop's own rate, printed every iteration: CleanRL's steps per second, SB3's `fps` row of its progress table
_RATE = re.compile(r"^(?:SPS: (\d+)|\|\s+fps\s+\|\s+(\d+)\s+\|)$", re.MULTILINE)


def _timed(command: list[str], cwd: Path, *, pinned: bool = True) -> tuple[float, int | None]:
    """The command's whole-process wall time, and the loop's own last printed rate (steps per second over its
    training loop alone, no imports or setup) where it prints one."""
    start = time.perf_counter()
    # SB3 would leave a logger folder in /tmp each run
    env = {**_env(pinned=pinned), "SB3_LOGDIR": str(cwd / "sb3-logs")}
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()[-300:]}")
    rates = [cleanrl or sb3 for cleanrl, sb3 in _RATE.findall(done.stdout)]
    return seconds, int(rates[-1]) if rates else None


def _scenario_file(loop: Loop, folder: Path) -> Path:
    """The loop's scenario with this size's argv (and, stripped, without checkpoints and events)."""
    stripped = ", checkpoints=(), event_calls=()" if loop.stripped else ""
    text = "\n".join(
        [
            "import dataclasses",
            "from tripwire.scenario import load_scenario",
            "",
            f"base = load_scenario({str(loop.scenario)!r})",
            f"scenario = dataclasses.replace(base, argv={list(loop.argv)!r}{stripped})",
            "",
        ]
    )
    target = folder / "scenario.py"
    target.write_text(text, encoding="utf-8")
    return target


def measure(loop: Loop, rounds: int, work: Path, *, pin_cost: bool = False) -> dict[str, object]:
    folder = work / loop.name.replace(" ", "_").replace(",", "").replace("(", "").replace(")", "")
    folder.mkdir(parents=True)
    if loop.script is None:
        assert loop.root is not None
        tree, scenario = loop.root, loop.scenario
        plain = [sys.executable, "-c", _PLAIN_CALL, str(scenario), str(tree)]
    else:
        tree = folder / "tree"
        tree.mkdir()
        shutil.copy(loop.script, tree / loop.script.name)
        for folder_beside in loop.beside:
            shutil.copytree(folder_beside, tree / folder_beside.name)
        scenario = _scenario_file(loop, folder)
        plain = [sys.executable, str(tree / loop.script.name), *loop.argv]
    recorded = [sys.executable, "-m", "tripwire", "run", str(scenario), "--root", str(tree), "--out"]
    times: dict[str, list[float]] = {"plain": [], "recorded": [], "native": []}
    rates: dict[str, list[int]] = {"plain": [], "recorded": [], "native": []}
    for index in range(rounds + 1):  # round 0 is untimed: it fills the caches both sides share (inductor's code)
        order = ("plain", "recorded", "native") if pin_cost else ("plain", "recorded")
        for side in order if index % 2 == 0 else order[::-1]:
            scratch = Path(tempfile.mkdtemp(dir=folder))
            command = [*recorded, str(scratch / "result")] if side == "recorded" else plain
            seconds, rate = _timed(command, scratch, pinned=side != "native")
            if index:
                times[side].append(seconds)
                if rate is not None:
                    rates[side].append(rate)
    row = ratio_row({"loop": loop.name}, times["plain"], times["recorded"], digits=2)
    if rates["plain"] and len(rates["plain"]) == len(rates["recorded"]):
        # the loop's own time, round by round: plain rate / recorded rate (its steps are the same on both sides)
        loop_ratios = [p / r for p, r in zip(rates["plain"], rates["recorded"])]
        row |= {
            "loop_ratio": round(statistics.median(loop_ratios), 2),
            "loop_ratios": [round(x, 3) for x in loop_ratios],
        }
    if pin_cost:  # what the portable pin alone costs a plain run: plain pinned / plain native, round by round
        pins = [p / n for p, n in zip(times["plain"], times["native"])]
        row |= {
            "native_s": round(statistics.median(times["native"]), 2),
            "pin_ratio": round(statistics.median(pins), 2),
        }
        row["pin_ratios"] = [round(x, 3) for x in pins]
    return row


def ratio_row(named: dict[str, object], plain: list[float], recorded: list[float], digits: int) -> dict[str, object]:
    """`named` with the medians of both sides and of the round-by-round ratios recorded / plain, and those ratios."""
    ratios = [r / p for r, p in zip(recorded, plain)]
    return named | {
        "plain_s": round(statistics.median(plain), digits),
        "recorded_s": round(statistics.median(recorded), digits),
        "ratio": round(statistics.median(ratios), digits),
        "ratios": [round(ratio, 3) for ratio in ratios],
    }


def show(label: str, row: dict[str, object]) -> None:
    """One measured row, as the benchmarks print it (and the loop-time ratio where the loop prints its rate)."""
    loop = f"  loop time {row['loop_ratio']:.2f}x (rounds {row['loop_ratios']})" if "loop_ratio" in row else ""
    pin = (
        f"  pin: plain native {row['native_s']:.2f} s, pinned / native {row['pin_ratio']:.2f}x"
        if "pin_ratio" in row
        else ""
    )
    print(f"{label} plain {row['plain_s']:6.2f} s  recorded {row['recorded_s']:6.2f} s  "
          f"ratio {row['ratio']:.2f}x  (rounds {row['ratios']}){loop}{pin}", flush=True)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--only", help="measure only loops whose name contains this")
    parser.add_argument(
        "--pin-cost",
        action="store_true",
        help="also run each script-based loop plain on native CPU kernels: what the portable pin alone costs",
    )
    parser.add_argument(
        "--esper-lite", type=Path, help="a checkout of the original esper-lite (11ebe0f6): also its CLI training loop"
    )
    args = parser.parse_args(argv)
    loops = list(LOOPS)
    if args.esper_lite is not None:
        if not (args.esper_lite / "src" / "esper").is_dir():
            raise SystemExit(f"--esper-lite {args.esper_lite}: no src/esper there; pass a checkout of esper-lite")
        name = "esper-lite CLI loop (1 round, 5 epochs)"
        loops.append(Loop(name, None, ESPER_LITE_SCENARIO, (), root=args.esper_lite.resolve()))
    rows = []
    with tempfile.TemporaryDirectory(prefix="recording-cost-") as work:
        for loop in loops:
            if args.only and args.only not in loop.name:
                continue
            row = measure(loop, args.rounds, Path(work), pin_cost=args.pin_cost and loop.script is not None)
            rows.append(row)
            show(f"{loop.name:<44}", row)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rounds": args.rounds, "loops": rows}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
