"""Task specifications: the host architecture, data source and optimizer settings of each task."""

from __future__ import annotations

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


def get_task_spec(name: str) -> TaskSpec:
    """Look up a task by name; unknown names raise with the list of valid ones."""
    try:
        return TASKS[name]
    except KeyError:
        raise UnknownTaskError(f"unknown task {name!r}: choose one of {', '.join(VALID_TASKS)}") from None
