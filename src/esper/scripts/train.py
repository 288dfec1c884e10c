"""`python -m esper.scripts.train {heuristic,ppo} ...`: the training command line.

Flow: preset (ppo) or defaults -> --config-json -> explicit flags -> TrainingConfig -> run. Bad input gets a
one-line `train: error: ...` on stderr and exit code 2, never a traceback.

Exit codes: 0 done (or nothing left to do); 1 the run failed (three consecutive non-finite PPO updates, or a
telemetry or checkpoint write failed, e.g. the disk is full or a file-size limit was hit); 2 bad input (arguments,
config, checkpoint, data, output or telemetry path, a run too large for memory), refused before any work starts;
130 / 143 / 129 stopped by SIGINT / SIGTERM / SIGHUP. The first of those signals lets the current epoch finish,
discards the unfinished round, flushes the telemetry and exits with 128 + the signal's number: the --save checkpoint
(written after every round) then holds the last completed round, so `--resume` continues from there. A second signal
aborts at once (same exit code, events flushed, the checkpoint untouched); so does the first while the run is still
being set up (data loading, the checkpoint read), in one line, whoever sent it (a loader signalling its own process).

Under `torchrun --nproc-per-node N -m esper.scripts.train ...` the K envs are sharded over the N ranks (gloo on
CPU, NCCL on CUDA) with results bitwise equal to one process (`esper.simic.training.sharding`); rank 0 writes the
checkpoint and the merged events.jsonl and prints the last line. A stop signal sent to torchrun reaches every rank,
and all stop at the same epoch boundary. A rank that fails ends the run with exit code 1 on every rank, and the
events end with TRAINING_ENDED naming the failed rank.

This module loads no torch, torchvision or numpy: the trainer and torch are imported when a run starts, so `--help`
and refused input answer without starting torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import threading
import typing
from collections.abc import Callable, Sequence
from enum import Enum
from types import FrameType
from typing import Any, NoReturn

from esper.simic.training.config import (
    GROUPS,
    PRESETS,
    ConfigError,
    Option,
    TrainingConfig,
    check_value,
    enum_choices,
    json_value,
    option_of,
    preset_config,
)

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
SEPARABLE_ACCURACY = 99.95  # percent: at or above it on synthetic data, the done line explains the 100 %


class OneLineParser(argparse.ArgumentParser):
    """argparse with a single-line error message (`<tool>: error: ...`) and exit code 2."""

    tool = "train"

    def error(self, message: str) -> NoReturn:
        from esper.messages import escape

        # an argument may hold a line break or another control character: escaped, the message stays one line
        self.exit(EXIT_USAGE, f"{self.tool}: error: {escape(message)} (see --help)\n")


def _number_parser(kind: type, field_name: str) -> Callable[[str], Any]:
    """argparse `type=` for an int or float field: parses, then checks the field's range (one-line errors)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            noun = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {noun}, got {text!r}") from None
        try:
            check_value(field_name, value)
        except ConfigError as exc:  # "--envs must be a positive integer, got 0" -> "expected a positive ..."
            raise argparse.ArgumentTypeError("expected " + str(exc).split(" must be ", 1)[-1]) from None
        return value

    return parse


def positive_int(text: str) -> int:
    """argparse `type=` for a count given outside TrainingConfig (e.g. the learning check's flags)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _add_config_flags(parser: argparse.ArgumentParser, *, ppo: bool) -> None:
    """One flag per TrainingConfig field that declares one, grouped as the config is, help and default shown."""
    defaults = TrainingConfig()
    groups = {key: parser.add_argument_group(title) for key, title in GROUPS.items()}
    hints = typing.get_type_hints(TrainingConfig)
    for spec in dataclasses.fields(TrainingConfig):
        meta = option_of(spec)
        if meta.flag is None or (meta.ppo_only and not ppo):
            continue
        kwargs = _argument_kwargs(spec.name, hints[spec.name], meta)
        default = getattr(defaults, spec.name)
        shown = _shown(default)
        text = meta.help if "default" in meta.help else f"{meta.help} (default: {shown})"
        kwargs["help"] = text.replace("%", "%%")
        groups[meta.group].add_argument(meta.flag, dest=spec.name, default=None, **kwargs)


def _shown(value: Any) -> str:
    """A default as --help shows it: as the flag spells it, lists space-separated, switches on/off."""
    value = json_value(value)
    if value is None:
        return "none"
    if isinstance(value, list):
        return " ".join(map(str, value))
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _argument_kwargs(name: str, hint: Any, meta: Option) -> dict[str, Any]:
    """argparse keyword arguments for one field, from its type."""
    args = typing.get_args(hint)
    base = next((a for a in args if a is not type(None)), hint) if args and type(None) in args else hint
    if typing.get_origin(base) is tuple:
        return {"nargs": "+", "metavar": meta.metavar}
    if base is bool:
        return {"action": argparse.BooleanOptionalAction}
    if isinstance(base, type) and issubclass(base, Enum):
        return {"choices": list(enum_choices(base))}
    if base in (int, float):
        return {"type": _number_parser(base, name), "metavar": "N" if base is int else "X"}
    return {"metavar": meta.metavar or "TEXT"}


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m esper.scripts.train",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    heuristic = commands.add_parser("heuristic", help="run the rule-based controller")
    ppo = commands.add_parser("ppo", help="train the PPO controller")
    ppo.add_argument("--preset", choices=list(PRESETS), help="start from a named preset (default: none)")
    ppo.add_argument("--config-json", metavar="FILE", help="a JSON object of config keys; unknown keys are refused")
    for sub, is_ppo in ((heuristic, False), (ppo, True)):
        _add_config_flags(sub, ppo=is_ppo)
        sub.add_argument("--quiet", action="store_true", help="no progress display and no summary line")
    return parser


def config_from_args(args: argparse.Namespace) -> TrainingConfig:
    """Preset or defaults, then --config-json, then explicit flags (validated together, in one place)."""
    config = preset_config(args.preset) if getattr(args, "preset", None) else TrainingConfig()
    if getattr(args, "config_json", None):
        config = TrainingConfig.from_json_file(args.config_json, base=config)
    names = [spec.name for spec in dataclasses.fields(TrainingConfig)]
    overrides = {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}
    return TrainingConfig.from_dict(overrides, base=config)


def _user_errors() -> tuple[type[BaseException], ...]:
    from esper.data.records import DataDirectoryError
    from esper.leyline import SlotIdError, UnknownTaskError
    from esper.nissa.backends import TelemetryPathError
    from esper.simic.training.checkpoint import CheckpointError
    from esper.simic.training.outputs import OutputPathError
    from esper.simic.training.sharding import ShardError
    from esper.simic.training.wiring import UserCodeError
    from esper.tolaria.devices import DeviceError

    return (
        ConfigError,
        SlotIdError,
        UnknownTaskError,
        DeviceError,
        CheckpointError,
        DataDirectoryError,
        TelemetryPathError,
        OutputPathError,
        ShardError,
        UserCodeError,
    )


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # Ctrl-C; docker stop, SLURM, systemd; hang-up


class InterruptFlag:
    """SIGINT, SIGTERM and SIGHUP: the first asks the run to stop after the current epoch, a second aborts now.

    While the run is still being set up (data loading, the checkpoint read: before `training_ready`), there is no
    epoch to finish, so the first signal stops it at once, whoever sent it (a `--dataset` loader that signals its own
    process included): `main` then says so in one line. `signum` keeps the first signal, so the exit code says which
    one ended the run (128 + signal number).
    """

    def __init__(self) -> None:
        self.requested = False
        self.signum: int | None = None
        self.ready = False  # set up: from here a first signal finishes the current epoch
        self._previous: dict[int, Any] = {}

    def __call__(self) -> bool:
        return self.requested

    def training_ready(self) -> None:
        self.ready = True

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested or not self.ready:
            self.signum = signum if self.signum is None else self.signum
            self.requested = True
            raise KeyboardInterrupt
        self.requested = True
        self.signum = signum
        name = signal.Signals(signum).name
        # os.write, not print: a handler may run while the main thread is inside a print to stderr
        os.write(
            2, f"train: {name} received: finishing the current epoch, then stopping (send it again to abort)\n".encode()
        )

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum if self.signum is not None else signal.SIGINT)

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():  # signal.signal works only there
            for signum in STOP_SIGNALS:
                self._previous[signum] = signal.signal(signum, self.handle)

    def restore(self) -> None:
        while self._previous:
            signum, previous = self._previous.popitem()
            signal.signal(signum, previous)


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


def setup_stopped_message(signum: int) -> str:
    """One line: a stop signal arrived while the run was being set up, so nothing was trained or written."""
    name = signal.Signals(signum).name
    return (
        f"train: {name} received while the run was being set up (loading data, reading the checkpoint), before any "
        "training: stopped, nothing was trained or saved; run the command again (if no one sent it, the run's own "
        "code did: a --dataset loader or --task module)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    errors = _user_errors()
    failures = _run_failures()
    stop = InterruptFlag()
    stop.install()
    leader = True
    try:
        config = config_from_args(args)
        if config.env_workers > 1:
            import torch

            torch.set_num_threads(1)  # one intra-op thread per env worker, or the workers oversubscribe the cores
        from esper.simic.training.launch import open_shard
        from esper.simic.training.vectorized import run_training

        with open_shard(config.n_envs, config.device, config.devices) as shard:
            leader = shard.is_leader
            result = run_training(
                config,
                controller=args.command,
                progress=not args.quiet,
                stop=stop,
                shard=shard,
                on_ready=stop.training_ready,
            )
    except errors as exc:
        say(f"train: error: {exc}")
        return EXIT_USAGE
    except failures as exc:
        say(f"train: error: {exc}")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        if not stop.requested:  # no signal arrived: the run's own code (a loader, a task) raised it
            say(
                "train: error: KeyboardInterrupt raised by the run's own code, not by a signal (a --dataset loader "
                "or a --task module?): fix the code that raises it"
            )
            return EXIT_USAGE
        if not stop.ready:
            say(setup_stopped_message(stop.exit_code - 128))
            return stop.exit_code
        print("train: aborted by a second interrupt; the checkpoint holds the last completed round", file=sys.stderr)
        return stop.exit_code
    finally:
        stop.restore()
    try:
        return report_end(config, result, stop.exit_code, quiet=args.quiet or not leader, speak=leader)
    except BrokenPipeError:  # stdout's reader went away (`| head`): the run is done and saved; end quietly
        _silence_stdout()
        return 0 if result.interrupted_at is None else stop.exit_code


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush does not report the closed pipe again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def _run_failures() -> tuple[type[BaseException], ...]:
    """Errors that end a run that had started (exit 1, one line): PPO gone non-finite, a telemetry write that
    failed, and in a sharded run a failed rank or diverged replicas."""
    from esper.nissa.backends import TelemetryWriteError
    from esper.simic.agent.ppo import NonFiniteUpdateError
    from esper.simic.training.checkpoint import CheckpointWriteError
    from esper.simic.training.sharding import PeerFailure, ReplicaDivergence
    from esper.simic.training.trainer import InjectedRankFailure

    return (
        NonFiniteUpdateError,
        TelemetryWriteError,
        CheckpointWriteError,
        PeerFailure,
        ReplicaDivergence,
        InjectedRankFailure,
    )


def say(line: str, stream: typing.TextIO | None = None) -> None:
    """Print one line (to stderr unless `stream` is given) with its control characters escaped: a path holding a
    line break or an escape sequence cannot split it or drive the terminal."""
    from esper.messages import escape

    print(escape(line), file=sys.stderr if stream is None else stream)


def report_end(config: Any, result: Any, interrupted_code: int, *, quiet: bool, speak: bool = True) -> int:
    """The run's last words and exit code: where it stopped, that nothing was left to do, or the done line
    (`speak=False`: a sharded run's other ranks, which only return the exit code)."""
    if result.interrupted_at is not None:
        if speak:
            say(interrupted_message(config, result.interrupted_at, len(result.rounds)))
        return interrupted_code
    if not speak:
        return 0
    if not result.rounds and result.start_round >= config.n_episodes:
        say(
            f"train: nothing to do: checkpoint {config.resume_path} already holds {result.start_round} round(s) and "
            f"--rounds is {config.n_episodes}: raise --rounds to train further"
        )
        return 0
    last = result.rounds[-1] if result.rounds else None
    if last is not None and not quiet:
        say(
            f"done: {len(result.rounds)} round(s), mean final accuracy {last.mean_final_accuracy:.2f}%, "
            f"mean episode reward {last.mean_reward:.3f}, {last.env_epochs_per_s:.2f} env-epochs/s; "
            + written_summary(result.outputs),
            sys.stdout,
        )
        if last.mean_final_accuracy >= SEPARABLE_ACCURACY and config.dataset in (None, "synthetic"):
            print(
                "note: the synthetic task's classes separate fully, so a healthy host reaches 100 %; on "
                "--task cifar_impaired (a host that cannot see spatial structure) accuracy shows what seeds add"
            )
    return 0


def written_summary(outputs: dict[str, str]) -> str:
    """One line naming every file the run wrote (or saying that it wrote none, and how to get them)."""
    if not outputs:
        return "wrote no files (pass --telemetry-dir DIR for events, --save PATH for a checkpoint)"
    return "wrote " + ", ".join(f"{kind} {path}" for kind, path in outputs.items())


if __name__ == "__main__":
    sys.exit(main())
