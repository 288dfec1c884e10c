"""One epoch's results: what validation measures, the device-side row layout, the one batched transfer, and the
typed host-side record.

The engine accumulates each batch in a `StatSums` (the stat columns: loss sum, correct, samples), packs each env's
accumulators into one flat device row (`pack_row`), brings every row of a device to the host in ONE transfer
(`gather_rows`), and unpacks each row into an `EnvEpochResult` (`unpack_row`). The plan of fused validation (which
counterfactual alpha configurations one forward pass measures) is `FusedPlan`. Every offset is `RowLayout`'s: the
train pass's stat columns, one mean gradient norm per seed slot (at least one column), the mean host gradient norm,
then the stat columns of each validation configuration. To measure something more, add a column to `StatColumn`
(every pass and configuration gets it) or a field to `RowLayout`, and read it in `unpack_row`: nothing else knows
an offset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum

import torch
from torch import Tensor

from tripwire.sync import hot_path


class StatColumn(IntEnum):
    """The accumulator columns of the train pass and of each validation configuration."""

    LOSS_SUM = 0  # sum of per-sample losses
    CORRECT = 1  # number of correct predictions
    SAMPLES = 2  # number of samples


STAT_COLUMNS = len(StatColumn)


class StatSums:
    """Running sums of the `StatColumn`s on the device: `[3]` for a train pass, `[configs, 3]` for fused validation
    (then each added value holds one entry per configuration).

    Loss and correct are added through views made once (a `select` per column per batch was three aten ops of every
    step); samples are counted on the host and written once by `close()`. The sums are those of adding every batch's
    sample count in float32 as before, bit for bit: float32 holds every whole number up to 2**24 exactly.
    """

    def __init__(self, sums: Tensor) -> None:
        self.sums = sums
        self.samples = 0
        self._loss = sums.select(-1, StatColumn.LOSS_SUM)
        self._correct = sums.select(-1, StatColumn.CORRECT)

    @classmethod
    def zeros(cls, *leading: int, device: torch.device) -> StatSums:
        return cls(torch.zeros(*leading, STAT_COLUMNS, device=device))

    def add(self, loss_sum: Tensor, correct: Tensor, samples: int) -> None:
        """Add one batch: its loss sum and correct count (device tensors), and its number of samples."""
        self.add_loss(loss_sum, samples)
        self.add_correct(correct)

    def add_loss(self, loss_sum: Tensor, samples: int) -> None:
        """Add one batch's loss sum and its number of samples; its correct count comes later (`add_correct`)."""
        self._loss.add_(loss_sum)
        self.samples += samples

    def add_correct(self, correct: Tensor) -> None:
        self._correct.add_(correct)

    def close(self) -> Tensor:
        """The sums with the samples column written in (call once, when the pass has ended)."""
        self.sums.select(-1, StatColumn.SAMPLES).fill_(self.samples)
        return self.sums


@dataclass(frozen=True)
class FusedPlan:
    """The counterfactual configurations of one env's fused validation: one row of alphas per config over `slot_ids`.

    Row 0 is the main configuration (current alphas). With no named slots the plan has a single config and
    validation is a plain forward pass. Built by simic (`counterfactual_eval`), run by the engine, read back here.
    """

    slot_ids: tuple[str, ...]
    alphas: tuple[tuple[float, ...], ...]

    @property
    def num_configs(self) -> int:
        return max(1, len(self.alphas))


@dataclass(frozen=True)
class RowLayout:
    """Where each value sits in one env's packed row, for `num_slots` seed slots."""

    num_slots: int

    @property
    def norm_width(self) -> int:
        """Seed-norm columns: one per slot, at least one (a host without slots keeps the row's shape)."""
        return max(1, self.num_slots)

    @property
    def seed_norms(self) -> slice:
        return slice(STAT_COLUMNS, STAT_COLUMNS + self.num_slots)

    @property
    def host_norm(self) -> int:
        return STAT_COLUMNS + self.norm_width

    @property
    def validation(self) -> int:
        """Where the validation configurations' stat columns start."""
        return self.host_norm + 1


@dataclass
class TrainAccumulators:
    """Device-side per-env accumulators of one train pass.

    The loss and gradient-norm sums are added batch by batch, in order (float sums: their order is their bits). The
    correct count is an integer, so it is counted once at the end of the pass (`count_correct`) from every batch's
    predictions and targets: one aten op a batch (the argmax) instead of four (argmax, eq, sum, add), with the same
    bits, since float32 holds every count up to 2**24 exactly.
    """

    stats: Tensor  # [3]: loss sum, correct, samples (added through `sums`)
    seed_grad_norms: Tensor  # [max(1, num_slots)]: sum of per-batch seed gradient norms
    host_grad_norm: Tensor  # [1]: sum of per-batch host gradient norms
    batches: int = 0
    sums: StatSums = field(init=False)
    predictions: list[Tensor] = field(default_factory=list)  # per batch: the argmax class of each sample
    targets: list[Tensor] = field(default_factory=list)  # per batch: its targets

    def __post_init__(self) -> None:
        self.sums = StatSums(self.stats)

    def add_batch(self, loss_sum: Tensor, predictions: Tensor, targets: Tensor) -> None:
        """Add one batch: its loss sum (a device scalar), its predicted classes and its targets."""
        samples = targets.shape[0]
        self.sums.add_loss(loss_sum, samples)
        self.predictions.append(predictions)
        self.targets.append(targets)
        self.batches += 1

    def count_correct(self) -> None:
        """Add the pass's correct predictions to the sums and drop the kept batches (call once, at the end of the
        pass, on the stream that made them)."""
        if self.predictions:
            hits = torch.cat(self.predictions) == torch.cat(self.targets)
            self.sums.add_correct(hits.sum())
        self.predictions.clear()
        self.targets.clear()


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
    """Flatten one env's device accumulators into a single row for the batched transfer (`RowLayout`'s order)."""
    batches = max(train.batches, 1)
    return torch.cat(
        [train.sums.close(), train.seed_grad_norms / batches, train.host_grad_norm / batches, val.reshape(-1)]
    )


def unpack_row(row: Sequence[float], num_slots: int) -> EnvEpochResult:
    """The inverse of `pack_row` on the host copy of one row."""
    layout = RowLayout(num_slots)
    loss_sum, correct = row[StatColumn.LOSS_SUM], row[StatColumn.CORRECT]
    count = max(row[StatColumn.SAMPLES], 1.0)
    val = row[layout.validation :]
    return EnvEpochResult(
        train_loss=loss_sum / count,
        train_acc=100.0 * correct / count,
        seed_grad_norms=tuple(row[layout.seed_norms]),
        host_grad_norm=row[layout.host_norm],
        validation=tuple(
            ValidationStats(*val[start : start + STAT_COLUMNS]) for start in range(0, len(val), STAT_COLUMNS)
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
