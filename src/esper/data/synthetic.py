"""The default task: a deterministic, CIFAR-shaped synthetic data set whose classes need spatial structure.

Ten balanced classes in five colour groups of two. Within a group the two classes share the colour and the
per-pixel statistics and differ only in the orientation of a noisy sinusoidal grating:

    group 0, 2, 4: horizontal vs vertical stripes        group 1, 3: the two diagonals

Each image is `tint * (1 + amplitude * sin(2*pi/period * (x cos a + y sin a) + phase)) + noise`, clamped to
[0, 1] and normalized with the CIFAR-10 statistics; period, phase, brightness and tint jitter are drawn per
image. Because the phase is uniform, every pixel has the same distribution in both classes of a group.

Why this separates hosts: a host built of 1x1 convolutions, 2x2 max pooling on even sizes and global average
pooling is invariant to transposing or mirroring the image, and each pair of classes is exactly such a
mirror image of the other (vertical = transposed horizontal; one diagonal = mirrored other diagonal). Such a
host can learn the colour group but not the class within it: at best 50 % accuracy. One 3x3 convolution sees
the orientation and lifts the ceiling to near 100 %.

All randomness comes from one `torch.Generator` seeded from (seed, split); 10k images take ~0.1 s.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from esper.data.records import CIFAR10_MEAN, CIFAR10_STD, IMAGE_SHAPE, ImageDataset, check_split

NUM_CLASSES = 10
SYNTHETIC_DEFAULT_SIZES: dict[str, int] = {"train": 5000, "val": 1000, "test": 1000}

# RGB tint of each colour group (class // 2), in [0, 1] pixel space.
GROUP_TINTS: tuple[tuple[float, float, float], ...] = (
    (0.75, 0.30, 0.30),
    (0.30, 0.70, 0.35),
    (0.30, 0.40, 0.78),
    (0.72, 0.68, 0.25),
    (0.62, 0.32, 0.70),
)
# Stripe orientation (radians) of each class within its group, for even and odd groups.
ORIENTATIONS_EVEN_GROUP: tuple[float, float] = (0.0, math.pi / 2)
ORIENTATIONS_ODD_GROUP: tuple[float, float] = (math.pi / 4, 3 * math.pi / 4)

STRIPE_AMPLITUDE = 0.45
STRIPE_MODE = "add"
PERIOD_RANGE: tuple[float, float] = (4.0, 8.0)
BRIGHTNESS_JITTER = 0.15
TINT_JITTER = 0.06
PIXEL_NOISE_STD = 0.12

_SPLIT_STREAM: dict[str, int] = {"train": 0, "val": 1, "test": 2}


def split_generator(seed: int, split: str) -> torch.Generator:
    """The CPU generator of one (seed, split) stream."""
    mixed = (int(seed) * 1_000_003 + 7_919 * (1 + _SPLIT_STREAM[split])) % (2**63 - 1)
    return torch.Generator(device="cpu").manual_seed(mixed)


def class_orientations() -> Tensor:
    """Stripe angle of each class, [NUM_CLASSES]."""
    angles = []
    for label in range(NUM_CLASSES):
        group, member = divmod(label, 2)
        pair = ORIENTATIONS_EVEN_GROUP if group % 2 == 0 else ORIENTATIONS_ODD_GROUP
        angles.append(pair[member])
    return torch.tensor(angles, dtype=torch.float32)


def balanced_labels(n: int, generator: torch.Generator) -> Tensor:
    """n labels with class counts differing by at most one, in a random order."""
    labels = torch.arange(n, dtype=torch.int64) % NUM_CLASSES
    return labels[torch.randperm(n, generator=generator)]


def make_synthetic(n: int, *, seed: int, split: str) -> ImageDataset:
    """Generate `n` images of the synthetic task, identical for equal (seed, split)."""
    check_split(split)
    if n < 1:
        raise ValueError(f"synthetic data needs at least one sample, got n={n}")
    g = split_generator(seed, split)
    _, height, width = IMAGE_SHAPE
    labels = balanced_labels(n, g)

    angle = class_orientations()[labels]  # [n]
    period = torch.empty(n).uniform_(*PERIOD_RANGE, generator=g)
    phase = torch.empty(n).uniform_(0.0, 2 * math.pi, generator=g)
    ys = torch.arange(height, dtype=torch.float32).view(1, height, 1)
    xs = torch.arange(width, dtype=torch.float32).view(1, 1, width)
    along = xs * torch.cos(angle).view(n, 1, 1) + ys * torch.sin(angle).view(n, 1, 1)  # [n, H, W]
    stripes = torch.sin(along * (2 * math.pi / period).view(n, 1, 1) + phase.view(n, 1, 1))

    tints = torch.tensor(GROUP_TINTS, dtype=torch.float32)[labels // 2]  # [n, 3]
    tints = tints + TINT_JITTER * (2 * torch.rand(n, 3, generator=g) - 1)
    brightness = 1 + BRIGHTNESS_JITTER * (2 * torch.rand(n, 1, generator=g) - 1)
    tints = (tints * brightness).view(n, 3, 1, 1)

    # In place on one [n, 3, H, W] buffer: noise + tint * (1 + amplitude * stripes), clamp, normalize.
    images = torch.randn(n, 3, height, width, generator=g).mul_(PIXEL_NOISE_STD)
    if STRIPE_MODE == "mul":
        images.addcmul_(tints, stripes.mul_(STRIPE_AMPLITUDE).add_(1.0).unsqueeze(1))
    else:
        images.add_(tints).add_(stripes.mul_(STRIPE_AMPLITUDE).unsqueeze(1))
    images.clamp_(0.0, 1.0)
    std = torch.tensor(CIFAR10_STD).view(1, 3, 1, 1)
    shift = (torch.tensor(CIFAR10_MEAN) / torch.tensor(CIFAR10_STD)).view(1, 3, 1, 1)
    images.div_(std).sub_(shift)
    return ImageDataset(
        images=images.contiguous(),
        labels=labels,
        num_classes=NUM_CLASSES,
        name=f"synthetic-{split}",
        augment=split == "train",
    )
