"""The run's memory, estimated before anything is allocated: a lower bound by part, refused when it cannot fit."""

from __future__ import annotations

import math

import torch

from esper.host_memory import gib, memory_left
from esper.kasmina.host import CNNHost
from esper.leyline import ACTION_HEAD_NAMES, SlotConfig, TaskSpec
from esper.simic.training.config import ConfigError, TrainingConfig
from esper.tamiyo.features import state_dim
from esper.tamiyo.masks import mask_shapes

__all__ = ["MemoryEstimateError", "check_memory", "memory_estimate"]


class MemoryEstimateError(ConfigError):
    """The run's estimated memory (a lower bound) exceeds what is available: one line naming both and the flags."""


CIFAR_SHAPED = ("synthetic", "cifar10")


CIFAR_PIXELS = 3 * 32 * 32


CIFAR10_SPLITS = (50_000, 10_000)  # images in CIFAR-10's train and test files


def memory_estimate(
    config: TrainingConfig, controller: str, task: TaskSpec, slot_config: SlotConfig, local_envs: int
) -> dict[str, int]:
    """A lower bound, in bytes, of what a run allocates, by part; only what is certain to be allocated is counted.

    - rollout buffer (ppo only): envs x episode length x (observation float32s, blueprint int64s per slot, one
      bool per action-mask entry, an int64 action and a float32 log-prob per head, value, reward, op, flags and
      the LSTM's h and c float32s);
    - env hosts: each env's host model's parameters (float32), without seeds, gradients or optimizer state;
    - data: the train and val images (float32, 3x32x32) every process holds, for the built-in CIFAR-shaped
      datasets (synthetic, cifar10); for an npz archive, what loading it takes, read from its headers (every member
      as read, and the float32 copies a split's conversion makes: `arrays.loading_footprint`); images from an image
      folder or your own loader are not counted, their shape is not known before they are loaded.
    Activations, torch's own memory and the Python process are not counted, so the real need is higher."""
    epochs = config.max_epochs
    slots = slot_config.num_slots
    heads = len(ACTION_HEAD_NAMES)
    per_step = (
        4 * state_dim(slots)
        + 8 * slots
        + sum(math.prod(shape) for shape in mask_shapes(slots).values())
        + heads * (8 + 4)
        + 18  # value 4, effective op 8, reward 4, done 1, truncated 1
        + 2 * 4 * config.lstm_hidden_dim
    )
    rollout = config.n_envs * epochs * per_step if controller != "heuristic" else 0
    with torch.random.fork_rng(devices=[]):
        host_params = sum(p.numel() for p in CNNHost(task).parameters())
    train, val = config.train_samples * config.n_envs, config.val_samples * config.n_envs
    dataset = config.dataset or task.dataset
    if dataset == "cifar10":  # the first n samples of the files: at most what the files hold
        train, val = min(train, CIFAR10_SPLITS[0]), min(val, CIFAR10_SPLITS[1])
    known = dataset in CIFAR_SHAPED  # a loader's or a folder's own images: shape unknown before loading, not counted
    data = 4 * CIFAR_PIXELS * (train + val) if known else 0
    if dataset == "npz" and config.data_dir is not None:
        from esper.data.arrays import loading_footprint

        data = loading_footprint(config.data_dir, {"train": train, "val": val}) or 0
    return {"rollout buffer": rollout, "env hosts": 4 * host_params * local_envs, "data": data}


def check_memory(
    config: TrainingConfig,
    controller: str,
    task: TaskSpec,
    slot_config: SlotConfig,
    device: torch.device,
    local_envs: int,
    available: int | None = None,
) -> None:
    """Refuse, before anything is allocated, a run whose estimated memory (a lower bound) exceeds the memory
    available: host memory, plus on CUDA the device's free memory for the rollout buffer and the hosts."""
    parts = memory_estimate(config, controller, task, slot_config, local_envs)
    free, limited = (available, False) if available is not None else memory_left()
    needs = [("memory", sum(parts.values()), free)]
    if device.type == "cuda" and available is None:
        on_device = parts["rollout buffer"] + parts["env hosts"]
        needs = [("memory", parts["data"], free), (f"{device} memory", on_device, torch.cuda.mem_get_info(device)[0])]
    for kind, need, have in needs:
        if have is None or need <= have:
            continue
        detail = ", ".join(f"{name} {gib(size)}" for name, size in parts.items() if size)
        why = " under this process's address-space limit (ulimit -v)" if limited and kind == "memory" else ""
        raise MemoryEstimateError(
            f"this run needs at least {gib(need)} of {kind} ({detail}; a lower-bound estimate) but {gib(have)} "
            f"is available{why}: lower --envs, --episode-length, --train-samples or --val-samples"
            + (" (or pass a smaller --data-dir archive)" if config.dataset == "npz" and parts["data"] else "")
        )
