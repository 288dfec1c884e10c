"""`python -m esper.scripts.learning`: does PPO raise the episode reward on the impaired synthetic task?

Runs `ppo` on `cifar_impaired` (a host that cannot see spatial structure, 3 seed slots) for several seeds, one
process per seed, and compares each run's first round (the untrained policy) with the mean of its last
`--window` rounds. Exit 0 when every seed's late mean is above its first round, 1 otherwise, 2 on bad input.

The untrained policy draws ops almost uniformly: it prunes young seeds and rarely walks one through
GERMINATED -> TRAINING -> BLENDING -> HOLDING -> FOSSILIZED inside a 10-epoch episode, so it earns about 1 per
episode (the rule-based heuristic earns about 11). LEARNING_CONFIG differs from the preset where the preset
would take hundreds of rounds to show anything: 8 envs per round, 4 PPO epochs per round at lr 1e-3 with the KL
early stop out of the way, and a 128-wide policy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from esper.scripts.train import OneLineParser, positive_int

LEARNING_CONFIG: dict[str, Any] = {
    "task": "cifar_impaired",
    "slots": ["r0c0", "r0c1", "r0c2"],
    "n_episodes": 30,
    "n_envs": 8,
    "max_epochs": 10,
    "train_samples": 600,
    "val_samples": 200,
    "batch_size": 50,
    "lr": 1e-3,
    "ppo_updates_per_batch": 4,
    "target_kl": 1.0,
    "hidden_dim": 128,
    "lstm_hidden_dim": 128,
    "entropy_coef": 0.05,
    "telemetry_level": "minimal",
}
DEFAULT_SEEDS = (42, 1, 2)
FOSSILIZE_OP = 4  # LifecycleOp.FOSSILIZE; spelled out so this module imports without torch, torchvision or numpy


@dataclass(frozen=True)
class SeedRun:
    """One seed's per-round figures."""

    seed: int
    rewards: list[float]  # mean episode reward per round
    accuracies: list[float]  # mean final validation accuracy per round (%)
    fossilizes: list[float]  # FOSSILIZE actions per episode, per round
    seconds: float


@dataclass(frozen=True)
class Verdict:
    seed: int
    first: float
    late: float  # mean of the last `window` rounds

    @property
    def improved(self) -> bool:
        return self.late > self.first


def late_window(values: Sequence[float], window: int) -> list[float]:
    """The last `window` values after the first round (all of them if fewer): what the first round is judged by."""
    return list(values[1:][-window:])


def judge(run: SeedRun, window: int) -> Verdict:
    """First round against the mean of the last `window` rounds (all rounds after the first if fewer)."""
    late = late_window(run.rewards, window)
    if not late:
        raise ValueError(f"seed {run.seed}: need at least 2 rounds to compare, got {len(run.rewards)}")
    return Verdict(seed=run.seed, first=run.rewards[0], late=statistics.fmean(late))


class _FossilizeCounter:
    """A TrainingProbe counting FOSSILIZE actions per round."""

    def __init__(self) -> None:
        self.current = 0
        self.per_round: list[int] = []

    def after_train_pass(self, round_idx: int, epoch: int, envs: Sequence[Any]) -> None:
        pass

    def after_actions(
        self, round_idx: int, epoch: int, heads: Sequence[Sequence[int]], rewards: Sequence[float]
    ) -> None:
        self.current += sum(1 for head in heads if head[-1] == FOSSILIZE_OP)

    def after_record(self, round_idx: int, epoch: int, policy: Any) -> None:
        pass

    def after_update(self, round_idx: int, policy: Any) -> None:
        self.per_round.append(self.current)
        self.current = 0


def run_seed(seed: int, overrides: dict[str, Any]) -> SeedRun:
    """Train one seed in this process (one torch thread) and return its per-round figures."""
    import torch

    torch.set_num_threads(1)
    from esper.simic.training.config import TrainingConfig, preset_config
    from esper.simic.training.vectorized import run_training

    config = TrainingConfig.from_dict(
        {**LEARNING_CONFIG, **overrides, "seed": seed}, base=preset_config("cifar_impaired")
    )
    probe = _FossilizeCounter()
    start = time.perf_counter()
    result = run_training(config, probe=probe)
    return SeedRun(
        seed=seed,
        rewards=[r.mean_reward for r in result.rounds],
        accuracies=[r.mean_final_accuracy for r in result.rounds],
        fossilizes=[count / config.n_envs for count in probe.per_round],
        seconds=time.perf_counter() - start,
    )


def report(runs: Sequence[SeedRun], window: int) -> tuple[str, bool]:
    """A table of the runs and whether every seed improved."""
    lines = [
        f"| seed | first round | last {window}: mean | median | change of the mean | accuracy % first -> last "
        f"{window} | FOSSILIZE/episode first -> last {window} | minutes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    verdicts = [judge(run, window) for run in runs]
    for run, verdict in zip(runs, verdicts):
        median = statistics.median(late_window(run.rewards, window))
        accuracy = statistics.fmean(late_window(run.accuracies, window))
        fossils = statistics.fmean(late_window(run.fossilizes, window))
        lines.append(
            f"| {run.seed} | {verdict.first:.2f} | {verdict.late:.2f} | {median:.2f} | "
            f"{verdict.late - verdict.first:+.2f} | {run.accuracies[0]:.1f} -> {accuracy:.1f} | "
            f"{run.fossilizes[0]:.2f} -> {fossils:.2f} | {run.seconds / 60:.1f} |"
        )
    for run in runs:
        lines.append(f"seed {run.seed} rewards per round: {', '.join(f'{r:.2f}' for r in run.rewards)}")
    ok = all(v.improved for v in verdicts)
    failed = [str(v.seed) for v in verdicts if not v.improved]
    verdict_line = (
        "PASS: every seed beat its first round" if ok else f"FAIL: no improvement for seed(s) {', '.join(failed)}"
    )
    lines.append(verdict_line)
    return "\n".join(lines), ok


class LearningParser(OneLineParser):
    tool = "learning"


def build_parser() -> argparse.ArgumentParser:
    parser = LearningParser(prog="python -m esper.scripts.learning", description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(DEFAULT_SEEDS), help="run seeds")
    parser.add_argument("--rounds", type=positive_int, default=LEARNING_CONFIG["n_episodes"], help="rounds per seed")
    parser.add_argument("--window", type=positive_int, default=10, help="late rounds averaged against the first")
    parser.add_argument("--jobs", type=positive_int, default=min(2, os.cpu_count() or 1), help="seeds run at once")
    parser.add_argument("--json", metavar="PATH", help="also write the per-round figures here")
    parser.add_argument(
        "--override", metavar="JSON", default="{}", help="TrainingConfig keys merged over LEARNING_CONFIG"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.rounds < 2:
        print("learning: error: --rounds must be at least 2 (the first round is the baseline)", file=sys.stderr)
        return 2
    try:
        extra = json.loads(args.override)
    except json.JSONDecodeError as exc:
        print(f"learning: error: --override is not valid JSON: {exc.msg}", file=sys.stderr)
        return 2
    if not isinstance(extra, dict):
        print("learning: error: --override must be a JSON object of TrainingConfig keys", file=sys.stderr)
        return 2
    overrides = {**extra, "n_episodes": args.rounds}
    from esper.simic.training.config import ConfigError, TrainingConfig, preset_config

    try:  # refuse unknown keys and bad values (each seed's too) here, once, rather than in every worker process
        for seed in args.seeds:
            TrainingConfig.from_dict(
                {**LEARNING_CONFIG, **overrides, "seed": seed}, base=preset_config("cifar_impaired")
            )
    except ConfigError as exc:
        print(f"learning: error: {exc}", file=sys.stderr)
        return 2
    if args.json:  # checked before hours of training, so the figures are never lost to a typo'd folder
        target = Path(args.json)
        if target.is_dir() or not target.parent.is_dir():
            problem = "is a folder" if target.is_dir() else "its folder does not exist"
            print(
                f"learning: error: --json {args.json}: {problem}: pass a file path in an existing folder",
                file=sys.stderr,
            )
            return 2
    print(f"learning: {len(args.seeds)} seed(s) x {args.rounds} rounds of {json.dumps(LEARNING_CONFIG)}", flush=True)
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(run_seed, seed, overrides): seed for seed in args.seeds}
        for future in as_completed(futures):
            try:
                done = future.result()
            except Exception as exc:  # the worker's failure, in one line (its remote traceback is not ours to print)
                reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                print(
                    f"learning: error: seed {futures[future]} failed: {type(exc).__name__}: {reason}", file=sys.stderr
                )
                for other in futures:
                    other.cancel()
                return 1
            verdict = judge(done, args.window)
            print(
                f"learning: seed {done.seed} done in {done.seconds / 60:.1f} min: first round {verdict.first:.2f}, "
                f"mean of the last {args.window} {verdict.late:.2f}",
                flush=True,
            )
        runs = [future.result() for future in futures]
    text, ok = report(runs, args.window)
    print(text)
    if args.json:
        payload = {"config": {**LEARNING_CONFIG, **overrides}, "window": args.window, "runs": [asdict(r) for r in runs]}
        tmp = f"{args.json}.tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, indent=1)
        os.replace(tmp, args.json)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
