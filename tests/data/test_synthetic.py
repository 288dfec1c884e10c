"""The synthetic task: deterministic from (seed, split), balanced, and learnable only WITH spatial structure."""

from __future__ import annotations

import torch

from esper.data import load_task_data
from esper.data.synthetic import NUM_CLASSES, make_synthetic


def test_same_seed_and_split_give_identical_data() -> None:
    a = make_synthetic(300, seed=7, split="train")
    b = make_synthetic(300, seed=7, split="train")
    assert torch.equal(a.images, b.images)
    assert torch.equal(a.labels, b.labels)


def test_different_seeds_give_different_data() -> None:
    a = make_synthetic(300, seed=7, split="train")
    b = make_synthetic(300, seed=8, split="train")
    assert not torch.equal(a.images, b.images)


def test_train_and_val_splits_differ_for_the_same_seed() -> None:
    a = make_synthetic(300, seed=7, split="train")
    b = make_synthetic(300, seed=7, split="val")
    assert not torch.equal(a.images, b.images)


def test_generation_does_not_touch_the_global_rng() -> None:
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    make_synthetic(50, seed=1, split="train")
    assert torch.equal(torch.rand(3), expected)


def test_images_are_cifar_shaped_float32_and_normalized() -> None:
    data = make_synthetic(500, seed=0, split="train")
    assert data.images.shape == (500, 3, 32, 32)
    assert data.images.dtype == torch.float32
    assert data.num_classes == NUM_CLASSES
    assert abs(float(data.images.mean())) < 1.5
    assert 0.3 < float(data.images.std()) < 3.0


def test_classes_are_balanced() -> None:
    counts = torch.bincount(make_synthetic(1003, seed=0, split="train").labels, minlength=NUM_CLASSES)
    assert int(counts.max() - counts.min()) <= 1


def test_load_task_data_uses_the_default_split_sizes() -> None:
    assert len(load_task_data("synthetic", split="val", n_samples=None, seed=0)) == 1000


def test_only_the_train_split_is_marked_for_augmentation() -> None:
    assert make_synthetic(10, seed=0, split="train").augment
    assert not make_synthetic(10, seed=0, split="val").augment
