"""The train pass's accumulators (esper/tolaria/epoch.py): the correct count taken once per pass has the per-batch
count's bits, and the kept batches are dropped once counted."""

from __future__ import annotations

import torch

from esper.tolaria.epoch import STAT_COLUMNS, StatColumn, TrainAccumulators


def _accumulators() -> TrainAccumulators:
    return TrainAccumulators(
        stats=torch.zeros(STAT_COLUMNS), seed_grad_norms=torch.zeros(1), host_grad_norm=torch.zeros(1)
    )


def _batches(seed: int, sizes: list[int]) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    out = []
    for size in sizes:
        logits = torch.randn(size, 10, generator=generator)
        targets = torch.randint(0, 10, (size,), generator=generator)
        out.append((torch.rand((), generator=generator) * size, logits, targets))
    return out


def test_the_pass_count_equals_the_per_batch_count_bit_for_bit() -> None:
    batches = _batches(0, [50] * 19 + [37])  # a short last batch, as a pass over 987 samples has
    per_batch = _accumulators()
    for loss_sum, logits, targets in batches:
        per_batch.sums.add(loss_sum, (logits.argmax(dim=1) == targets).sum(), targets.shape[0])
    once = _accumulators()
    for loss_sum, logits, targets in batches:
        once.add_batch(loss_sum, logits.argmax(dim=1), targets)
    assert once.batches == len(batches)
    assert once.stats[StatColumn.CORRECT] == 0  # nothing counted before the pass ends
    once.count_correct()
    assert torch.equal(once.sums.close(), per_batch.sums.close())
    assert once.stats[StatColumn.CORRECT] > 0 and once.stats[StatColumn.SAMPLES] == 987
    assert once.predictions == [] and once.targets == []  # the kept batches are dropped
    once.count_correct()  # a second call adds nothing
    assert torch.equal(once.stats, per_batch.stats)


def test_an_empty_pass_counts_nothing() -> None:
    acc = _accumulators()
    acc.count_correct()
    assert torch.equal(acc.sums.close(), torch.zeros(STAT_COLUMNS))
