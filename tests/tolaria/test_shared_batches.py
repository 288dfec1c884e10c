"""SharedBatchIterator: one loader batch per step split into equal per-env chunks, every sample once per epoch."""

from __future__ import annotations

import pytest
import torch

from esper.data import ImageDataset
from esper.tolaria.batches import SharedBatchIterator

CPU = torch.device("cpu")


def _dataset(n: int) -> ImageDataset:
    # Sample i carries its index in every pixel, so a batch tells which samples it holds.
    images = torch.arange(n, dtype=torch.float32).view(n, 1, 1, 1).expand(n, 3, 32, 32).contiguous()
    return ImageDataset(images, torch.arange(n) % 10, num_classes=10, name="indexed", augment=False)


def _iterator(n: int, *, n_envs: int, per_env: int, seed: int = 0, **kwargs: bool) -> SharedBatchIterator:
    options = {"shuffle": True, "drop_last": False, **kwargs}
    return SharedBatchIterator(
        _dataset(n),
        n_envs=n_envs,
        batch_size_per_env=per_env,
        devices=[CPU] * n_envs,
        generator=torch.Generator().manual_seed(seed),
        **options,
    )


def _ids(x: torch.Tensor) -> list[int]:
    return [int(v) for v in x[:, 0, 0, 0].tolist()]


@pytest.mark.parametrize("gpu_preload", [False, True])
@pytest.mark.parametrize("n_envs", [1, 2, 4])
def test_each_step_gives_every_env_batch_size_per_env_samples(n_envs: int, gpu_preload: bool) -> None:
    iterator = _iterator(96, n_envs=n_envs, per_env=6, gpu_preload=gpu_preload)
    for per_env in iterator:
        assert len(per_env) == n_envs
        assert [x.shape[0] for x, _ in per_env] == [6] * n_envs
        assert [y.shape[0] for _, y in per_env] == [6] * n_envs


@pytest.mark.parametrize("gpu_preload", [False, True])
def test_one_loader_batch_is_split_into_consecutive_chunks(gpu_preload: bool) -> None:
    iterator = _iterator(48, n_envs=3, per_env=4, shuffle=False, gpu_preload=gpu_preload)
    first = next(iter(iterator))
    assert [_ids(x) for x, _ in first] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]


@pytest.mark.parametrize("gpu_preload", [False, True])
def test_every_sample_is_seen_exactly_once_per_epoch(gpu_preload: bool) -> None:
    iterator = _iterator(96, n_envs=2, per_env=8, gpu_preload=gpu_preload)
    seen = [i for per_env in iterator for x, _ in per_env for i in _ids(x)]
    assert sorted(seen) == list(range(96))


def test_labels_travel_with_their_images() -> None:
    iterator = _iterator(60, n_envs=2, per_env=5)
    for per_env in iterator:
        for x, y in per_env:
            assert [i % 10 for i in _ids(x)] == y.tolist()


def test_loader_batch_is_per_env_batch_times_envs() -> None:
    iterator = _iterator(100, n_envs=4, per_env=5)
    assert iterator.loader_batch == 20
    assert len(iterator) == 5


def test_shuffled_order_differs_between_epochs() -> None:
    iterator = _iterator(64, n_envs=2, per_env=8)
    first = [i for per_env in iterator for x, _ in per_env for i in _ids(x)]
    second = [i for per_env in iterator for x, _ in per_env for i in _ids(x)]
    assert first != second


@pytest.mark.parametrize("gpu_preload", [False, True])
def test_reseeding_the_generator_repeats_the_order(gpu_preload: bool) -> None:
    iterator = _iterator(64, n_envs=2, per_env=8, gpu_preload=gpu_preload)
    iterator.generator.manual_seed(123)
    first = [_ids(x) for per_env in iterator for x, _ in per_env]
    iterator.generator.manual_seed(123)
    second = [_ids(x) for per_env in iterator for x, _ in per_env]
    assert first == second


@pytest.mark.parametrize("gpu_preload", [False, True])
def test_reseeding_repeats_the_augmented_images(gpu_preload: bool) -> None:
    iterator = _iterator(32, n_envs=2, per_env=8, augment=True, gpu_preload=gpu_preload)
    iterator.generator.manual_seed(5)
    first = [x.clone() for per_env in iterator for x, _ in per_env]
    iterator.generator.manual_seed(5)
    second = [x for per_env in iterator for x, _ in per_env]
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_preload_and_host_paths_serve_the_same_batches_without_augmentation() -> None:
    host = _iterator(64, n_envs=2, per_env=8, seed=4)
    preload = _iterator(64, n_envs=2, per_env=8, seed=4, gpu_preload=True)
    for a, b in zip(host, preload):
        assert all(torch.equal(xa, xb) and torch.equal(ya, yb) for (xa, ya), (xb, yb) in zip(a, b))


def test_a_partial_last_batch_is_split_evenly() -> None:
    iterator = _iterator(50, n_envs=4, per_env=5)  # 2 full batches of 20, then 10 -> 8 (2 per env)
    sizes = [[x.shape[0] for x, _ in per_env] for per_env in iterator]
    assert sizes == [[5, 5, 5, 5], [5, 5, 5, 5], [2, 2, 2, 2]]


def test_drop_last_skips_the_partial_batch() -> None:
    iterator = _iterator(50, n_envs=4, per_env=5, drop_last=True)
    assert len(iterator) == 2
    assert sum(1 for _ in iterator) == 2


def test_too_few_samples_for_one_batch_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no full batches: 10 samples < 20"):
        _iterator(10, n_envs=4, per_env=5, drop_last=True)


def test_one_device_per_env_is_required() -> None:
    with pytest.raises(ValueError, match="need one device per env"):
        SharedBatchIterator(
            _dataset(10), n_envs=2, batch_size_per_env=2, devices=[CPU], shuffle=False, drop_last=False,
            generator=torch.Generator(),
        )  # fmt: skip
