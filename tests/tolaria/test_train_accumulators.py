"""The train pass's accumulators (esper/tolaria/epoch.py): what a pass keeps and folds once at its end has the bits of
adding every batch as it went, and the kept batches are dropped once folded."""

from __future__ import annotations

import pytest
import torch

from esper.tolaria import epoch
from esper.tolaria.epoch import STAT_COLUMNS, StatColumn, TrainAccumulators, add_in_order

SIZES = [50] * 19 + [37]  # a short last batch, as a pass over 987 samples has


def _accumulators(slots: int = 1) -> TrainAccumulators:
    return TrainAccumulators(
        stats=torch.zeros(STAT_COLUMNS), seed_grad_norms=torch.zeros(slots), host_grad_norm=torch.zeros(1)
    )


def _spread(generator: torch.Generator) -> torch.Tensor:
    """A positive scalar over nine decades: sums of such values depend on their order."""
    return torch.rand((), generator=generator) * 10.0 ** torch.randint(-4, 5, (), generator=generator)


def _batches(seed: int) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [
        {
            "loss": _spread(generator),
            "logits": torch.randn(size, 10, generator=generator),
            "targets": torch.randint(0, 10, (size,), generator=generator),
            "host_norm": _spread(generator),
            "seed_norm": _spread(generator),
        }
        for size in SIZES
    ]


def _added_as_it_went(batches: list[dict[str, torch.Tensor]]) -> TrainAccumulators:
    """What the engine did before the fold: every value added to the sums in its batch."""
    acc = _accumulators(slots=3)
    for i, batch in enumerate(batches):
        targets = batch["targets"]
        correct = (batch["logits"].argmax(dim=1) == targets).sum()
        acc.sums.add(batch["loss"].float() * targets.shape[0], correct, targets.shape[0])
        acc.host_grad_norm.add_(batch["host_norm"])
        if i % 3:  # the seed in slot 2 trains on some batches only
            acc.seed_grad_norms[2].add_(batch["seed_norm"])
    acc.batches = len(batches)
    return acc


def _kept(batches: list[dict[str, torch.Tensor]], *, predictions: bool = False) -> TrainAccumulators:
    acc = _accumulators(slots=3)
    for i, batch in enumerate(batches):
        if predictions:
            acc.add_batch(batch["loss"], batch["targets"], predictions=batch["logits"].argmax(dim=1))
        else:
            acc.add_batch(batch["loss"], batch["targets"], logits=batch["logits"])
        acc.add_host_norm(batch["host_norm"])
        if i % 3:
            acc.add_seed_norm(2, batch["seed_norm"])
    return acc


def _assert_same_bits(got: TrainAccumulators, want: TrainAccumulators) -> None:
    assert got.batches == want.batches
    assert torch.equal(got.sums.close(), want.sums.close())
    assert torch.equal(got.host_grad_norm, want.host_grad_norm)
    assert torch.equal(got.seed_grad_norms, want.seed_grad_norms)


def test_the_data_is_order_sensitive() -> None:
    """The fold tests below could not tell a reduction in another order from the batch order on data whose sum did
    not depend on the order; this data's does."""
    values = [batch["loss"] * 50 for batch in _batches(0)]
    running = torch.zeros(1)
    for value in values:
        running.add_(value)
    assert not torch.equal(torch.stack(values).sum().reshape(1), running)


@pytest.mark.parametrize("predictions", [False, True], ids=["logits", "predictions"])
def test_the_fold_equals_adding_every_batch_as_it_went_bit_for_bit(predictions: bool) -> None:
    batches = _batches(0)
    acc = _kept(batches, predictions=predictions)
    assert acc.batches == len(batches)
    assert torch.equal(acc.stats, torch.zeros(STAT_COLUMNS))  # nothing is added before the pass ends
    acc.fold()
    _assert_same_bits(acc, _added_as_it_went(batches))
    assert acc.stats[StatColumn.CORRECT] > 0 and acc.sums.close()[StatColumn.SAMPLES] == sum(SIZES)
    assert acc.seed_grad_norms[0] == 0 and acc.seed_grad_norms[1] == 0  # only slot 2's seed trained


def test_the_fold_drops_what_it_kept_and_a_second_fold_adds_nothing() -> None:
    batches = _batches(1)
    acc = _kept(batches)
    acc.fold()
    kept = (acc.losses, acc.host_norms, acc.seed_norms, acc.logits, acc.predictions, acc.targets)
    assert all(len(each) == 0 for each in kept)
    acc.fold()
    _assert_same_bits(acc, _added_as_it_went(batches))


def test_kept_logits_become_predictions_once_they_pass_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long pass keeps predictions, not every batch's logits: at most the bound's worth of logits is held."""
    monkeypatch.setattr(epoch, "KEPT_LOGIT_ELEMENTS", 1200)  # a little over two batches of 50x10
    batches = _batches(2)
    acc = _accumulators(slots=3)
    for i, batch in enumerate(batches):
        acc.add_batch(batch["loss"], batch["targets"], logits=batch["logits"])
        acc.add_host_norm(batch["host_norm"])
        if i % 3:
            acc.add_seed_norm(2, batch["seed_norm"])
        assert sum(logits.numel() for logits in acc.logits) < 1200
    assert len(acc.predictions) == 6  # 18 of 20 batches taken three at a time; two still held
    acc.fold()
    _assert_same_bits(acc, _added_as_it_went(batches))


def test_batches_handing_over_predictions_keep_their_place_after_kept_logits() -> None:
    batches = _batches(3)
    acc = _accumulators(slots=3)
    for i, batch in enumerate(batches):
        if i < 10:
            acc.add_batch(batch["loss"], batch["targets"], logits=batch["logits"])
        else:
            acc.add_batch(batch["loss"], batch["targets"], predictions=batch["logits"].argmax(dim=1))
        acc.add_host_norm(batch["host_norm"])
        if i % 3:
            acc.add_seed_norm(2, batch["seed_norm"])
    acc.fold()
    _assert_same_bits(acc, _added_as_it_went(batches))


def test_a_batch_needs_its_logits_or_its_predictions() -> None:
    with pytest.raises(ValueError, match="logits or its predictions"):
        _accumulators().add_batch(torch.tensor(1.0), torch.zeros(4, dtype=torch.long))


def test_an_empty_pass_folds_to_zeros() -> None:
    acc = _accumulators()
    acc.fold()
    assert torch.equal(acc.sums.close(), torch.zeros(STAT_COLUMNS))
    assert torch.equal(acc.host_grad_norm, torch.zeros(1)) and torch.equal(acc.seed_grad_norms, torch.zeros(1))


def test_add_in_order_on_cpu_adds_one_value_after_another() -> None:
    generator = torch.Generator().manual_seed(4)
    values = [_spread(generator) for _ in range(1000)]
    running = torch.full((1,), 0.5)
    for value in values:
        running.add_(value)
    total = torch.full((1,), 0.5)
    add_in_order(total, values)
    assert torch.equal(total, running)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: the fold's reduction on a GPU")
def test_the_fold_on_cuda_equals_itself_and_the_cpu_sums_to_rounding() -> None:
    """On CUDA the float sums are a reduction (no atomics): the same bits every time, the batch order's value to
    rounding; the correct count and samples are integers, exact."""
    batches = _batches(5)
    on_cuda = [{name: value.cuda() for name, value in batch.items()} for batch in batches]
    folds = []
    for _ in range(2):
        acc = TrainAccumulators(
            stats=torch.zeros(STAT_COLUMNS, device="cuda"),
            seed_grad_norms=torch.zeros(3, device="cuda"),
            host_grad_norm=torch.zeros(1, device="cuda"),
        )
        for i, batch in enumerate(on_cuda):
            acc.add_batch(batch["loss"], batch["targets"], logits=batch["logits"])
            acc.add_host_norm(batch["host_norm"])
            if i % 3:
                acc.add_seed_norm(2, batch["seed_norm"])
        acc.fold()
        folds.append(torch.cat([acc.sums.close(), acc.host_grad_norm, acc.seed_grad_norms]).cpu())
    assert torch.equal(folds[0], folds[1])
    want = _added_as_it_went(batches)
    want_row = torch.cat([want.sums.close(), want.host_grad_norm, want.seed_grad_norms])
    torch.testing.assert_close(folds[0], want_row, rtol=1e-5, atol=0.0)
    assert torch.equal(
        folds[0][StatColumn.CORRECT : StatColumn.SAMPLES + 1], want_row[StatColumn.CORRECT : StatColumn.SAMPLES + 1]
    )
