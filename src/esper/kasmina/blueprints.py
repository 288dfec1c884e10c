"""CNN seed blueprints: shape-preserving modules a slot can germinate, and their sizes.

Every blueprint maps [N, C, H, W] to [N, C, H, W] and starts close to the identity (a zero-initialised
branch, a zero-init scale, or a near-one excitation), so a fresh seed barely disturbs the host. The brief's
parameter estimates are for 64 channels; see `BRIEF_PARAM_ESTIMATES_64`.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from esper.leyline import CNN_BLUEPRINTS, BlueprintAction

# Target channels per GroupNorm group (Wu & He, 2018); fewer when the channel count does not allow it.
TARGET_CHANNELS_PER_GROUP = 16
_GROUP_CHOICES = (32, 16, 8, 4, 2, 1)
SE_REDUCTION = 4
SE_INIT_BIAS = 3.0  # sigmoid(3) ~= 0.95: the excitation starts near identity
BOTTLENECK_REDUCTION = 4
BOTTLENECK_MIN_WIDTH = 8

# The brief's parameter estimates (esper-lite registry `param_estimate`, measured at 64 channels).
BRIEF_PARAM_ESTIMATES_64: dict[BlueprintAction, int] = {
    BlueprintAction.NOOP: 0,
    BlueprintAction.NORM: 130,
    BlueprintAction.ATTENTION: 2000,
    BlueprintAction.DEPTHWISE: 4800,
    BlueprintAction.BOTTLENECK: 4500,
    BlueprintAction.CONV_SMALL: 4200,
    BlueprintAction.CONV_LIGHT: 37000,
    BlueprintAction.CONV_HEAVY: 74000,
}


def group_count(channels: int) -> int:
    """GroupNorm groups for `channels`: the most groups with >= 16 channels each, else any divisor (>= 1)."""
    for groups in _GROUP_CHOICES:
        if channels % groups == 0 and channels // groups >= TARGET_CHANNELS_PER_GROUP:
            return groups
    for groups in _GROUP_CHOICES:
        if channels % groups == 0:
            return groups
    return 1


class CpuSafeGroupNorm(nn.GroupNorm):
    """`nn.GroupNorm` that gives torch before 2.14 an NCHW copy of a CPU input it would crash on.

    torch 2.11 and 2.13 (not 2.14.0 on) kill the process with SIGSEGV in GroupNorm's channels-last CPU backward when
    the input needs no gradient but the weight does (the kernel writes the input's gradient, which nobody asked for).
    The host runs channels_last, and a norm seed reads the host's detached features in TRAINING and BLENDING, so its
    first step crashed there (docs/portability.md). Only such inputs are copied, only while autograd records; the
    forward's values are GroupNorm's, from its NCHW kernel. On torch 2.14 and later `_group_norm` never builds one.
    """

    def forward(self, input: Tensor) -> Tensor:
        if (
            input.device.type == "cpu"
            and not input.requires_grad
            and torch.is_grad_enabled()
            and self.weight is not None
            and self.weight.requires_grad
            and not input.is_contiguous()
        ):
            input = input.contiguous()
        return super().forward(input)


# Whether this torch's CPU GroupNorm needs CpuSafeGroupNorm (see there): decided once, at import.
GROUP_NORM_NEEDS_NCHW_COPY = torch.torch_version.TorchVersion(torch.__version__) < "2.14"


def _group_norm(channels: int) -> nn.GroupNorm:
    kind = CpuSafeGroupNorm if GROUP_NORM_NEEDS_NCHW_COPY else nn.GroupNorm
    return kind(group_count(channels), channels)


class NormSeed(nn.Module):
    """`x + tanh(s) * (GN(x) - x)` with s = 0 at init (exact identity at germination)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = _group_norm(channels)
        self.scale = nn.Parameter(torch.zeros(1))

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = x + torch.tanh(self.scale) * (self.norm(x) - x)
        return out


class SqueezeExciteSeed(nn.Module):
    """Channel attention `x * sigmoid(fc(avgpool x))` (squeeze-excitation, reduction 4), near identity."""

    def __init__(self, channels: int, reduction: int = SE_REDUCTION) -> None:
        super().__init__()
        reduced = max(1, channels // reduction)
        self.squeeze = nn.Linear(channels, reduced, bias=False)
        self.excite = nn.Linear(reduced, channels, bias=True)
        nn.init.zeros_(self.excite.weight)
        nn.init.constant_(self.excite.bias, SE_INIT_BIAS)

    def forward(self, x: Tensor) -> Tensor:
        weights = torch.sigmoid(self.excite(F.relu(self.squeeze(x.mean(dim=(2, 3))))))
        return x * weights[:, :, None, None]


class DepthwiseSeed(nn.Module):
    """`x + relu(GN(pointwise(depthwise3x3 x)))`."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.depthwise = nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False)
        self.pointwise = nn.Conv2d(channels, channels, 1, bias=False)
        self.norm = _group_norm(channels)

    def forward(self, x: Tensor) -> Tensor:
        return x + F.relu(self.norm(self.pointwise(self.depthwise(x))))


class BottleneckSeed(nn.Module):
    """`x + GN(up1x1(relu(conv3x3(relu(down1x1 x)))))`, width max(8, C/4), `up` zero-initialised."""

    def __init__(self, channels: int, reduction: int = BOTTLENECK_REDUCTION) -> None:
        super().__init__()
        width = max(BOTTLENECK_MIN_WIDTH, channels // reduction)
        self.down = nn.Conv2d(channels, width, 1, bias=False)
        self.conv = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.up = nn.Conv2d(width, channels, 1, bias=False)
        self.norm = _group_norm(channels)
        nn.init.zeros_(self.up.weight)

    def forward(self, x: Tensor) -> Tensor:
        branch = F.relu(self.conv(F.relu(self.down(x))))
        out: Tensor = x + self.norm(self.up(branch))
        return out


class ConvSmallSeed(nn.Module):
    """`x + relu(GN(conv1x1 x))`, conv zero-initialised."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 1, bias=False)
        self.norm = _group_norm(channels)
        nn.init.zeros_(self.conv.weight)

    def forward(self, x: Tensor) -> Tensor:
        return x + F.relu(self.norm(self.conv(x)))


class SeedConvBlock(nn.Module):
    """conv3x3 (no bias) -> GroupNorm -> ReLU: the seed-side conv block (no running statistics)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm = _group_norm(channels)

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.norm(self.conv(x)))


class ConvSeed(nn.Module):
    """`x + block(x)` with one (conv_light) or two (conv_heavy) conv3x3-GN-ReLU blocks."""

    def __init__(self, channels: int, depth: int) -> None:
        super().__init__()
        self.enhance = nn.Sequential(*(SeedConvBlock(channels) for _ in range(depth)))

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = x + self.enhance(x)
        return out


def create_blueprint(blueprint: BlueprintAction, channels: int) -> nn.Module:
    """Build a CNN blueprint for `channels` channels, drawing init from the current global RNG.

    Callers that need determinism build it under `torch.random.fork_rng` + `torch.manual_seed` (as
    `SeedSlot.germinate` does). Transformer blueprints raise ValueError.
    """
    if channels < 1:
        raise ValueError(f"channels must be >= 1, got {channels}")
    if blueprint not in CNN_BLUEPRINTS:
        names = sorted(bp.blueprint_id for bp in CNN_BLUEPRINTS)
        name = BlueprintAction(blueprint).blueprint_id
        raise ValueError(f"blueprint {name!r} is not a CNN blueprint: choose one of {names}")
    match blueprint:
        case BlueprintAction.NOOP:
            return nn.Identity()
        case BlueprintAction.NORM:
            return NormSeed(channels)
        case BlueprintAction.ATTENTION:
            return SqueezeExciteSeed(channels)
        case BlueprintAction.DEPTHWISE:
            return DepthwiseSeed(channels)
        case BlueprintAction.BOTTLENECK:
            return BottleneckSeed(channels)
        case BlueprintAction.CONV_SMALL:
            return ConvSmallSeed(channels)
        case BlueprintAction.CONV_LIGHT:
            return ConvSeed(channels, depth=1)
        case _:  # CONV_HEAVY, the last CNN blueprint
            return ConvSeed(channels, depth=2)


@functools.lru_cache(maxsize=256)
def blueprint_param_count(blueprint: BlueprintAction, channels: int) -> int:
    """Exact parameter count of a blueprint at `channels` (built on the meta device: no RNG, no memory)."""
    with torch.device("meta"):
        module = create_blueprint(blueprint, channels)
    return sum(p.numel() for p in module.parameters())
