"""TrainingConfig: every knob of a training run, the presets, and strict JSON loading."""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A bad configuration value; the message is one line naming the key and the fix."""


# Allowed values of the string-valued keys. Spelled out here so that loading a config needs no torch; tests
# keep them equal to RewardMode, AmpMode and TelemetryLevel.
CHOICES: dict[str, tuple[str, ...]] = {
    "reward_mode": ("shaped", "escrow", "simplified", "sparse"),
    "amp": ("off", "auto", "bfloat16", "float16"),
    "telemetry_level": ("off", "minimal", "normal", "debug"),
    "dataset": ("synthetic", "cifar10"),  # None (the default) means the task's own data set
}


@dataclass
class TrainingConfig:
    """The full configuration of a run; its fields map 1:1 onto `train_ppo_vectorized`'s arguments."""

    # loop shape
    n_episodes: int = 100  # --rounds: PPO rounds
    n_envs: int = 4
    max_epochs: int = 150  # --episode-length (also the LSTM chunk length)
    task: str = "cifar_baseline"
    slots: list[str] = field(default_factory=lambda: ["r0c1"])
    max_seeds: int | None = None
    seed: int = 42
    # hardware
    device: str = "cpu"
    devices: list[str] | None = None
    amp: str = "off"
    gpu_preload: bool = False
    env_workers: int = 1  # threads training CPU envs concurrently; same results for every value at fixed torch threads
    # data
    train_samples: int = 1000  # per env per epoch
    val_samples: int = 200  # per env per epoch
    batch_size: int = 50  # per env
    data_dir: str | None = None
    dataset: str | None = None  # "synthetic" or "cifar10"; None means the task's own
    # PPO
    lr: float = 3e-4
    clip_ratio: float = 0.2
    gamma: float = 0.995
    gae_lambda: float = 0.98
    entropy_coef: float = 0.05
    entropy_coef_end: float | None = None
    entropy_anneal_episodes: int = 0
    ppo_updates_per_batch: int = 1
    value_coef: float = 1.0
    max_policy_grad_norm: float = 5.0
    target_kl: float = 0.015
    hidden_dim: int = 512
    lstm_hidden_dim: int = 512
    # rewards and lifecycle
    reward_mode: str = "shaped"
    param_budget: int = 500_000
    plateau_threshold: float = 0.5
    improvement_threshold: float = 2.0
    permissive_gates: bool = True
    max_grad_norm: float = 1.0
    # I/O
    telemetry_dir: str | None = None
    telemetry_level: str = "normal"
    run_name: str | None = None
    save_path: str | None = None
    resume_path: str | None = None
    # test hooks
    inject_nan_epoch: int | None = None  # makes env 0's validation loss non-finite at this epoch of round 0

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        for name in _POSITIVE_INTS:
            value = getattr(self, name)
            if value < 1:
                raise ConfigError(f"{_FLAG_NAMES.get(name, name)} must be a positive integer, got {value}")
        if self.max_seeds is not None and self.max_seeds < 1:
            raise ConfigError(f"--max-seeds must be a positive integer, got {self.max_seeds}")
        if self.entropy_anneal_episodes < 0:
            raise ConfigError(f"--entropy-anneal-episodes must be >= 0, got {self.entropy_anneal_episodes}")
        if not self.slots:
            raise ConfigError("--slots needs at least one slot id, e.g. --slots r0c1")
        for name, allowed in CHOICES.items():
            value = getattr(self, name)
            if value is not None and value not in allowed:
                flag = "--" + name.replace("_", "-")
                raise ConfigError(f"{flag} must be one of {', '.join(allowed)}, got {value!r}")

    @property
    def chunk_length(self) -> int:
        """The LSTM chunk length; always equal to max_epochs (one chunk per episode)."""
        return self.max_epochs

    @classmethod
    def from_dict(cls, data: dict[str, Any], base: TrainingConfig | None = None) -> TrainingConfig:
        """Strict: unknown keys and wrong types raise ConfigError naming the key."""
        if not isinstance(data, dict):
            raise ConfigError(f"config must be a JSON object, got {type(data).__name__}")
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ConfigError(
                f"unknown config key(s) {', '.join(map(repr, unknown))}: valid keys are {', '.join(known)}"
            )
        hints = typing.get_type_hints(cls)
        values = dataclasses.asdict(base) if base is not None else {}
        for key, value in data.items():
            _check_type(key, value, hints[key])
            values[key] = list(value) if isinstance(value, list) else value
        try:
            return cls(**values)
        except TypeError as exc:  # pragma: no cover - every field has a default
            raise ConfigError(str(exc)) from None

    @classmethod
    def from_json_file(cls, path: str | Path, base: TrainingConfig | None = None) -> TrainingConfig:
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


_POSITIVE_INTS = (
    "n_episodes",
    "n_envs",
    "max_epochs",
    "train_samples",
    "val_samples",
    "batch_size",
    "ppo_updates_per_batch",
    "lstm_hidden_dim",
    "hidden_dim",
    "env_workers",
)

_FLAG_NAMES = {
    "n_episodes": "--rounds",
    "n_envs": "--envs",
    "max_epochs": "--episode-length",
    "train_samples": "--train-samples",
    "val_samples": "--val-samples",
    "batch_size": "--batch-size",
    "ppo_updates_per_batch": "--ppo-epochs",
    "lstm_hidden_dim": "--memory-size",
    "hidden_dim": "hidden_dim",
    "env_workers": "--env-workers",
}


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _check_type(key: str, value: Any, hint: Any) -> None:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return
        hint = next(opt for opt in options if opt is not type(None))
        origin = typing.get_origin(hint)
    if origin is list:
        (item_type,) = typing.get_args(hint)
        if not isinstance(value, list) or not all(isinstance(v, item_type) for v in value):
            raise ConfigError(f"config key {key!r} must be a list of {_type_name(item_type)}, got {value!r}")
        return
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"config key {key!r} must be a number, got {value!r}")
        if not math.isfinite(value):
            raise ConfigError(f"config key {key!r} must be a finite number, got {value!r}")
        return
    if hint is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"config key {key!r} must be an integer, got {value!r}")
    if not isinstance(value, hint):
        raise ConfigError(f"config key {key!r} must be {_type_name(hint)}, got {value!r}")


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
