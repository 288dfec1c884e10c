"""SharedBatchIterator: one loader batch per step, split across envs, served from memory without workers.

Each step draws `batch_size_per_env * n_envs` samples (a permutation from the iterator's generator when
shuffling), cuts them into `n_envs` equal chunks with `tensor_split` and places chunk i on env i's device.
The original spent ~9.5 s of a 16 s run starting DataLoader worker processes for an in-memory dataset;
here there are none.

- Batches are channels_last (the host runs channels_last: faster convolutions and pooling on CPU,
  docs/measurements.md#why-the-code-is-as-it-is).
- CPU path: the batch is gathered (and augmented) on the host, then copied with `non_blocking=True`
  (from pinned memory when the target is CUDA).
- `gpu_preload`: the whole split is copied once to every device used; each step gathers on the device.
  Augmentation then runs on the device with a device generator seeded from the iterator's generator.

`env_ids` selects the envs whose chunks are yielded (a rank of a sharded run runs a block of envs): the loader
batch is still drawn, shuffled and augmented whole, so env i's chunk is the same whichever envs are selected.

Re-seeding the generator before an iteration makes that iteration's order reproducible on its own. With
`gpu_preload` and augmentation, the device generators are seeded from the generator's last seed (reading its
state would be a host sync), so the caller must re-seed before every epoch, as the trainer's BatchSource does,
or each epoch repeats the same crops and flips.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor

from esper.data.datasets import augment_batch
from esper.data.records import ImageDataset

EnvBatch = tuple[Tensor, Tensor]


class SharedBatchIterator:
    """Yields, per step, one (inputs, targets) pair per env."""

    def __init__(
        self,
        dataset: ImageDataset,
        *,
        n_envs: int,
        batch_size_per_env: int,
        devices: Sequence[torch.device],
        shuffle: bool,
        drop_last: bool,
        generator: torch.Generator,
        augment: bool = False,
        gpu_preload: bool = False,
        env_ids: Sequence[int] | None = None,
    ) -> None:
        if n_envs < 1 or batch_size_per_env < 1:
            raise ValueError(f"n_envs and batch_size_per_env must be positive, got {n_envs}, {batch_size_per_env}")
        if len(devices) != n_envs:
            raise ValueError(f"need one device per env: {len(devices)} devices for {n_envs} envs")
        self.dataset = dataset
        self.n_envs = n_envs
        self.batch_size_per_env = batch_size_per_env
        self.devices = list(devices)
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.generator = generator
        self.augment = augment
        self.gpu_preload = gpu_preload
        self.loader_batch = batch_size_per_env * n_envs
        self.env_ids = list(range(n_envs)) if env_ids is None else list(env_ids)
        self._device_data: dict[torch.device, tuple[Tensor, Tensor]] = {}
        self._device_generators: dict[torch.device, torch.Generator] = {}
        if gpu_preload:
            for device in dict.fromkeys(self.devices):
                images = dataset.images.to(device).contiguous(memory_format=torch.channels_last)
                self._device_data[device] = (images, dataset.labels.to(device))
                self._device_generators[device] = torch.Generator(device=device)
        if len(self) == 0:
            raise ValueError(
                f"no {'full ' if drop_last else ''}batches: {len(dataset)} samples < {self.loader_batch} "
                f"({n_envs} envs x {batch_size_per_env} per env); use more samples or a smaller --batch-size"
            )

    def __len__(self) -> int:
        full, rest = divmod(len(self.dataset), self.loader_batch)
        return full + (0 if self.drop_last or rest < self.n_envs else 1)

    def _order(self) -> Tensor:
        n = len(self.dataset)
        if self.shuffle:
            return torch.randperm(n, generator=self.generator)
        return torch.arange(n)

    def __iter__(self) -> Iterator[list[EnvBatch]]:
        order = self._order()
        if self.gpu_preload and self.augment:
            # derived from the host generator's seed (a Python int): no tensor is read on the host here
            base = self.generator.initial_seed()
            for offset, gen in enumerate(self._device_generators.values()):
                gen.manual_seed(base + offset)
        for step in range(len(self)):
            index = order[step * self.loader_batch : (step + 1) * self.loader_batch]
            # trim a partial last batch to a multiple of n_envs so every env gets the same number of samples
            index = index[: (index.numel() // self.n_envs) * self.n_envs]
            yield self._preloaded(index) if self.gpu_preload else self._from_host(index)

    def _from_host(self, index: Tensor) -> list[EnvBatch]:
        images = self.dataset.images[index]
        if self.augment:
            images = augment_batch(images, self.generator)
        images = images.contiguous(memory_format=torch.channels_last)
        labels = self.dataset.labels[index]
        chunks = list(zip(self.devices, images.tensor_split(self.n_envs), labels.tensor_split(self.n_envs)))
        out: list[EnvBatch] = []
        for device, x, y in (chunks[env_id] for env_id in self.env_ids):
            if device.type == "cuda":
                x, y = x.pin_memory(), y.pin_memory()
            out.append((x.to(device, non_blocking=True), y.to(device, non_blocking=True)))
        return out

    def _preloaded(self, index: Tensor) -> list[EnvBatch]:
        # With augmentation every env's chunk is augmented, selected or not: the device generators then draw the
        # same numbers in the same order whichever envs this iterator serves.
        wanted = set(self.env_ids)
        by_env: dict[int, EnvBatch] = {}
        for env_id, (device, chunk) in enumerate(zip(self.devices, index.tensor_split(self.n_envs))):
            if env_id not in wanted and not self.augment:
                continue
            images, labels = self._device_data[device]
            local = chunk.to(device, non_blocking=True)
            x = images.index_select(0, local)
            if self.augment:
                x = augment_batch(x, self._device_generators[device]).contiguous(memory_format=torch.channels_last)
            by_env[env_id] = (x, labels.index_select(0, local))
        return [by_env[env_id] for env_id in self.env_ids]
