"""Task specifications: the host architecture, data source and optimizer settings of each task."""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field


class UnknownTaskError(ValueError):
    """A task name that is not registered."""


class TaskSpecError(UnknownTaskError):
    """A TaskSpec field outside its allowed range (an UnknownTaskError, so the CLI reports it in one line, exit 2)."""


# The allowed range of each whole-number TaskSpec field, checked by `validate_task_spec` (inclusive bounds).
TASK_INT_RANGES: dict[str, tuple[int, int]] = {
    "base_channels": (1, 256),
    "n_blocks": (1, 8),
    "kernel_size": (1, 11),
    "in_channels": (1, 64),
    "image_size": (1, 4096),
    "num_classes": (2, 100_000),
}
TASK_MAX_BLOCK_CHANNELS = 4096  # base_channels * 2**(n_blocks - 1), the widest block
# The allowed range of each float field: (low, high, whether low itself is allowed).
TASK_FLOAT_RANGES: dict[str, tuple[float, float, bool]] = {
    "host_lr": (0.0, 10.0, False),
    "seed_lr": (0.0, 10.0, False),
    "momentum": (0.0, 1.0, True),
    "weight_decay": (0.0, 1.0, True),
    "max_grad_norm": (0.0, 1e6, False),
}


@dataclass(frozen=True)
class TaskSpec:
    """Everything the trainer needs to build a host and feed it data, for one named task."""

    name: str
    base_channels: int
    n_blocks: int = 3
    kernel_size: int = 3
    pool_layers: int | None = None  # None: pool after every block
    in_channels: int = 3
    image_size: int = 32
    num_classes: int = 10
    default_slots: tuple[str, ...] = ("r0c1",)
    dataset: str = "synthetic"
    host_lr: float = 0.01
    seed_lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 5e-4
    max_grad_norm: float = 1.0
    description: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def num_pool_layers(self) -> int:
        return self.n_blocks if self.pool_layers is None else self.pool_layers

    def block_channels(self, block: int) -> int:
        """Output channels of block `block`: base_channels * 2**block."""
        return int(self.base_channels * 2**block)


TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec(
            name="cifar_baseline",
            base_channels=8,
            description="3 blocks 8->16->32, 3x3 kernels, pool after every block (~6K params)",
        ),
        TaskSpec(
            name="cifar_impaired",
            base_channels=1,
            kernel_size=1,
            description="base 1, 1x1 kernels: a host that cannot see spatial structure on its own",
        ),
        TaskSpec(
            name="cifar_minimal",
            base_channels=2,
            kernel_size=1,
            pool_layers=0,
            description="base 2, 1x1 kernels, no pooling",
        ),
        TaskSpec(
            name="cifar_scale",
            base_channels=8,
            n_blocks=5,
            description="5 blocks, 3x3 kernels",
        ),
    )
}

VALID_TASKS: tuple[str, ...] = tuple(TASKS)


def validate_task_spec(spec: TaskSpec, where: str = "task") -> TaskSpec:
    """Refuse a TaskSpec whose host would not build or would not fit in memory: TaskSpecError, one line naming the
    field, its value and the allowed range (TASK_INT_RANGES, TASK_FLOAT_RANGES, TASK_MAX_BLOCK_CHANNELS)."""
    label = f"{where} {spec.name!r}" if isinstance(spec.name, str) else where
    for name, (low, high) in TASK_INT_RANGES.items():
        value = getattr(spec, name)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise TaskSpecError(f"{label}: {name}={value!r} is out of range: use a whole number from {low} to {high}")
    pools = spec.pool_layers
    if pools is not None and (isinstance(pools, bool) or not isinstance(pools, int) or not 0 <= pools <= spec.n_blocks):
        raise TaskSpecError(
            f"{label}: pool_layers={pools!r} is out of range: use None or a whole number from 0 to n_blocks "
            f"({spec.n_blocks})"
        )
    widest = spec.block_channels(spec.n_blocks - 1)
    if widest > TASK_MAX_BLOCK_CHANNELS:
        raise TaskSpecError(
            f"{label}: base_channels={spec.base_channels} with n_blocks={spec.n_blocks} makes {widest} channels in the "
            f"last block, over {TASK_MAX_BLOCK_CHANNELS}: lower base_channels or n_blocks"
        )
    for name, (floor, ceiling, low_allowed) in TASK_FLOAT_RANGES.items():
        value = getattr(spec, name)
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not number or not (floor <= value if low_allowed else floor < value) or value > ceiling:
            bracket = "[" if low_allowed else "("
            raise TaskSpecError(
                f"{label}: {name}={value!r} is out of range: use a number in {bracket}{floor}, {ceiling}]"
            )
    slots = spec.default_slots
    if not isinstance(slots, tuple) or not slots or not all(isinstance(slot, str) for slot in slots):
        raise TaskSpecError(f"{label}: default_slots={slots!r}: use a non-empty tuple of slot ids such as ('r0c1',)")
    return spec


def register_task(spec: TaskSpec) -> TaskSpec:
    """Add your own task (host shape, learning rates) under `spec.name`; refuses to replace a built-in one."""
    validate_task_spec(spec)
    if spec.name in VALID_TASKS:
        raise UnknownTaskError(f"task {spec.name!r} is built in: give your task another name")
    TASKS[spec.name] = spec
    return spec


def get_task_spec(name: str) -> TaskSpec:
    """Look up a task by name, or import one given as `package.module:ATTRIBUTE` (a TaskSpec); unknown names raise
    with the list of valid ones."""
    if ":" in name:
        return _imported_task(name)
    try:
        return TASKS[name]
    except KeyError:
        choices = ", ".join(TASKS)
        raise UnknownTaskError(
            f"unknown task {name!r}: choose one of {choices}, or pass package.module:ATTRIBUTE naming a TaskSpec"
        ) from None


def _first_line(error: BaseException, limit: int = 200) -> str:
    """The error's first non-blank line, at most `limit` characters (leyline imports no other esper package, so
    not `esper.messages.first_line`)."""
    line = next((text.strip() for text in str(error).splitlines() if text.strip()), type(error).__name__)
    return line if len(line) <= limit else line[:limit].rsplit(" ", 1)[0] + " ..."


def _imported_task(spec: str) -> TaskSpec:
    module_name, _, attribute = spec.partition(":")
    try:
        task = getattr(importlib.import_module(module_name), attribute)
    except (Exception, SystemExit) as error:  # the user's module runs here: any failure is one line naming it
        raise UnknownTaskError(
            f"--task {spec}: cannot import {attribute!r} from {module_name!r} ({type(error).__name__}: "
            f"{_first_line(error)})"
        ) from None
    if not isinstance(task, TaskSpec):
        raise UnknownTaskError(f"--task {spec} is a {type(task).__name__}, not an esper.leyline TaskSpec")
    return validate_task_spec(task, f"--task {spec}")
