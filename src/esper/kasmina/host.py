"""The CNN host: conv-BN-ReLU blocks, optional max-pooling, then global average pool + Linear.

The host exposes its segments (`forward_block`, `pool`, `head`) so `MorphogeneticModel` can run seed slots
between them: slot `r0c{i}` sees block i's output before pooling, `r1c{i}` the output after block i's pool.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from esper.leyline import TaskSpec
from esper.leyline.slots import ROW_POST_POOL, ROW_PRE_POOL, format_slot_id


def batch_norm(channels: int) -> nn.BatchNorm2d:
    """`nn.BatchNorm2d(channels)` built where the default device says, without an upload.

    BatchNorm's own build makes its step counter with `torch.tensor(0)`: under `torch.device("cuda")` (`built_on`)
    that copies a host scalar to the device while the host waits, one sync per BatchNorm (the H200, 2026-12-04:
    every host and seed built). Built on `meta` and made where the default device is, its statistics and affine
    parameters are set in place with the same values (BatchNorm draws no random numbers)."""
    with torch.device("meta"):
        norm = nn.BatchNorm2d(channels)
    norm.to_empty(device=torch.get_default_device())
    norm.reset_parameters()
    return norm


class ConvBlock(nn.Module):
    """conv k x k (no bias, same padding) -> BatchNorm -> ReLU."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2, bias=False)
        self.bn = batch_norm(out_channels)

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.bn(self.conv(x)))


class CNNHost(nn.Module):
    """The host network of a CNN task: `spec.n_blocks` ConvBlocks with `spec.block_channels(i)` channels.

    MaxPool(2) follows each of the first `spec.num_pool_layers` blocks. With `init_seed`, parameters are
    initialised under a forked global RNG seeded with it (otherwise from the current global RNG).
    """

    def __init__(self, spec: TaskSpec, *, init_seed: int | None = None) -> None:
        super().__init__()
        if spec.num_pool_layers > spec.n_blocks:
            raise ValueError(f"task {spec.name!r}: pool_layers={spec.num_pool_layers} exceeds n_blocks={spec.n_blocks}")
        self.spec = spec
        self.num_blocks = spec.n_blocks
        self.num_pool_layers = spec.num_pool_layers
        if init_seed is None:
            self._build(spec)
        else:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(init_seed)
                self._build(spec)

    def _build(self, spec: TaskSpec) -> None:
        channels = [spec.block_channels(i) for i in range(spec.n_blocks)]
        in_channels = [spec.in_channels, *channels[:-1]]
        self.blocks = nn.ModuleList(ConvBlock(cin, cout, spec.kernel_size) for cin, cout in zip(in_channels, channels))
        self.pool = nn.MaxPool2d(2)
        self.classifier = nn.Linear(channels[-1], spec.num_classes)

    def pools_after(self, block: int) -> bool:
        """True when block `block` is followed by a MaxPool."""
        return block < self.num_pool_layers

    def forward_block(self, block: int, h: Tensor) -> Tensor:
        """Run block `block` (pre-pool output)."""
        out: Tensor = self.blocks[block](h)
        return out

    def head(self, h: Tensor) -> Tensor:
        """Global average pool -> Linear: features [N, C, H, W] to logits [N, num_classes]."""
        logits: Tensor = self.classifier(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))
        return logits

    def forward(self, x: Tensor) -> Tensor:
        """The bare host (no slots)."""
        h = x
        for i in range(self.num_blocks):
            h = self.forward_block(i, h)
            if self.pools_after(i):
                h = self.pool(h)
        return self.head(h)

    def injection_channels(self) -> dict[str, int]:
        """Every legal slot id of this host -> channels there, in execution order (r0c0, r1c0, r0c1, ...)."""
        points: dict[str, int] = {}
        for i in range(self.num_blocks):
            points[format_slot_id(ROW_PRE_POOL, i)] = self.spec.block_channels(i)
            if self.pools_after(i):
                points[format_slot_id(ROW_POST_POOL, i)] = self.spec.block_channels(i)
        return points

    def param_count(self) -> int:
        return sum(p.numel() for p in self.parameters())
