"""Task data: the task-data entry point and the batched train augmentation (the records are in `records`).

Every dataset is held in memory as one normalized float tensor, so batching needs no DataLoader workers and
the GPU-preload path is a plain copy. `load_task_data` picks the source by name; the CIFAR-10 module (which
imports torchvision, about 1.7 s) is only imported when CIFAR-10 is asked for, so this module loads no torchvision.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from esper.data.records import (
    DataCheckError,
    DataDirectoryError,
    ImageDataset,
    UserLoaderError,
    check_dataset,
    check_split,
)
from esper.messages import StandardStreams, first_line, warnings_folded

VALID_DATASETS: tuple[str, ...] = ("synthetic", "cifar10", "npz", "imagefolder")
AUGMENT_PADDING = 4


def load_task_data(
    dataset: str,
    *,
    split: str,
    n_samples: int | None,
    seed: int,
    data_dir: str | None = None,
    normalize: bool = True,
    batch_size: int | None = None,
    min_size: tuple[int, int] | None = None,
) -> ImageDataset:
    """Load one split of a task's data set.

    - "synthetic": generated from (seed, split); `n_samples` None means the default size of the split.
    - "cifar10": read from `data_dir` (required); "val" and "test" both read the test batch; `n_samples` keeps
      the first n samples of the split; `seed` is not used.
    - "npz": your own images from the `.npz` archive `data_dir` (any channels, size and classes; `arrays`).
    - "imagefolder": your own image files, `data_dir/train/<class>/` and `data_dir/val/<class>/` (`folders`).
    - "package.module:function": your own loader, called with split, n_samples, seed and data_dir; it returns an
      ImageDataset (example: `esper.data.digits:load`, scikit-learn's digits).

    `normalize` (npz and imagefolder) turns the per-channel normalization with the train split's statistics off.

    Every source's split then goes through `records.check_dataset` (finite float32 [N, C, H, W], labels in
    [0, num_classes), 2 or more classes, at least one batch of `batch_size`, at least `min_size` pixels); a failure is
    a DataDirectoryError subclass with a one-line message. `records.validate_splits` adds the cross-split checks.
    """
    source = f"--dataset {dataset}" if data_dir is None else f"--dataset {dataset} --data-dir {data_dir}"
    with warnings_folded():  # a refusal stays one line: a warning numpy, PIL or the loader raised joins its message
        try:
            loaded = _load(dataset, split=split, n_samples=n_samples, seed=seed, data_dir=data_dir, normalize=normalize)
        except (MemoryError, RuntimeError) as error:  # numpy's MemoryError; torch's "can't allocate memory"
            if not isinstance(error, MemoryError) and "can't allocate memory" not in str(error):
                raise
            raise DataCheckError(
                f"{source}: ran out of memory loading the {split} split ({first_line(error, 160)}; the start-up "
                "estimate is a lower bound): use fewer or smaller images, or run where more memory is free"
            ) from None
        return check_dataset(loaded, split=split, source=source, batch_size=batch_size, min_size=min_size)


def _load(
    dataset: str, *, split: str, n_samples: int | None, seed: int, data_dir: str | None, normalize: bool
) -> ImageDataset:
    check_split(split)
    if n_samples is not None and n_samples < 1:
        raise ValueError(f"n_samples must be positive, got {n_samples}")
    if ":" in dataset:
        return _from_callable(dataset, split=split, n_samples=n_samples, seed=seed, data_dir=data_dir)
    if dataset == "synthetic":
        from esper.data.synthetic import SYNTHETIC_DEFAULT_SIZES, make_synthetic

        return make_synthetic(
            SYNTHETIC_DEFAULT_SIZES[split] if n_samples is None else n_samples, seed=seed, split=split
        )
    if dataset not in _NEEDS_DIR:
        raise ValueError(f"unknown dataset {dataset!r}: choose one of {', '.join(VALID_DATASETS)}")
    if data_dir is None:
        raise DataDirectoryError(_NEEDS_DIR[dataset])
    if dataset == "cifar10":
        from esper.data.cifar import load_cifar10

        return load_cifar10(data_dir, train=split == "train", n_samples=n_samples)
    if dataset == "npz":
        from esper.data.arrays import load_npz

        return load_npz(data_dir, split=split, n_samples=n_samples, normalize=normalize)
    from esper.data.folders import load_image_folder

    return load_image_folder(data_dir, split=split, n_samples=n_samples, normalize=normalize)


# The sources read from --data-dir, and what to pass when it is missing.
_NEEDS_DIR = {
    "cifar10": "CIFAR-10 is read from a local copy: pass --data-dir pointing at a folder containing "
    "cifar-10-batches-py",
    "npz": "--dataset npz reads your own images: pass --data-dir PATH.npz (see docs)",
    "imagefolder": "--dataset imagefolder reads DIR/train/<class>/ and DIR/val/<class>/: pass --data-dir DIR",
}


def _from_callable(spec: str, *, split: str, n_samples: int | None, seed: int, data_dir: str | None) -> ImageDataset:
    """`--dataset package.module:function`: import the function, call it for one split, check what it returns.

    Anything the user's code raises (SystemExit, GeneratorExit and other BaseExceptions included; not
    KeyboardInterrupt, which train's main tells apart from a real interrupt) becomes a one-line UserLoaderError
    naming `package.module:function`; the returned ImageDataset then goes through `check_dataset` like every source.
    """
    module_name, _, attribute = spec.partition(":")
    try:
        loader = getattr(importlib.import_module(module_name), attribute)
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # the user's module runs here: any failure is one line naming it
        raise UserLoaderError(
            f"--dataset {spec}: cannot import {attribute!r} from {module_name!r} "
            f"({type(error).__name__}: {first_line(error, 200)}): pass an importable package.module:function"
        ) from None
    _check_signature(spec, loader)
    before = _torch_defaults()
    streams = StandardStreams()
    try:
        dataset = loader(split=split, n_samples=n_samples, seed=seed, data_dir=data_dir)
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # the user's code: any failure becomes one line naming it
        raise UserLoaderError(
            f"--dataset {spec} raised {type(error).__name__} loading the {split} split ({first_line(error, 200)}): "
            "fix the loader so it returns an esper ImageDataset"
        ) from None
    finally:
        changed = _restore_torch_defaults(before)  # put back whatever the loader did, also when it raised
        closed = streams.restore()  # first: the refusal below must be able to reach the terminal
    if closed:
        raise UserLoaderError(
            f"--dataset {spec} closed or replaced the process's {closed} while loading the {split} split (put back "
            "for this message): a loader must leave the standard streams open"
        )
    if changed:
        raise UserLoaderError(
            f"--dataset {spec} changed torch's {changed} while loading the {split} split: the run's numerics would "
            "follow it; give the tensors it creates an explicit dtype= / device= and leave the defaults as they were"
        )
    if not isinstance(dataset, ImageDataset):
        raise UserLoaderError(
            f"--dataset {spec} returned {type(dataset).__name__} for the {split} split, not an esper ImageDataset"
        )
    return dataset


def _torch_defaults() -> tuple[torch.dtype, torch.device, bool]:
    """The process-wide torch settings a loader could change under the run: default dtype, device and grad mode."""
    return torch.get_default_dtype(), torch.get_default_device(), torch.is_grad_enabled()


def _restore_torch_defaults(before: tuple[torch.dtype, torch.device, bool]) -> str:
    """Put back what `_torch_defaults` saw; say which of them had changed (empty when none)."""
    dtype, device, grad = _torch_defaults()
    changed = []
    if dtype != before[0]:
        changed.append(f"default dtype from {before[0]} to {dtype}".replace("torch.", ""))
        torch.set_default_dtype(before[0])
    if device != before[1]:
        changed.append(f"default device from {before[1]} to {device}")
        torch.set_default_device(before[1])
    if grad != before[2]:
        changed.append(f"grad mode from {before[2]} to {grad}")
        torch.set_grad_enabled(before[2])
    return " and ".join(changed)


LOADER_SIGNATURE = "function(*, split, n_samples, seed, data_dir) -> ImageDataset"


def _check_signature(spec: str, loader: Any) -> None:
    if not callable(loader):
        raise UserLoaderError(f"--dataset {spec} is a {type(loader).__name__}, not a function: {LOADER_SIGNATURE}")
    call: Callable[..., Any] = loader
    try:
        signature = inspect.signature(call)
    except (TypeError, ValueError):
        return  # a builtin without a signature: the call itself tells
    try:
        signature.bind(split="train", n_samples=None, seed=0, data_dir=None)
    except TypeError as error:
        raise UserLoaderError(
            f"--dataset {spec} cannot be called with keyword arguments split, n_samples, seed, data_dir ({error}): "
            f"define it as {LOADER_SIGNATURE}"
        ) from None


def augment_batch(x: Tensor, generator: torch.Generator) -> Tensor:
    """The standard CIFAR train augmentation, batched: RandomCrop(32, padding=4) then a horizontal flip (p=0.5).

    Runs on `x`'s device in two gathers with no host sync; every random draw comes from `generator`, which must
    live on the same device as `x`. Padding is zero, i.e. the channel mean of normalized data.
    """
    batch, channels, height, width = x.shape
    pad = AUGMENT_PADDING
    padded = torch.nn.functional.pad(x, (pad, pad, pad, pad))
    device = x.device
    offsets = torch.randint(0, 2 * pad + 1, (2, batch), generator=generator, device=device)
    flip = torch.rand(batch, generator=generator, device=device) < 0.5
    rows = offsets[0].unsqueeze(1) + torch.arange(height, device=device)  # [B, H]
    cols_ascending = torch.arange(width, device=device)
    cols = offsets[1].unsqueeze(1) + torch.where(flip.unsqueeze(1), cols_ascending.flip(0), cols_ascending)  # [B, W]
    row_index = rows.view(batch, 1, height, 1).expand(batch, channels, height, width + 2 * pad)
    picked_rows = padded.gather(2, row_index)
    col_index = cols.view(batch, 1, 1, width).expand(batch, channels, height, width)
    return picked_rows.gather(3, col_index)
