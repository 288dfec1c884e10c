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


def add_in_order(total: Tensor, values: Sequence[Tensor]) -> None:
    """`for value in values: total += value`, in a few aten ops however many values there are.

    `total` is a one-element tensor and `values` one or more scalar tensors. On CPU this is `index_add_` with every
    index 0, which adds the values one by one in index order (its documented order): the bits of adding them batch by
    batch. On other devices `index_add_` adds with atomics, in an order that changes from run to run unless
    deterministic algorithms are on, so there the values are summed by a reduction (deterministic, in its own order)
    and added once.
    """
    stacked = torch.stack(list(values)).to(total.dtype)
    if total.device.type == "cpu":
        total.index_add_(0, torch.zeros(len(values), dtype=torch.long), stacked)
    else:
        total.add_(stacked.sum())


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
        self._loss.add_(loss_sum)
        self.samples += samples
        self.add_correct(correct)

    def add_losses(self, loss_sums: Sequence[Tensor], samples: int) -> None:
        """Add several batches' loss sums, in their order (`add_in_order`), and their samples (a pass's sums only)."""
        add_in_order(self.sums.narrow(-1, StatColumn.LOSS_SUM, 1), loss_sums)
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


# A pass keeps at most this many logit elements (4 MiB of float32) before taking their argmax, so a long pass over
# many classes holds its predictions, not its logits.
KEPT_LOGIT_ELEMENTS = 1 << 20


@dataclass
class TrainAccumulators:
    """Device-side per-env accumulators of one train pass.

    A batch hands over what its step computed (its mean loss, logits, targets and gradient norms) and nothing is added
    until the pass ends: `fold()` adds it all then, in a dozen aten ops a pass, where adding as it went cost four a
    batch (the loss times its samples, two `add_`s, the argmax). The float sums (loss, gradient norms) are added in
    batch order (`add_in_order`), the bits of adding them batch by batch. The correct count is an integer, so it is
    taken once from every batch's predictions: float32 holds every count up to 2**24 exactly.

    The kept tensors are the step's own outputs, held without their graph. A step whose outputs a later step
    overwrites (a CUDA graph's) hands over copies and its predictions instead (`add_batch`'s `predictions`).
    """

    stats: Tensor  # [3]: loss sum, correct, samples (added through `sums`)
    seed_grad_norms: Tensor  # [max(1, num_slots)]: sum of per-batch seed gradient norms
    host_grad_norm: Tensor  # [1]: sum of per-batch host gradient norms
    batches: int = 0
    sums: StatSums = field(init=False)
    losses: list[Tensor] = field(default_factory=list)  # per batch: its mean loss
    host_norms: list[Tensor] = field(default_factory=list)  # per batch: the host's gradient norm
    seed_norms: dict[int, list[Tensor]] = field(default_factory=dict)  # per slot index: its seed's norms, in order
    logits: list[Tensor] = field(default_factory=list)  # the latest batches' logits, their argmax not yet taken
    predictions: list[Tensor] = field(default_factory=list)  # the earlier batches' predicted classes, in order
    targets: list[Tensor] = field(default_factory=list)  # per batch: its targets
    _kept_logit_elements: int = 0

    def __post_init__(self) -> None:
        self.sums = StatSums(self.stats)

    def add_batch(
        self, loss: Tensor, targets: Tensor, *, logits: Tensor | None = None, predictions: Tensor | None = None
    ) -> None:
        """Keep one batch: its mean loss (a device scalar), its targets, and either its logits or, when they will
        not outlive the step, its predicted classes."""
        self.losses.append(loss)
        self.targets.append(targets)
        if logits is not None:
            self.logits.append(logits)
            self._kept_logit_elements += logits.numel()
            if self._kept_logit_elements >= KEPT_LOGIT_ELEMENTS:
                self._take_argmax()
        elif predictions is not None:
            self._take_argmax()  # the earlier batches' predictions go first
            self.predictions.append(predictions)
        else:
            raise ValueError("add_batch needs the batch's logits or its predictions")
        self.batches += 1

    def add_host_norm(self, norm: Tensor) -> None:
        self.host_norms.append(norm)

    def add_seed_norm(self, slot_index: int, norm: Tensor) -> None:
        self.seed_norms.setdefault(slot_index, []).append(norm)

    def fold(self) -> None:
        """Add every kept batch to the sums, in batch order, and drop them (call once, at the end of the pass, on the
        stream that made them)."""
        if not self.losses:
            return
        sizes = [targets.shape[0] for targets in self.targets]
        loss_sums = torch._foreach_mul([loss.float() for loss in self.losses], sizes)
        self.sums.add_losses(loss_sums, sum(sizes))
        add_in_order(self.host_grad_norm, self.host_norms)
        for index, norms in sorted(self.seed_norms.items()):
            add_in_order(self.seed_grad_norms[index : index + 1], norms)
        self._take_argmax()
        hits = _joined(self.predictions) == _joined(self.targets)
        self.sums.add_correct(hits.sum())
        for kept in (self.losses, self.host_norms, self.predictions, self.targets):
            kept.clear()
        self.seed_norms.clear()

    def _take_argmax(self) -> None:
        """Turn the kept logits into predictions, in order."""
        if self.logits:
            self.predictions.append(_joined(self.logits).argmax(dim=1))
            self.logits.clear()
            self._kept_logit_elements = 0


def _joined(tensors: Sequence[Tensor]) -> Tensor:
    """`torch.cat(tensors)`, without the copy when there is one."""
    return tensors[0] if len(tensors) == 1 else torch.cat(list(tensors))


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
