"""Issue 27: a seeded fuzzer over the data surfaces. Random .npz archives, random image folders, random returns of a
`package.module:function` loader and random TaskSpec fields either load and pass `validate_splits` /
`validate_task_spec`, or are refused with a documented error type (DataDirectoryError and its subclasses; TaskSpecError
for TaskSpecs) and a one-line message. Any other exception fails the test, naming the case. Everything is written
under tmp_path (the working directory during the run), and the repository's top level is unchanged afterwards.

KeyboardInterrupt raised by a loader is not fuzzed: it propagates on purpose (Ctrl-C must stop the run).
"""

from __future__ import annotations

import io
import os
import sys
import time
import types
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from esper.data.datasets import load_task_data
from esper.data.records import DataDirectoryError, ImageDataset, min_image_size, validate_splits
from esper.leyline.tasks import TASK_INT_RANGES, TaskSpec, TaskSpecError, validate_task_spec

SEED = 20261125
CASES = {"npz": 2000, "folder": 500, "loader": 1500, "task": 1500}  # 5,500 inputs in all
REPO_ROOT = Path(__file__).resolve().parents[2]


def pick(rng: np.random.Generator, choices: Any) -> Any:
    """One element of a list (rng.choice would turn a list of tuples or classes into an array)."""
    return list(choices)[int(rng.integers(len(choices)))]


def attempt(case: str, documented: tuple[type[BaseException], ...], action: Callable[..., Any], *args: Any) -> str:
    """'loaded' or 'refused'; a refusal must be of a documented type with one non-empty line; anything else fails."""
    try:
        action(*args)
    except documented as error:
        message = str(error)
        assert message and "\n" not in message and "\r" not in message, f"{case}: {message!r}"
        assert "Traceback" not in message, f"{case}: {message!r}"
        return "refused"
    except BaseException as error:
        pytest.fail(f"{case}: {type(error).__name__} escaped: {error!r}"[:2000])
    return "loaded"


def both_splits(dataset: str, data_dir: str | None, rng: np.random.Generator) -> None:
    n_samples = None if rng.random() < 0.5 else int(rng.integers(1, 12))
    batch = int(rng.integers(1, 6))
    train = load_task_data(dataset, split="train", n_samples=n_samples, seed=0, data_dir=data_dir)
    val = load_task_data(dataset, split="val", n_samples=n_samples, seed=0, data_dir=data_dir)
    depth = int(rng.integers(0, 4))
    validate_splits(
        train,
        val,
        classes=max(train.num_classes, val.num_classes),
        batch_size=batch,
        min_size=(min_image_size(3, 3, depth), depth),
        source="fuzz",
    )


# random .npz archives ---------------------------------------------------------------------------------------

DTYPES = ["uint8", "int8", "int16", "int32", "int64", "uint64", "float16", "float32", "float64", "bool", "complex64"]


def random_array(rng: np.random.Generator, *, labels: bool) -> np.ndarray:
    if labels and rng.random() < 0.7:
        n = int(rng.integers(0, 12))
        kind = rng.choice(["ok", "ok", "neg", "huge", "float", "2d"])
        y = rng.integers(0, int(rng.integers(1, 5)), size=n)
        if kind == "neg" and n:
            y[0] = -int(rng.integers(1, 10))
        if kind == "huge" and n:
            y[0] = int(rng.choice([10**9, 2**62, 2**31, 99_999, 100_000]))
        if kind == "float":
            return y.astype(np.float32)
        if kind == "2d":
            return y.reshape(1, -1)
        return y.astype(rng.choice(["int64", "int32", "uint8", "uint64"]))
    ndim = int(rng.choice([0, 1, 2, 3, 4, 4, 4, 4, 5]))
    shape = tuple(int(rng.choice([0, 1, 2, 3, 4, 8, 8, 9])) for _ in range(ndim))
    dtype = str(rng.choice(DTYPES))
    values = rng.random(shape) * float(rng.choice([1.0, 255.0, 1e6, 1e300]))
    with np.errstate(all="ignore"):
        x = values.astype(dtype)
    if x.dtype.kind == "f" and x.size and rng.random() < 0.2:
        x.flat[int(rng.integers(0, x.size))] = rng.choice([np.nan, np.inf, -np.inf])
    return x


def write_npz(path: Path, rng: np.random.Generator) -> None:
    members: dict[str, np.ndarray] = {}
    n_train, n_val = int(rng.integers(1, 10)), int(rng.integers(1, 10))
    size, channels = int(rng.choice([1, 2, 4, 8])), int(rng.choice([1, 3, 4]))
    members["x_train"] = rng.random((n_train, channels, size, size)).astype(np.float32)
    members["y_train"] = np.arange(n_train) % 2 + (rng.integers(0, 2, n_train) if rng.random() < 0.5 else 0)
    held = "val" if rng.random() < 0.8 else "test"
    members[f"x_{held}"] = rng.random((n_val, channels, size, size)).astype(np.float32)
    members[f"y_{held}"] = rng.integers(0, 3, n_val)
    if rng.random() < 0.4:  # a clean archive: the loading path is fuzzed too
        (np.savez_compressed if rng.random() < 0.5 else np.savez)(path, **members)  # type: ignore[operator]
        return
    for key in list(members):
        roll = rng.random()
        if roll < 0.1:
            del members[key]
        elif roll < 0.35:
            members[key] = random_array(rng, labels=key.startswith("y"))
    if rng.random() < 0.1:
        members["extra"] = rng.random(3)
    (np.savez_compressed if rng.random() < 0.5 else np.savez)(path, **members)  # type: ignore[operator]
    roll = rng.random()
    if roll < 0.08:
        with zipfile.ZipFile(path, "a") as archive:
            archive.writestr(str(rng.choice(["notes.txt", "x_train", "y_val.npy.bak"])), b"hello")
    elif roll < 0.18:
        data = path.read_bytes()
        path.write_bytes(data[: int(rng.integers(0, len(data)))])
    elif roll < 0.28:
        data = bytearray(path.read_bytes())
        for _ in range(int(rng.integers(1, 6))):
            data[int(rng.integers(0, len(data)))] = int(rng.integers(0, 256))
        path.write_bytes(bytes(data))
    elif roll < 0.3:
        path.write_bytes(rng.bytes(int(rng.integers(0, 200))))
    elif roll < 0.38:  # a member whose .npy header declares a shape its bytes do not hold (up to 10**12 images)
        shape = tuple(int(rng.choice([0, 1, 3, 32, 10**6, 10**12])) for _ in range(int(rng.integers(1, 5))))
        header = io.BytesIO()
        descr = str(pick(rng, ["<f4", "<f8", "|u1", "<i8", "|O"]))
        np.lib.format.write_array_header_1_0(header, {"descr": descr, "fortran_order": False, "shape": shape})
        name = str(pick(rng, ["x_train.npy", "y_train.npy", "x_val.npy", "y_val.npy"]))
        with zipfile.ZipFile(path) as archive:
            kept = {info.filename: archive.read(info) for info in archive.infolist() if info.filename != name}
        with zipfile.ZipFile(path, "w") as archive:
            for member, data in kept.items():
                archive.writestr(member, data)
            archive.writestr(name, header.getvalue() + rng.bytes(int(rng.integers(0, 64))))


# random image folders ---------------------------------------------------------------------------------------

MODES = ["RGB", "L", "RGBA", "P", "1", "I;16", "LA"]


def write_clean_folder(root: Path, rng: np.random.Generator) -> None:
    size, classes = int(rng.choice([8, 9, 16])), int(rng.integers(2, 4))
    for split in ("train", "val"):
        for k in range(classes):
            (root / split / f"c{k}").mkdir(parents=True)
            for i in range(int(rng.integers(2, 5))):
                mode = str(pick(rng, ["RGB", "L", "RGBA", "P"]))
                Image.new(mode, (size, size), int(rng.integers(0, 200))).save(root / split / f"c{k}" / f"{i}.png")


def write_folder(root: Path, rng: np.random.Generator) -> None:
    if rng.random() < 0.4:
        write_clean_folder(root, rng)
        return
    size = int(rng.choice([1, 2, 4, 8]))
    classes = int(rng.choice([0, 1, 2, 2, 3]))
    for split in ("train", "val") if rng.random() < 0.9 else ("train",):
        for k in range(classes if rng.random() < 0.9 else classes + 1):
            folder = root / split / f"c{k}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(int(rng.integers(0, 4))):
                side = size if rng.random() < 0.9 else int(rng.integers(1, 9))
                mode = str(rng.choice(MODES))
                extension = str(rng.choice(["png", "png", "bmp", "jpg", "gif"]))
                path = folder / f"{i}.{extension}"
                roll = rng.random()
                if roll < 0.08:
                    path.write_bytes(rng.bytes(int(rng.integers(0, 64))))
                    continue
                try:
                    Image.new(mode, (side, side)).save(path)
                except (OSError, ValueError, KeyError):
                    Image.new("RGB", (side, side)).save(folder / f"{i}.png")
                    continue
                if roll < 0.16:
                    data = path.read_bytes()
                    path.write_bytes(data[: int(rng.integers(0, len(data)))])
    if classes and rng.random() < 0.05 and (root / "train" / "c0").is_dir():
        (root / "train" / "c0" / "loop").symlink_to(root / "train")


# random loader returns ----------------------------------------------------------------------------------------


def random_return(rng: np.random.Generator) -> Callable[..., Any]:
    kind = str(pick(rng, ["dataset"] * 6 + ["none", "list", "tensor", "raise", "exit", "nokw", "positional"]))
    if kind == "none":
        return lambda **_: None
    if kind == "list":
        return lambda **_: [1, 2, 3]
    if kind == "tensor":
        return lambda **_: torch.zeros(3)
    if kind == "raise":
        error = pick(rng, [ValueError, KeyError, RuntimeError, ZeroDivisionError, RecursionError, MemoryError])
        return lambda **_: (_ for _ in ()).throw(error("loader failed\nsecond line"))
    if kind == "exit":
        code = pick(rng, [0, 1, 2, "bye"])
        return lambda **_: sys.exit(code)
    if kind == "nokw":
        return lambda: None
    if kind == "positional":
        return lambda split, n_samples, seed, data_dir, /: None
    clean = rng.random() < 0.5
    n = 30 if clean else int(rng.choice([0, 1, 3, 8, 30]))
    channels = int(rng.choice([1, 3])) if clean else int(rng.choice([0, 1, 3]))
    size = int(rng.choice([8, 12])) if clean else int(rng.choice([0, 1, 4, 8]))
    dtype = torch.float32 if clean else pick(rng, [torch.float32, torch.float32, torch.float64, torch.uint8])
    classes = int(rng.choice([2, 10])) if clean else int(rng.choice([0, 1, 2, 3, 10, 100_001]))
    label_high = 2 if clean else int(rng.choice([1, 2, 3, 11]))
    poison = not clean and rng.random() < 0.2
    torch_seed = int(rng.integers(2**31))  # the loader's own draws are seeded too: the whole fuzz is reproducible

    def load(*, split: str, n_samples: int | None, seed: int, data_dir: str | None) -> ImageDataset:
        generator = torch.Generator().manual_seed(torch_seed)
        images = torch.rand(n, channels, size, size, generator=generator).to(dtype)
        if poison and images.numel() and images.is_floating_point():
            images.view(-1)[0] = float("nan")
        labels = torch.randint(-1 if classes == 3 else 0, label_high, (n,), generator=generator)
        return ImageDataset(images, labels, num_classes=classes, name="fuzz", augment=False)

    return load


# random TaskSpecs -----------------------------------------------------------------------------------------------

INT_CHOICES: list[Any] = [-1, 0, 1, 2, 3, 5, 8, 9, 10, 64, 257, 100_000, 10**12, True, 2.5, None, "3"]
FLOAT_CHOICES: list[Any] = [0.0, 1e-3, 0.01, 0.5, 0.9, 1.0, 2.0, 11.0, -0.1, float("nan"), float("inf"), None, "x"]


def random_spec(rng: np.random.Generator) -> TaskSpec:
    fields: dict[str, Any] = {}
    for name, (low, high) in TASK_INT_RANGES.items():
        fields[name] = int(rng.integers(low, min(high, 9) + 1)) if rng.random() < 0.7 else pick(rng, INT_CHOICES)
    fields["pool_layers"] = None if rng.random() < 0.3 else pick(rng, [-1, 0, 1, 2, 3, 4, 9, True])
    for name in ("host_lr", "seed_lr", "momentum", "weight_decay", "max_grad_norm"):
        if rng.random() < 0.3:
            fields[name] = pick(rng, FLOAT_CHOICES)
    if rng.random() < 0.05:
        fields["default_slots"] = pick(rng, [(), ("r0c1",), "r0c1", (1,)])
    fields = {key: value.item() if isinstance(value, np.generic) else value for key, value in fields.items()}
    return TaskSpec(name="fuzz", **fields)


def spec_builds_at_its_minimum_size(spec: TaskSpec) -> None:
    """A valid, small spec's host runs on images of exactly `min_image_size`, and not one pixel smaller."""
    from esper.kasmina.host import CNNHost

    size = min_image_size(spec.n_blocks, spec.kernel_size, spec.num_pool_layers)
    host = CNNHost(spec, init_seed=0).eval()
    with torch.no_grad():
        host(torch.zeros(1, spec.in_channels, size, size))
        if size > 1:
            with pytest.raises(RuntimeError):
                host(torch.zeros(1, spec.in_channels, size - 1, size - 1))


# the fuzz test ----------------------------------------------------------------------------------------------------


def test_random_data_inputs_load_or_are_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(SEED)
    monkeypatch.chdir(tmp_path)
    repo_before = sorted(os.listdir(REPO_ROOT))
    outcomes: dict[str, dict[str, int]] = {kind: {"loaded": 0, "refused": 0} for kind in CASES}
    started = time.perf_counter()

    for i in range(CASES["npz"]):
        path = tmp_path / "npz" / f"{i}.npz"
        path.parent.mkdir(exist_ok=True)
        write_npz(path, rng)
        outcome = attempt(f"npz case {i}", (DataDirectoryError,), both_splits, "npz", str(path), rng)
        outcomes["npz"][outcome] += 1

    for i in range(CASES["folder"]):
        root = tmp_path / "folders" / str(i)
        root.mkdir(parents=True)
        write_folder(root, rng)
        outcome = attempt(f"folder case {i}", (DataDirectoryError,), both_splits, "imagefolder", str(root), rng)
        outcomes["folder"][outcome] += 1

    module = types.ModuleType("esper_fuzz_loader")
    monkeypatch.setitem(sys.modules, "esper_fuzz_loader", module)
    for i in range(CASES["loader"]):
        module.load = random_return(rng)  # type: ignore[attr-defined]
        name = "load" if rng.random() < 0.95 else str(rng.choice(["missing", "__name__"]))
        spec = f"esper_fuzz_loader:{name}" if rng.random() < 0.97 else "esper_no_such_module_fuzz:load"
        outcome = attempt(f"loader case {i}", (DataDirectoryError,), both_splits, spec, None, rng)
        outcomes["loader"][outcome] += 1

    built = 0
    for i in range(CASES["task"]):
        task = random_spec(rng)
        outcome = attempt(f"task case {i} {task}", (TaskSpecError,), validate_task_spec, task)
        outcomes["task"][outcome] += 1
        if outcome == "loaded" and task.block_channels(task.n_blocks - 1) <= 64 and task.in_channels <= 8:
            spec_builds_at_its_minimum_size(task)
            built += 1

    elapsed = time.perf_counter() - started
    print(f"fuzz: {sum(CASES.values())} inputs in {elapsed:.1f} s: {outcomes}; {built} small hosts built")
    for kind, counts in outcomes.items():
        assert counts["loaded"] > 0 and counts["refused"] > 0, (kind, counts)  # both paths exercised
    assert sorted(os.listdir(REPO_ROOT)) == repo_before
