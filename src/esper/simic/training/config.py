"""TrainingConfig: every knob of a run, declared once. Each field carries its flag, help, group and valid range.

The command line (`esper.scripts.train`) is generated from these declarations, `--config-json` and presets load
into the same frozen dataclass, and `validate` checks every range and every cross-field rule in one place, so
a bad value is refused before any work starts with one line naming the flag (or JSON key) and the fix.
Adding a flag is one edit: declare the field here with `option(...)`.

Loading a config needs no torch, torchvision or numpy; enum-valued fields take the enums from `esper.leyline`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import stat
import types
import typing
from dataclasses import dataclass
from enum import Enum
from pathlib import Path, PurePath
from typing import Any

from esper.leyline import TelemetryLevel
from esper.leyline.options import AmpMode, CompileBackend, CompileMode, DatasetName, RewardMode


class ConfigError(ValueError):
    """A bad configuration value; the message is one line naming the key and the fix."""


@dataclass(frozen=True)
class Option:
    """How one TrainingConfig field appears on the command line and which values it accepts."""

    help: str
    group: str
    flag: str | None = None  # None: config-json only (not on the command line)
    ppo_only: bool = False  # offered by `train ppo` only
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False  # minimum itself is refused (e.g. a learning rate must be > 0)
    metavar: str | None = None


def option(default: Any, help: str, group: str, **kwargs: Any) -> Any:
    """A dataclass field whose metadata says how the CLI offers it and which values are valid."""
    meta = {"option": Option(help=help, group=group, **kwargs)}
    if isinstance(default, (list, dict, set)):
        raise TypeError("mutable defaults are not allowed in a frozen config: use a tuple")
    return dataclasses.field(default=default, metadata=meta)


# a --config-json larger than this is refused before reading: a config is a few hundred bytes of keys
CONFIG_FILE_LIMIT_BYTES = 1 << 20

GROUPS = {
    "loop": "loop shape",
    "hardware": "hardware",
    "data": "data",
    "ppo": "PPO",
    "reward": "rewards and lifecycle",
    "io": "telemetry and checkpoints",
    "test": "fault injection (tests)",
}


@dataclass(frozen=True)
class TrainingConfig:
    """The full, immutable configuration of a run (flat JSON keys; groups are in each field's metadata)."""

    # loop shape
    n_episodes: int = option(
        100, "PPO rounds (each: one episode per env, then one update)", "loop", flag="--rounds", minimum=1
    )
    n_envs: int = option(4, "parallel envs K", "loop", flag="--envs", minimum=1, maximum=4096)
    max_epochs: int = option(
        150, "epochs per episode (also the LSTM chunk length)", "loop", flag="--episode-length", minimum=1
    )
    task: str = option(
        "cifar_baseline",
        "task: cifar_baseline, cifar_impaired, cifar_minimal, cifar_scale, or package.module:NAME of your TaskSpec",
        "loop",
        flag="--task",
        metavar="NAME",
    )
    slots: tuple[str, ...] = option(
        ("r0c1",), "enabled slot ids r{row}c{col}, e.g. r0c0 r0c1 r0c2", "loop", flag="--slots", metavar="SLOT"
    )
    max_seeds: int | None = option(
        None, "seeds an env may germinate per episode (default: no cap)", "loop", flag="--max-seeds", minimum=1
    )
    seed: int = option(42, "run seed (every random stream derives from it)", "loop", flag="--seed", minimum=0)
    # hardware
    device: str = option("cpu", "cpu, cuda or cuda:N", "hardware", flag="--device", metavar="DEVICE")
    devices: tuple[str, ...] | None = option(
        None,
        "env placement: env i runs on devices[i % n] (default: --device)",
        "hardware",
        flag="--devices",
        metavar="DEVICE",
    )
    amp: AmpMode = option(
        AmpMode.OFF, "mixed precision on CUDA (CPU always runs fp32)", "hardware", flag="--amp", ppo_only=True
    )
    compile: CompileBackend = option(
        CompileBackend.OFF,
        "compile the policy network with torch.compile on this backend, after its weights are loaded (off: eager; "
        "see docs/measurements.md for what each costs and buys)",
        "hardware",
        flag="--compile",
        ppo_only=True,
    )
    compile_mode: CompileMode = option(
        CompileMode.DEFAULT,
        "inductor's mode, for --compile=inductor or --compile-step=inductor only",
        "hardware",
        flag="--compile-mode",
    )
    compile_step: CompileBackend = option(
        CompileBackend.OFF,
        "compile each env's train step (forward, loss and backward) with torch.compile on this backend; it is captured "
        "again when a seed changes the model (germinated, a new stage, removed); with --compile-mode reduce-overhead "
        "on CUDA, inductor also records CUDA graphs; aot_eager computes eager's bits (off: eager)",
        "hardware",
        flag="--compile-step",
    )
    cuda_graphs: bool = option(
        False,
        "on CUDA, capture each env's whole train step (forward, backward, clips, SGD steps) and its fused "
        "validation of a batch as CUDA graphs and replay them: the same bits as eager, one launch each; captured "
        "again when a seed changes the model (docs/measurements.md); not with mixed precision, a compiled train "
        "step or env worker threads",
        "hardware",
        flag="--cuda-graphs",
    )
    gpu_preload: bool = option(False, "keep the whole dataset on the device", "hardware", flag="--gpu-preload")
    deterministic: bool = option(
        True,
        "on CUDA, deterministic kernels (torch.use_deterministic_algorithms, cuDNN deterministic, cuBLAS workspace "
        ":4096:8), so the same seed gives the same weights; --no-deterministic: faster, autotuned kernels whose "
        "results differ run to run (no effect on CPU)",
        "hardware",
        flag="--deterministic",
    )
    env_workers: int = option(
        1,
        "train and validate envs on N threads at once (on CUDA each env issues onto its own stream, so envs "
        "overlap); pins one torch thread, so results equal a one-thread run (OMP_NUM_THREADS=1) with envs in turn",
        "hardware",
        flag="--env-workers",
        minimum=1,
        maximum=256,
    )
    # data
    train_samples: int = option(1000, "training samples per env per epoch", "data", flag="--train-samples", minimum=1)
    val_samples: int = option(200, "validation samples per env per epoch", "data", flag="--val-samples", minimum=1)
    batch_size: int = option(50, "batch size per env", "data", flag="--batch-size", minimum=1)
    data_dir: str | None = option(
        None,
        "cifar10: the folder holding cifar-10-batches-py; npz: the .npz archive of your own images",
        "data",
        flag="--data-dir",
        metavar="PATH",
    )
    augment: bool | None = option(
        None,
        "train-time random crop (padding 4) and horizontal flip (default: on for cifar10 only)",
        "data",
        flag="--augment",
    )
    normalize: bool = option(
        True,
        "normalize your own data (npz, imagefolder) per channel with the train split's statistics",
        "data",
        flag="--normalize",
    )
    dataset: str | None = option(
        None,
        "task data: synthetic, cifar10, npz, imagefolder, or your own loader as package.module:function, e.g. "
        "esper.data.digits:load (default: the task's own, synthetic)",
        "data",
        flag="--dataset",
        metavar="NAME",
    )
    # PPO
    lr: float = option(
        3e-4,
        "policy learning rate",
        "ppo",
        flag="--lr",
        ppo_only=True,
        minimum=0.0,
        exclusive_minimum=True,
        maximum=1.0,
    )
    clip_ratio: float = option(0.2, "PPO clip ratio", "ppo", minimum=0.0, exclusive_minimum=True, maximum=1.0)
    gamma: float = option(
        0.995, "discount (also the PBRS gamma)", "ppo", minimum=0.0, exclusive_minimum=True, maximum=1.0
    )
    gae_lambda: float = option(0.98, "GAE lambda", "ppo", minimum=0.0, maximum=1.0)
    entropy_coef: float = option(0.05, "entropy bonus weight", "ppo", minimum=0.0)
    entropy_coef_end: float | None = option(None, "entropy weight at the end of the anneal", "ppo", minimum=0.0)
    entropy_anneal_episodes: int = option(
        0,
        "episodes over which the entropy weight anneals to entropy_coef_end (0: no anneal)",
        "ppo",
        flag="--entropy-anneal-episodes",
        ppo_only=True,
        minimum=0,
    )
    ppo_updates_per_batch: int = option(
        1, "PPO updates per round", "ppo", flag="--ppo-epochs", ppo_only=True, minimum=1
    )
    value_coef: float = option(1.0, "value loss weight", "ppo", minimum=0.0)
    max_policy_grad_norm: float = option(5.0, "policy gradient clip norm", "ppo", minimum=0.0, exclusive_minimum=True)
    target_kl: float = option(0.015, "KL at which an update stops early", "ppo", minimum=0.0, exclusive_minimum=True)
    hidden_dim: int = option(512, "policy MLP width", "ppo", minimum=1, maximum=65536)
    lstm_hidden_dim: int = option(
        512, "LSTM hidden size", "ppo", flag="--memory-size", ppo_only=True, minimum=1, maximum=65536
    )
    # rewards and lifecycle
    reward_mode: RewardMode = option(RewardMode.SHAPED, "reward function", "reward", flag="--reward-mode")
    param_budget: int = option(500_000, "seed parameter budget of the rent penalty", "reward", minimum=1)
    plateau_threshold: float = option(
        0.5, "accuracy gain (points) below which training has plateaued", "reward", minimum=0.0
    )
    improvement_threshold: float = option(
        2.0, "accuracy gain (points) that counts as an improvement", "reward", minimum=0.0
    )
    permissive_gates: bool = option(True, "lifecycle gates pass on age alone", "reward")
    max_grad_norm: float = option(1.0, "host gradient clip norm", "reward", minimum=0.0, exclusive_minimum=True)
    # I/O
    telemetry_dir: str | None = option(
        None, "write events to DIR/<run-name>/events.jsonl", "io", flag="--telemetry-dir", metavar="DIR"
    )
    telemetry_level: TelemetryLevel = option(
        TelemetryLevel.NORMAL, "how many events to write", "io", flag="--telemetry-level"
    )
    run_name: str | None = option(
        None,
        "name of the telemetry run folder inside --telemetry-dir (default: timestamped)",
        "io",
        flag="--run-name",
        metavar="NAME",
    )
    save_path: str | None = option(
        None, "write a checkpoint here after every round (atomic)", "io", flag="--save", metavar="PATH"
    )
    resume_path: str | None = option(
        None, "resume from a checkpoint written by --save", "io", flag="--resume", metavar="PATH"
    )
    overwrite: bool = option(
        False, "let --save replace an existing file that is not an esper checkpoint", "io", flag="--overwrite"
    )
    # test hooks
    inject_nan_epoch: int | None = option(
        None, "make env 0's loss non-finite at this epoch of round 0", "test", minimum=1
    )
    inject_rank_failure: tuple[int, ...] | None = option(
        None, "[rank, epoch]: in a sharded run, that rank raises at that epoch of round 0", "test"
    )

    def __post_init__(self) -> None:
        hints = _type_hints()
        for spec in dataclasses.fields(self):  # lists to tuples, CLI/JSON names to enums, wrong types refused
            object.__setattr__(self, spec.name, _coerce(spec.name, getattr(self, spec.name), hints[spec.name]))
        self.validate()

    def validate(self) -> None:
        """Every range and cross-field rule; raises ConfigError with one line naming the flag and the fix."""
        for spec in dataclasses.fields(self):
            _check_range(spec, getattr(self, spec.name))
            _check_text(spec.name, getattr(self, spec.name))
        if not self.slots:
            raise ConfigError("--slots needs at least one slot id, e.g. --slots r0c1")
        if self.devices is not None and not self.devices:
            raise ConfigError("--devices needs at least one device, e.g. --devices cpu")
        if self.batch_size > self.train_samples:
            raise ConfigError(
                f"--batch-size {self.batch_size} is larger than --train-samples {self.train_samples}: an epoch would "
                "have no full training batch; lower --batch-size or raise --train-samples"
            )
        if self.dataset is not None:
            _check_dataset(self.dataset)
        if self.data_dir is not None and self.dataset in (None, DatasetName.SYNTHETIC):
            raise ConfigError(
                "--data-dir is read only with --dataset cifar10, npz, imagefolder or a package.module:function "
                "loader: add the --dataset it holds or drop --data-dir"
            )
        if self.run_name is not None:
            _check_run_name(self.run_name)
        inductor = CompileBackend.INDUCTOR in (self.compile, self.compile_step)
        if self.compile_mode is not CompileMode.DEFAULT and not inductor:
            raise ConfigError(
                f"--compile-mode {self.compile_mode.value} is inductor's: add --compile inductor or --compile-step "
                "inductor, or drop --compile-mode"
            )
        if self.cuda_graphs:
            on = self.devices if self.devices is not None else (self.device,)
            if not all(str(device).startswith("cuda") for device in on):
                raise ConfigError(
                    "--cuda-graphs captures CUDA graphs: run it with --device cuda (or --devices on CUDA only), "
                    "or drop it"
                )
            if self.amp is not AmpMode.OFF or self.compile_step is not CompileBackend.OFF:
                raise ConfigError("--cuda-graphs captures the eager fp32 step: drop --amp and --compile-step, or it")
            if self.env_workers > 1:
                raise ConfigError(
                    "--cuda-graphs trains envs in turn (with env worker threads it is not yet verified on a GPU): "
                    "drop --env-workers or --cuda-graphs"
                )
        fault = self.inject_rank_failure
        if fault is not None and (len(fault) != 2 or fault[0] < 0 or fault[1] < 1):
            raise ConfigError(f"inject_rank_failure must be [rank >= 0, epoch >= 1], got {list(fault)}")

    @property
    def chunk_length(self) -> int:
        """The LSTM chunk length; always equal to max_epochs (one chunk per episode)."""
        return self.max_epochs

    def replace(self, **changes: Any) -> TrainingConfig:
        """A copy with `changes` applied (validated like any other config)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values, the inverse of `from_dict` (enums as their names in the CLI, tuples as lists)."""
        return {spec.name: json_value(getattr(self, spec.name)) for spec in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any], base: TrainingConfig | None = None) -> TrainingConfig:
        """Strict: unknown keys, wrong types and bad values raise ConfigError naming the key."""
        if not isinstance(data, dict):
            raise ConfigError(f"config must be a JSON object, got {type(data).__name__}")
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ConfigError(
                f"unknown config key(s) {', '.join(map(repr, unknown))}: valid keys are {', '.join(known)}"
            )
        values = {name: getattr(base, name) for name in known} if base is not None else {}
        values.update(data)
        return cls(**values)

    @classmethod
    def from_json_file(cls, path: str | Path, base: TrainingConfig | None = None) -> TrainingConfig:
        try:
            status = Path(path).stat()
        except OSError as exc:
            raise ConfigError(f"cannot read --config-json {path}: {exc.strerror}") from None
        if not stat.S_ISREG(status.st_mode):  # a FIFO would block forever, /dev/zero would never end
            raise ConfigError(
                f"--config-json {path} is not a regular file (a folder, FIFO or device): pass a JSON file"
            )
        if status.st_size > CONFIG_FILE_LIMIT_BYTES:
            raise ConfigError(
                f"--config-json {path} is {status.st_size} bytes, over the limit of {CONFIG_FILE_LIMIT_BYTES} "
                "(CONFIG_FILE_LIMIT_BYTES): a config is a small JSON object of config keys"
            )
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read --config-json {path}: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"--config-json {path} is not UTF-8 text ({exc.reason}): pass a JSON file") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--config-json {path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
        except RecursionError:
            raise ConfigError(f"--config-json {path} nests too deeply: pass a flat object of config keys") from None
        return cls.from_dict(data, base)


def option_of(spec: dataclasses.Field[Any]) -> Option:
    option_meta = spec.metadata.get("option")
    assert isinstance(option_meta, Option), f"TrainingConfig.{spec.name} is declared without option(...)"
    return option_meta


def display_name(name: str) -> str:
    """How messages name a field: its flag when it has one, else its config key."""
    flag = option_of(_FIELDS[name]).flag
    return flag if flag is not None else f"config key {name!r}"


def _check_range(spec: dataclasses.Field[Any], value: Any) -> None:
    meta = option_of(spec)
    if value is None or isinstance(value, (bool, Enum, str, tuple)):
        return
    name = display_name(spec.name)
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    if meta.minimum is not None:
        below = value <= meta.minimum if meta.exclusive_minimum else value < meta.minimum
        if below:
            bound = f"> {meta.minimum:g}" if meta.exclusive_minimum else f">= {meta.minimum:g}"
            if isinstance(value, int) and meta.minimum == 1 and not meta.exclusive_minimum:
                raise ConfigError(f"{name} must be a positive integer, got {value}")
            raise ConfigError(f"{name} must be {bound}, got {value!r}")
    if meta.maximum is not None and value > meta.maximum:
        raise ConfigError(f"{name} must be <= {meta.maximum:g}, got {value!r}")


def _check_text(name: str, value: Any) -> None:
    """No NUL byte in any name or path: the OS refuses them deep inside a later call."""
    texts = value if isinstance(value, tuple) else (value,)
    if any(isinstance(text, str) and "\x00" in text for text in texts):
        raise ConfigError(f"{display_name(name)} contains a NUL byte: pass plain text")


def _check_dataset(dataset: str) -> None:
    if dataset in enum_choices(DatasetName):
        return
    module, _, function = dataset.partition(":")
    if not (module and function and all(part.isidentifier() for part in [*module.split("."), function])):
        raise ConfigError(
            f"--dataset must be one of {', '.join(enum_choices(DatasetName))} or package.module:function, "
            f"got {dataset!r}"
        )


def check_value(name: str, value: Any) -> None:
    """Check one field's range alone (the CLI checks each flag as it parses it)."""
    _check_range(_FIELDS[name], value)


def _check_run_name(run_name: str) -> None:
    parts = PurePath(run_name).parts
    if not run_name.strip() or PurePath(run_name).is_absolute() or len(parts) != 1 or parts[0] in (".", ".."):
        raise ConfigError(
            f"--run-name {run_name!r} must be a plain folder name inside --telemetry-dir (no '/', '..' or absolute "
            "path): pick a name such as run-1"
        )


def enum_choices(enum: type[Enum]) -> tuple[str, ...]:
    """How the CLI and JSON spell `enum`'s members (telemetry levels by lower-case name, the rest by value)."""
    return tuple(str(json_value(member)) for member in enum)


def parse_enum(enum: type[Enum], text: str, name: str) -> Any:
    """The member of `enum` spelled `text` (as on the CLI); ConfigError naming `name` and the choices."""
    allowed = enum_choices(enum)
    if isinstance(text, str) and text in allowed:
        return list(enum)[allowed.index(text)]
    raise ConfigError(f"{name} must be one of {', '.join(allowed)}, got {text!r}")


def json_value(value: Any) -> Any:
    """A field's value as the CLI and JSON spell it: telemetry levels by lower-case name, other enums by value,
    tuples as lists."""
    if isinstance(value, TelemetryLevel):
        return value.name.lower()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value


@functools.cache
def _type_hints() -> dict[str, Any]:
    return typing.get_type_hints(TrainingConfig)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(key: str, value: Any, hint: Any) -> Any:
    """Check a JSON value against the field's type and convert it (lists to tuples, names to enums)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        hint = next(opt for opt in options if opt is not type(None))
        origin = typing.get_origin(hint)
    if isinstance(hint, type) and issubclass(hint, Enum):
        if isinstance(value, hint):
            return value
        return parse_enum(hint, value, display_name(key) if key in _FIELDS else repr(key))
    if origin is tuple:
        item_type = typing.get_args(hint)[0]
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, item_type) for v in value):
            raise ConfigError(f"config key {key!r} must be a list of {_type_name(item_type)}, got {value!r}")
        return tuple(value)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"config key {key!r} must be a number, got {value!r}")
        if not math.isfinite(value):
            raise ConfigError(f"config key {key!r} must be a finite number, got {value!r}")
        return float(value) if isinstance(value, int) else value
    if hint is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"config key {key!r} must be an integer, got {value!r}")
    if not isinstance(value, hint):
        raise ConfigError(f"config key {key!r} must be {_type_name(hint)}, got {value!r}")
    return value


_FIELDS = {spec.name: spec for spec in dataclasses.fields(TrainingConfig)}
for _spec in _FIELDS.values():
    option_of(_spec)  # every field is declared with option(...): fails at import otherwise
    if option_of(_spec).group not in GROUPS:
        raise AssertionError(f"TrainingConfig.{_spec.name}: unknown group {option_of(_spec).group!r}")


PRESETS: dict[str, dict[str, Any]] = {
    "cifar_baseline": {"task": "cifar_baseline", "entropy_coef": 0.1, "plateau_threshold": 0.4},
    "cifar_baseline_stable": {
        "task": "cifar_baseline",
        "n_episodes": 200,
        "clip_ratio": 0.1,
        "entropy_coef": 0.06,
        "entropy_coef_end": 0.03,
        "entropy_anneal_episodes": 200,
        "plateau_threshold": 0.4,
    },
    "cifar_impaired": {"task": "cifar_impaired", "entropy_coef": 0.1, "plateau_threshold": 0.4},
    "cifar_minimal": {"task": "cifar_minimal", "entropy_coef": 0.1, "plateau_threshold": 0.4},
}


def preset_config(name: str) -> TrainingConfig:
    """The configuration of a named preset; unknown names raise ConfigError listing the presets."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}: choose one of {', '.join(PRESETS)}")
    return TrainingConfig.from_dict(PRESETS[name])
