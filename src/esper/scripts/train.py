"""`python -m esper.scripts.train {heuristic,ppo} ...`: the training command line.

Flow: preset (ppo) or defaults -> --config-json -> explicit flags -> TrainingConfig -> run. Bad input gets a
one-line `train: error: ...` on stderr and exit code 2, never a traceback.

Exit codes: 0 done; 1 the run failed (three consecutive non-finite PPO updates); 2 bad input (arguments,
config, checkpoint, data or telemetry path); 130 interrupted. The first SIGINT (Ctrl-C) lets the current epoch
finish, discards the unfinished round, flushes the telemetry and exits 130: the --save checkpoint (written after
every round) then holds the last completed round, so `--resume` continues from there. A second SIGINT aborts
at once (still exit 130, events flushed, the checkpoint untouched).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any, NoReturn

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

# flag dest -> TrainingConfig field, for flags shared by both subcommands
SHARED_FIELDS = {
    "task": "task",
    "slots": "slots",
    "seed": "seed",
    "device": "device",
    "devices": "devices",
    "telemetry_dir": "telemetry_dir",
    "telemetry_level": "telemetry_level",
    "run_name": "run_name",
    "rounds": "n_episodes",
    "envs": "n_envs",
    "episode_length": "max_epochs",
    "max_seeds": "max_seeds",
    "train_samples": "train_samples",
    "val_samples": "val_samples",
    "batch_size": "batch_size",
    "data_dir": "data_dir",
    "dataset": "dataset",
    "gpu_preload": "gpu_preload",
    "env_workers": "env_workers",
    "save": "save_path",
    "resume": "resume_path",
    "reward_mode": "reward_mode",
}
PPO_FIELDS = {
    "amp": "amp",
    "ppo_epochs": "ppo_updates_per_batch",
    "memory_size": "lstm_hidden_dim",
    "entropy_anneal_episodes": "entropy_anneal_episodes",
    "lr": "lr",
}


class OneLineParser(argparse.ArgumentParser):
    """argparse with a single-line error message (`<tool>: error: ...`) and exit code 2."""

    tool = "train"

    def error(self, message: str) -> NoReturn:
        one_line = message.replace("\r", "\\r").replace("\n", "\\n")  # an argument may hold a line break
        self.exit(EXIT_USAGE, f"{self.tool}: error: {one_line} (see --help)\n")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def _add_shared(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--task", help="task name (cifar_baseline, cifar_impaired, cifar_minimal, cifar_scale)")
    add("--slots", nargs="+", metavar="SLOT", help="enabled slot ids r{row}c{col}, e.g. r0c0 r0c1 r0c2")
    add("--seed", type=int, help="run seed (every random stream derives from it)")
    add("--device", help="cpu, cuda or cuda:N")
    add("--devices", nargs="+", help="env placement: env i runs on devices[i %% n]")
    add("--telemetry-dir", help="write events to DIR/<run-name>/events.jsonl")
    add("--telemetry-level", choices=["off", "minimal", "normal", "debug"])
    add("--run-name", help="name of the telemetry run directory (default: timestamped)")
    add("--rounds", type=positive_int, help="PPO rounds (each: K episodes, one update)")
    add("--envs", type=positive_int, help="parallel envs K")
    add("--episode-length", type=positive_int, help="epochs per episode (also the LSTM chunk length)")
    add("--max-seeds", type=positive_int, help="seeds an env may germinate per episode")
    add("--train-samples", type=positive_int, help="training samples per env per epoch")
    add("--val-samples", type=positive_int, help="validation samples per env per epoch")
    add("--batch-size", type=positive_int, help="batch size per env")
    add("--dataset", choices=["synthetic", "cifar10"], help="task data (default synthetic; cifar10 needs --data-dir)")
    add("--data-dir", help="folder holding cifar-10-batches-py (task data cifar10)")
    add("--gpu-preload", action="store_true", default=None, help="keep the dataset on the device")
    add(
        "--env-workers",
        type=positive_int,
        help="train and validate CPU envs on N threads at once; pins one torch thread, so results equal a "
        "one-thread run (OMP_NUM_THREADS=1) with envs in turn",
    )
    add("--save", help="write a checkpoint here after every round (atomic)")
    add("--resume", help="resume from a checkpoint written by --save")
    add("--reward-mode", choices=["shaped", "escrow", "simplified", "sparse"])
    add("--quiet", action="store_true", help="no progress display")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m esper.scripts.train", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    heuristic = commands.add_parser("heuristic", help="run the rule-based controller")
    _add_shared(heuristic)
    ppo = commands.add_parser("ppo", help="train the PPO controller")
    _add_shared(ppo)
    ppo.add_argument("--preset", help="cifar_baseline | cifar_baseline_stable | cifar_impaired | cifar_minimal")
    ppo.add_argument("--config-json", help="a JSON object of TrainingConfig keys (unknown keys are refused)")
    ppo.add_argument("--amp", choices=["off", "auto", "bfloat16", "float16"])
    ppo.add_argument("--ppo-epochs", type=positive_int, help="PPO updates per round")
    ppo.add_argument("--memory-size", type=positive_int, help="LSTM hidden size")
    ppo.add_argument("--entropy-anneal-episodes", type=non_negative_int)
    ppo.add_argument("--lr", type=float, help="policy learning rate")
    return parser


def config_from_args(args: argparse.Namespace) -> Any:
    """Preset or defaults, then --config-json, then explicit flags."""
    from esper.simic.training.config import TrainingConfig, preset_config

    config = TrainingConfig()
    if getattr(args, "preset", None):
        config = preset_config(args.preset)
    if getattr(args, "config_json", None):
        config = TrainingConfig.from_json_file(args.config_json, base=config)
    fields = dict(SHARED_FIELDS)
    if args.command == "ppo":
        fields.update(PPO_FIELDS)
    overrides = {field: getattr(args, dest) for dest, field in fields.items() if getattr(args, dest, None) is not None}
    return TrainingConfig.from_dict(overrides, base=config)


def _user_errors() -> tuple[type[BaseException], ...]:
    from esper.data.records import DataDirectoryError
    from esper.leyline import SlotIdError, UnknownTaskError
    from esper.nissa.backends import TelemetryPathError
    from esper.simic.training.checkpoint import CheckpointError
    from esper.simic.training.config import ConfigError
    from esper.tolaria.devices import DeviceError

    return (
        ConfigError,
        SlotIdError,
        UnknownTaskError,
        DeviceError,
        CheckpointError,
        DataDirectoryError,
        TelemetryPathError,
    )


class InterruptFlag:
    """SIGINT handling: the first signal asks the run to stop after the current epoch, the second aborts now."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None
        self._installed = False

    def __call__(self) -> bool:
        return self.requested

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        # os.write, not print: a handler may run while the main thread is inside a print to stderr
        os.write(2, b"train: interrupt received: finishing the current epoch, then stopping (Ctrl-C again aborts)\n")

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():  # signal.signal works only there
            self._previous = signal.signal(signal.SIGINT, self.handle)
            self._installed = True

    def restore(self) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False


def interrupted_message(config: Any, interrupted_at: tuple[int, int], rounds_run: int) -> str:
    """One line saying where the run stopped and how to continue it."""
    round_idx, epoch = interrupted_at
    where = f"train: interrupted in round {round_idx + 1} after epoch {epoch} of {config.max_epochs}"
    if epoch == 0:
        where = f"train: interrupted at the start of round {round_idx + 1}"
    if rounds_run > 0 and config.save_path is not None:
        resume = f"--resume {config.save_path}"
        return f"{where}; checkpoint {config.save_path} holds {round_idx} round(s): continue with {resume}"
    if config.resume_path is not None:
        return f"{where}; no round completed since resuming: continue with --resume {config.resume_path}"
    if config.save_path is not None:
        return f"{where}; no round completed, so no checkpoint was written: start again"
    return f"{where}; no --save was given, so there is nothing to resume"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    errors = _user_errors()
    from esper.simic.agent.ppo import NonFiniteUpdateError

    stop = InterruptFlag()
    stop.install()
    try:
        config = config_from_args(args)
        if config.env_workers > 1:
            import torch

            torch.set_num_threads(1)  # one intra-op thread per env worker, or the workers oversubscribe the cores
        from esper.simic.training.vectorized import run_training

        result = run_training(config, controller=args.command, progress=not args.quiet, stop=stop)
    except errors as exc:
        print(f"train: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except NonFiniteUpdateError as exc:
        print(f"train: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("train: aborted by a second interrupt; the checkpoint holds the last completed round", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        stop.restore()
    if result.interrupted_at is not None:
        print(interrupted_message(config, result.interrupted_at, len(result.rounds)), file=sys.stderr)
        return EXIT_INTERRUPTED
    last = result.rounds[-1] if result.rounds else None
    if last is not None and not args.quiet:
        print(
            f"done: {len(result.rounds)} round(s), mean final accuracy {last.mean_final_accuracy:.2f}%, "
            f"mean episode reward {last.mean_reward:.3f}, {last.env_epochs_per_s:.2f} env-epochs/s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
