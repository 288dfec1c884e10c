"""Task specifications: the host architecture, data source and optimizer settings of each task."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field


class UnknownTaskError(ValueError):
    """A task name that is not registered."""


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


def register_task(spec: TaskSpec) -> TaskSpec:
    """Add your own task (host shape, learning rates) under `spec.name`; refuses to replace a built-in one."""
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


def _imported_task(spec: str) -> TaskSpec:
    module_name, _, attribute = spec.partition(":")
    try:
        task = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as error:
        raise UnknownTaskError(f"--task {spec}: cannot import {attribute!r} from {module_name!r} ({error})") from None
    if not isinstance(task, TaskSpec):
        raise UnknownTaskError(f"--task {spec} is a {type(task).__name__}, not an esper.leyline TaskSpec")
    return task
