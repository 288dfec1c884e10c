"""One epoch's results: the device-side row layout, the one batched transfer, and the typed host-side record.

The engine packs each env's accumulators into one flat device row, brings every row of a device to the host in
ONE transfer (`gather_rows`), and unpacks each row into an `EnvEpochResult`. The row layout is known here and
nowhere else: columns 0-2 are the train pass's loss sum, correct count and sample count; then one mean gradient
norm per seed slot (at least one column); then the mean host gradient norm; then three columns (loss sum,
correct, samples) per counterfactual configuration of fused validation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from tripwire.sync import hot_path

# Accumulator columns of the train pass and of each validation configuration: loss sum, correct, samples.
STAT_COLUMNS = 3


@dataclass
class TrainAccumulators:
    """Device-side per-env accumulators of one train pass."""

    stats: Tensor  # [3]: loss sum, correct, samples
    seed_grad_norms: Tensor  # [max(1, num_slots)]: sum of per-batch seed gradient norms
    host_grad_norm: Tensor  # [1]: sum of per-batch host gradient norms
    batches: int = 0


@dataclass(frozen=True)
class ValidationStats:
    """One counterfactual configuration's fused-validation sums on the host."""

    loss_sum: float
    correct: float
    samples: float

    @property
    def accuracy(self) -> float:
        """Percent correct (0 for an empty pass)."""
        return 100.0 * self.correct / max(self.samples, 1.0)

    @property
    def mean_loss(self) -> float:
        return self.loss_sum / max(self.samples, 1.0)


@dataclass(frozen=True)
class EnvEpochResult:
    """One env's epoch on the host: the train pass's means and every validation configuration's sums."""

    train_loss: float
    train_acc: float  # percent
    seed_grad_norms: tuple[float, ...]  # mean per batch, one per seed slot in slot order
    host_grad_norm: float  # mean per batch
    validation: tuple[ValidationStats, ...]  # one per fused configuration; index 0 is the main configuration


def pack_row(train: TrainAccumulators, val: Tensor) -> Tensor:
    """Flatten one env's device accumulators into a single row for the batched transfer."""
    batches = max(train.batches, 1)
    return torch.cat([train.stats, train.seed_grad_norms / batches, train.host_grad_norm / batches, val.reshape(-1)])


def unpack_row(row: Sequence[float], num_slots: int) -> EnvEpochResult:
    """The inverse of `pack_row` on the host copy of one row."""
    loss_sum, correct, count = row[0], row[1], max(row[2], 1.0)
    width = max(1, num_slots)
    val = row[4 + width :]
    return EnvEpochResult(
        train_loss=loss_sum / count,
        train_acc=100.0 * correct / count,
        seed_grad_norms=tuple(row[3 : 3 + num_slots]),
        host_grad_norm=row[3 + width],
        validation=tuple(
            ValidationStats(val[i], val[i + 1], val[i + 2]) for i in range(0, len(val) - STAT_COLUMNS + 1, STAT_COLUMNS)
        ),
    )


def gather_rows(rows: Sequence[Tensor]) -> list[list[float]]:
    """Bring 1-D device tensors of any lengths to the host in one transfer per device; returns Python lists."""
    if not rows:
        return []
    lengths = [int(r.numel()) for r in rows]
    by_device: dict[torch.device, list[int]] = {}
    for index, row in enumerate(rows):
        by_device.setdefault(row.device, []).append(index)
    out: list[list[float]] = [[] for _ in rows]
    with hot_path("epoch_transfer"):
        for indices in by_device.values():
            flat = torch.cat([rows[i].reshape(-1).float() for i in indices]).cpu().tolist()
            offset = 0
            for i in indices:
                out[i] = flat[offset : offset + lengths[i]]
                offset += lengths[i]
    return out
