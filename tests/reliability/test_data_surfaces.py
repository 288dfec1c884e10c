"""Issue 27: every hostile data input is refused in one line (exit code 2 through the CLI) naming the split or
member, the field and the fix, before anything is allocated or trained.

Each case writes the hostile input in its real on-disk form under tmp_path (an .npz archive, a PNG tree, a loader
module, a TaskSpec module) and goes through the real loading path: `load_task_data` / `get_task_spec` directly for
speed, and the CLI itself for three cases (stderr exactly one line, exit code 2).
"""

from __future__ import annotations

import io
import struct
import subprocess
import sys
import uuid
import warnings
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from reliability_helpers import child_env

from esper.data import arrays, folders
from esper.data.datasets import load_task_data
from esper.data.records import (
    MAX_CLASSES,
    DataCheckError,
    DataDirectoryError,
    ImageDataset,
    min_image_size,
    validate_splits,
)
from esper.leyline.tasks import TaskSpecError, get_task_spec
from esper.messages import warnings_folded

TINY_RUN = ("--train-samples", "4", "--val-samples", "4", "--batch-size", "2")
BASELINE_MIN = (min_image_size(3, 3, 3), 3)  # cifar_baseline: 3 blocks, 3x3 kernels, a pool after each


def npz(tmp_path: Path, name: str = "data.npz", **overrides: np.ndarray) -> Path:
    rng = np.random.default_rng(0)
    members = {
        "x_train": rng.random((8, 3, 8, 8), dtype=np.float32),
        "y_train": np.arange(8) % 2,
        "x_val": rng.random((4, 3, 8, 8), dtype=np.float32),
        "y_val": np.arange(4) % 2,
    }
    members.update(overrides)
    path = tmp_path / name
    np.savez(path, **members)
    return path


def load_npz(path: Path, split: str = "train", **kwargs: object) -> ImageDataset:
    return load_task_data("npz", split=split, n_samples=None, seed=0, data_dir=str(path), **kwargs)  # type: ignore[arg-type]


def load_folder(root: Path, split: str = "train", **kwargs: object) -> ImageDataset:
    return load_task_data("imagefolder", split=split, n_samples=None, seed=0, data_dir=str(root), **kwargs)  # type: ignore[arg-type]


def one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text and text.strip() == text and text, repr(text)
    return text


def run_cli(tmp_path: Path, *args: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = child_env()
    if pythonpath is not None:
        env["PYTHONPATH"] = f"{pythonpath}:{env.get('PYTHONPATH', '')}"
    argv = [
        sys.executable, "-m", "esper.scripts.train", "heuristic", *args, "--rounds", "1", "--envs", "1",
        "--episode-length", "1", *TINY_RUN, "--telemetry-level", "off", "--quiet",
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False)


def assert_cli_refused(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("train: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def npy_bytes(shape: tuple[int, ...], dtype: str = "<f4", payload: bytes = b"\0" * 64) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buffer.getvalue() + payload


def png_header_only(path: Path, width: int, height: int) -> None:
    """A tiny PNG declaring width x height pixels (its one IDAT holds a few compressed bytes only)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)))


def write_folder(root: Path, classes: int = 2, size: int = 8, per_class: int = 3) -> Path:
    from PIL import Image

    for split in ("train", "val"):
        for k in range(classes):
            folder = root / split / f"class{k}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                Image.new("RGB", (size, size), (40 * k, 10 * i, 0)).save(folder / f"{i}.png")
    return root


def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> str:
    name = f"user_loader_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(
        "import torch\nfrom esper.data.records import ImageDataset\n\n"
        "def good(n, classes=2, size=8):\n"
        "    x = torch.rand(n, 3, size, size)\n"
        "    y = torch.arange(n) % classes\n"
        "    return x, y\n\n" + body
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


# npz --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_an_npz_with_one_nan_or_inf_pixel_is_refused(tmp_path: Path, value: float) -> None:
    x = np.zeros((8, 3, 8, 8), dtype=np.float32)
    x[3, 1, 2, 2] = value
    with pytest.raises(DataCheckError) as caught:
        load_npz(npz(tmp_path, x_train=x))
    message = one_line(caught.value)
    assert "x_train holds 1 NaN or infinite values" in message and "nan_to_num" in message


def test_the_cli_refuses_an_npz_with_a_nan_pixel_in_one_line_with_exit_2(tmp_path: Path) -> None:
    x = np.random.default_rng(1).random((8, 3, 8, 8), dtype=np.float32)
    x[0, 0, 0, 0] = np.nan
    path = npz(tmp_path, x_train=x)
    line = assert_cli_refused(run_cli(tmp_path, "--dataset", "npz", "--data-dir", str(path)), "x_train", "NaN")
    assert "nan_to_num" in line


def test_an_npz_member_declaring_a_huge_shape_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "huge.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x_train.npy", npy_bytes((10**12, 3, 32, 32)))
        archive.writestr("y_train.npy", npy_bytes((4,), "<i8", b"\0" * 32))
    with pytest.raises(DataCheckError) as caught:
        load_npz(path)
    message = one_line(caught.value)
    assert f"member x_train.npy declares {10**12 * 3 * 32 * 32 * 4} bytes" in message
    assert f"limit of {arrays.NPZ_MEMBER_LIMIT_BYTES} bytes" in message


def test_the_cli_refuses_an_npz_declaring_a_huge_shape_in_one_line_with_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "huge.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x_train.npy", npy_bytes((10**12, 3, 32, 32)))
    result = run_cli(tmp_path, "--dataset", "npz", "--data-dir", str(path))
    assert_cli_refused(result, "x_train.npy declares", "NPZ_MEMBER_LIMIT_BYTES")


def test_an_npz_zip_bomb_is_refused_by_its_uncompressed_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arrays, "NPZ_MEMBER_LIMIT_BYTES", 2**20)  # 1 MiB stands for the 4 GiB limit: same code path
    zeros = np.zeros((2**22,), dtype=np.uint8)  # 4 MiB of zeros, a few kB compressed
    path = tmp_path / "bomb.npz"
    np.savez_compressed(path, x_train=zeros, y_train=np.zeros(4, dtype=np.int64))
    assert path.stat().st_size < 2**16
    with pytest.raises(DataCheckError) as caught:
        load_npz(path)
    assert "member x_train.npy declares" in one_line(caught.value)


def test_an_npz_with_the_zip_encryption_flag_is_one_line_with_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "encrypted.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x_train.npy", npy_bytes((4, 1, 8, 8), "<f4", b"\0" * 4 * 64 * 4))
    raw = bytearray(path.read_bytes())
    for signature, flag_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):  # local header, central directory
        raw[raw.find(signature) + flag_at] |= 1  # general purpose bit 0: encrypted
    path.write_bytes(bytes(raw))
    with pytest.raises(DataDirectoryError) as caught:
        load_npz(path)
    assert "holds an encrypted member" in one_line(caught.value)
    result = run_cli(tmp_path, "--dataset", "npz", "--data-dir", str(path))
    assert_cli_refused(result, "holds an encrypted member", "numpy.savez")


@pytest.mark.parametrize("label", [10**9, 2**62])
def test_npz_labels_beyond_the_class_limit_are_refused(tmp_path: Path, label: int) -> None:
    y = np.arange(8, dtype=np.int64) % 2
    y[5] = label
    with pytest.raises(DataCheckError) as caught:
        load_npz(npz(tmp_path, y_train=y))
    message = one_line(caught.value)
    assert f"y_train holds label {label}" in message and str(MAX_CLASSES) in message


def test_npz_1x1_images_are_refused_for_a_host_that_pools_three_times(tmp_path: Path) -> None:
    path = npz(tmp_path, x_train=np.ones((8, 3, 1, 1), np.float32), x_val=np.ones((4, 3, 1, 1), np.float32))
    with pytest.raises(DataCheckError) as caught:
        load_npz(path, min_size=BASELINE_MIN)
    assert "images must be at least 8x8 for a host of depth 3" in one_line(caught.value)
    assert BASELINE_MIN == (8, 3) and min_image_size(3, 3, 0) == 1 and min_image_size(5, 2, 5) == 1


def test_npz_val_with_other_channels_than_train_is_refused(tmp_path: Path) -> None:
    path = npz(tmp_path, x_val=np.zeros((4, 1, 8, 8), np.float32))
    with pytest.raises(DataCheckError) as caught:
        load_npz(path, split="val")
    assert "x_val images are 1x8x8 (C x H x W), x_train's 3x8x8" in one_line(caught.value)


def test_npz_images_with_zero_channels_are_refused(tmp_path: Path) -> None:
    path = npz(tmp_path, x_train=np.zeros((8, 0, 8, 8), np.float32))
    with pytest.raises(DataDirectoryError) as caught:
        load_npz(path)
    assert "x_train must be a numeric array" in one_line(caught.value) and "[8, 0, 8, 8]" in str(caught.value)


# image folders ------------------------------------------------------------------------------------------------


def test_a_decompression_bomb_png_is_refused_naming_the_file(tmp_path: Path) -> None:
    root = write_folder(tmp_path / "imgs")
    bomb = root / "train" / "class0" / "0.png"
    png_header_only(bomb, 20000, 20000)
    assert bomb.stat().st_size < 1000
    with pytest.raises(DataCheckError) as caught:
        load_folder(root)
    message = one_line(caught.value)
    assert f"{bomb} is over the limit of {folders.MAX_IMAGE_PIXELS} pixels" in message
    assert "400000000 pixels" in message and message.endswith("resize it")


def test_a_png_over_our_pixel_limit_but_under_pils_is_refused_before_decoding(tmp_path: Path) -> None:
    root = write_folder(tmp_path / "imgs")
    big = root / "train" / "class1" / "2.png"
    png_header_only(big, 5000, 5000)
    with pytest.raises(DataCheckError) as caught:
        load_folder(root)
    assert f"{big} is 5000x5000 pixels, over the limit of {folders.MAX_IMAGE_PIXELS} pixels" in one_line(caught.value)


def test_an_image_folder_of_one_class_is_refused(tmp_path: Path) -> None:
    root = write_folder(tmp_path / "imgs", classes=1)
    with pytest.raises(DataCheckError) as caught:
        load_folder(root)
    assert "train split: num_classes is 1: give 2 to" in one_line(caught.value)


def test_a_symlink_loop_in_an_image_folder_is_refused_naming_the_link(tmp_path: Path) -> None:
    root = write_folder(tmp_path / "imgs")
    link = root / "train" / "class0" / "again"
    link.symlink_to(root / "train")
    with pytest.raises(DataDirectoryError) as caught:
        load_folder(root)
    assert f"{link} is a symlink loop" in one_line(caught.value)


def test_1x1_folder_images_are_refused_for_the_host_depth(tmp_path: Path) -> None:
    root = write_folder(tmp_path / "imgs", size=1)
    with pytest.raises(DataCheckError) as caught:
        load_folder(root, "val", min_size=BASELINE_MIN)
    assert "val split: images are 1x1: images must be at least 8x8 for a host of depth 3" in one_line(caught.value)


# user loaders -------------------------------------------------------------------------------------------------

LAX = (
    "class Lax(ImageDataset):\n    def __post_init__(self):\n        pass\n\n"
    "def load(*, split, n_samples, seed, data_dir):\n"
)
LOADER_BODIES = {
    "raises": ("def load(*, split, n_samples, seed, data_dir):\n    raise RuntimeError('disk on fire')\n", "raised"),
    "zero samples": (
        "def load(*, split, n_samples, seed, data_dir):\n"
        "    x, y = good(0)\n    return ImageDataset(x, y, num_classes=2, name='u', augment=False)\n",
        "0 samples, fewer than one batch of 25",
    ),
    "three samples": (
        "def load(*, split, n_samples, seed, data_dir):\n"
        "    x, y = good(3)\n    return ImageDataset(x, y, num_classes=2, name='u', augment=False)\n",
        "3 samples, fewer than one batch of 25",
    ),
    "label out of range": (
        "def load(*, split, n_samples, seed, data_dir):\n"
        "    x, y = good(30)\n    y[4] = 7\n    return ImageDataset(x, y, num_classes=2, name='u', augment=False)\n",
        "labels span 0..7, outside 0..1",
    ),
    "negative label": (
        "def load(*, split, n_samples, seed, data_dir):\n"
        "    x, y = good(30)\n    y[4] = -3\n    return ImageDataset(x, y, num_classes=2, name='u', augment=False)\n",
        "labels span -3..1, outside 0..1",
    ),
    "float64 images": (
        "def load(*, split, n_samples, seed, data_dir):\n"
        "    x, y = good(30)\n    return ImageDataset(x.double(), y, num_classes=2, name='u', augment=False)\n",
        "images must be float32, got torch.float64",
    ),
    "no keywords": ("def load():\n    return None\n", "define it as function(*, split, n_samples, seed, data_dir)"),
    "zero classes": (
        "def load(*, split, n_samples, seed, data_dir):\n"
        "    x, y = good(30)\n    return ImageDataset(x, y * 0, num_classes=0, name='u', augment=False)\n",
        "num_classes is 0",
    ),
    "system exit": ("def load(*, split, n_samples, seed, data_dir):\n    raise SystemExit(0)\n", "raised SystemExit"),
    "not a dataset": ("def load(*, split, n_samples, seed, data_dir):\n    return [1, 2]\n", "returned list"),
    # An ImageDataset subclass that skips __post_init__'s checks: check_dataset still sees every field.
    "subclass with numpy images": (
        LAX + "    x, y = good(30)\n    return Lax(x.numpy(), y, 2, 'u', False)\n",
        "images are of type ndarray: give torch tensors",
    ),
    "subclass with meta images": (
        LAX + "    x, y = good(30)\n    return Lax(x.to('meta'), y, 2, 'u', False)\n",
        "images are a meta tensor: give dense tensors in CPU memory",
    ),
    "subclass with sparse labels": (
        LAX + "    x, y = good(30)\n    return Lax(x, y.to_sparse(), 2, 'u', False)\n",
        "labels are a sparse_coo tensor",
    ),
    "subclass with quantized images": (
        LAX
        + "    x, y = good(30)\n    return Lax(torch.quantize_per_tensor(x, 0.1, 0, torch.quint8), y, 2, 'u', False)\n",
        "images are a quantized tensor",
    ),
    "subclass with a name of another type": (
        LAX + "    x, y = good(30)\n    return Lax(x, y, 2, 5, 'yes')\n",
        "name 5 and augment 'yes' must be a str and a bool",
    ),
    "changes the default dtype": (
        "def load(*, split, n_samples, seed, data_dir):\n    torch.set_default_dtype(torch.float64)\n"
        "    x, y = good(30)\n    return ImageDataset(x.float(), y, num_classes=2, name='u', augment=False)\n",
        "changed torch's default dtype from float32 to float64 while loading the train split",
    ),
    "turns grad mode off": (
        "def load(*, split, n_samples, seed, data_dir):\n    torch.set_grad_enabled(False)\n"
        "    x, y = good(30)\n    return ImageDataset(x, y, num_classes=2, name='u', augment=False)\n",
        "changed torch's grad mode from True to False",
    ),
}


@pytest.mark.parametrize("case", sorted(LOADER_BODIES))
def test_a_failing_user_loader_is_refused_naming_the_function(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    body, needle = LOADER_BODIES[case]
    spec = f"{user_module(tmp_path, monkeypatch, body)}:load"
    with pytest.raises(DataDirectoryError) as caught:
        load_task_data(spec, split="train", n_samples=None, seed=0, data_dir=None, batch_size=25)
    message = one_line(caught.value)
    assert spec in message and needle in message, message
    assert torch.get_default_dtype() == torch.float32 and torch.is_grad_enabled()  # put back as they were


def test_warnings_raised_while_refusing_a_loader_are_folded_into_the_one_line(tmp_path: Path) -> None:
    """numpy, PIL or the loader itself may warn before the refusal: the message stays one line."""
    (tmp_path / "warning_loader.py").write_text(
        "import warnings\n\ndef load(**kwargs):\n    warnings.warn('half the files are odd')\n"
        "    warnings.warn('and another')\n    raise ValueError('no images')\n"
    )
    result = run_cli(tmp_path, "--dataset", "warning_loader:load", pythonpath=tmp_path)
    assert_cli_refused(
        result,
        "--dataset warning_loader:load raised ValueError loading the train split (no images)",
        "[it warned first: UserWarning at warning_loader.py:4: half the files are odd and 1 more]",
    )


def test_warnings_of_a_loader_that_succeeds_are_shown_as_they_were() -> None:
    with pytest.warns(UserWarning, match="shown"), warnings_folded():
        warnings.warn("shown", stacklevel=1)


def test_the_cli_names_a_user_loader_that_calls_sys_exit(tmp_path: Path) -> None:
    (tmp_path / "exiting_loader.py").write_text("import sys\n\ndef load(**kwargs):\n    sys.exit(0)\n")
    result = run_cli(tmp_path, "--dataset", "exiting_loader:load", pythonpath=tmp_path)
    assert_cli_refused(result, "--dataset exiting_loader:load raised SystemExit")


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("raise GeneratorExit('closed')", "--dataset odd_loader:load raised GeneratorExit loading the train split"),
        ("raise BaseException('odd')", "--dataset odd_loader:load raised BaseException loading the train split"),
        (
            "class Unprintable(Exception):\n        def __str__(self):\n            raise RuntimeError('no')\n"
            "    raise Unprintable()",
            "(<Unprintable whose message cannot be printed>)",
        ),
        ("raise KeyboardInterrupt", "KeyboardInterrupt raised by the run's own code, not by a signal"),
    ],
)
def test_the_cli_ends_any_exception_of_a_user_loader_in_one_line(tmp_path: Path, body: str, needle: str) -> None:
    """GeneratorExit, a bare BaseException, a message whose __str__ raises, and a KeyboardInterrupt no signal sent
    (it used to print the "second interrupt" message of a real Ctrl-C)."""
    (tmp_path / "odd_loader.py").write_text(f"def load(**kwargs):\n    {body}\n")
    result = run_cli(tmp_path, "--dataset", "odd_loader:load", pythonpath=tmp_path)
    assert_cli_refused(result, needle)


def test_validate_splits_refuses_splits_of_other_shapes_and_short_splits() -> None:
    def data(n: int, channels: int = 3) -> ImageDataset:
        return ImageDataset(torch.zeros(n, channels, 8, 8), torch.arange(n) % 2, num_classes=2, name="d", augment=False)

    validate_splits(data(4), data(4), classes=2, batch_size=4, min_size=BASELINE_MIN, source="s")
    with pytest.raises(DataCheckError, match=r"^s: val split images are 1x8x8 \(C x H x W\), the train split's 3x8x8"):
        validate_splits(data(4), data(4, 1), batch_size=2, source="s")
    with pytest.raises(DataCheckError, match=r"^s: val split: 3 samples, fewer than one batch of 4"):
        validate_splits(data(4), data(3), batch_size=4, source="s")


# TaskSpecs ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [("base_channels", 0, "1 to 256"), ("base_channels", 100000, "1 to 256"), ("n_blocks", -1, "1 to 8")],
)
def test_a_task_spec_out_of_range_is_refused_naming_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, field: str, value: int, allowed: str
) -> None:
    name = f"user_task_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(
        "from esper.leyline import TaskSpec\n"
        f"TASK = TaskSpec(name='mine', **{{'base_channels': 8, '{field}': {value}}})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TaskSpecError) as caught:
        get_task_spec(f"{name}:TASK")
    assert f"--task {name}:TASK 'mine': {field}={value} is out of range: use a whole number from {allowed}" in one_line(
        caught.value
    )


def test_a_task_spec_of_ten_blocks_is_refused_by_its_widest_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"user_task_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(
        "from esper.leyline import TaskSpec\nTASK = TaskSpec(name='deep', base_channels=8, n_blocks=10)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TaskSpecError) as caught:
        get_task_spec(f"{name}:TASK")
    assert "n_blocks=10 is out of range: use a whole number from 1 to 8" in one_line(caught.value)


def test_the_cli_refuses_images_too_small_for_the_hosts_pooling_in_one_line_with_exit_2(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    tiny = {
        "x_train": rng.random((64, 3, 1, 1), dtype=np.float32),
        "x_val": rng.random((16, 3, 1, 1), dtype=np.float32),
    }
    path = npz(tmp_path, **tiny, y_train=np.arange(64) % 2, y_val=np.arange(16) % 2)
    line = assert_cli_refused(run_cli(tmp_path, "--dataset", "npz", "--data-dir", str(path)), "1x1", "at least 8x8")
    assert "train split" in line and "host of depth 3" in line


def test_the_cli_refuses_a_train_split_smaller_than_one_batch_in_one_line_with_exit_2(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    path = npz(tmp_path, x_train=rng.random((1, 3, 8, 8), dtype=np.float32), y_train=np.array([1]))
    line = assert_cli_refused(run_cli(tmp_path, "--dataset", "npz", "--data-dir", str(path)), "fewer than one batch")
    assert "train split: 1 samples" in line and "--batch-size" in line  # TINY_RUN's batch is 2 per env


def test_an_image_folder_too_large_to_decode_is_refused_before_decoding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first image's header gives the size; every image as float32, held twice while stacked, must fit."""
    from PIL import Image

    from esper.data import folders

    for split, count in (("train", 6), ("val", 2)):
        for index in range(count):
            folder = tmp_path / split / f"class{index % 2}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (16, 12)).save(folder / f"{index}.png")
    decoded: list[str] = []
    monkeypatch.setattr(folders, "_load_rgb", lambda path: decoded.append(path))
    monkeypatch.setattr(folders, "memory_left", lambda: (2 * 4 * 3 * 16 * 12 * 6 - 1, True))
    with pytest.raises(DataCheckError) as caught:
        folders.load_image_folder(str(tmp_path), split="train", n_samples=None)
    assert one_line(caught.value) == (
        f"--data-dir {tmp_path}: decoding the train split needs at least 27.0 KiB (6 train images of 16x12 as "
        "float32, held twice while stacked; a lower-bound estimate) but 27.0 KiB is available under this "
        "process's address-space limit (ulimit -v): use fewer or smaller images"
    )
    monkeypatch.setattr(folders, "memory_left", lambda: (1024, False))  # the train images kept, the val ones twice
    with pytest.raises(DataCheckError, match=r"the val split needs at least 22.5 KiB \(6 train and 2 val images"):
        folders.load_image_folder(str(tmp_path), split="val", n_samples=None)
    assert decoded == []  # refused before a single image was decoded
    monkeypatch.undo()
    assert len(folders.load_image_folder(str(tmp_path), split="train", n_samples=None)) == 6  # when it fits, it loads


@pytest.mark.parametrize(
    "error",
    [
        MemoryError("Unable to allocate 12.0 MiB for an array"),
        RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"),
    ],
)
def test_running_out_of_memory_while_loading_is_one_line_naming_the_split(
    monkeypatch: pytest.MonkeyPatch, error: BaseException
) -> None:
    """The start-up estimate is a lower bound: what it missed still ends in one line, not an allocator traceback."""
    from esper.data import datasets

    def exhausted(*args: object, **kwargs: object) -> ImageDataset:
        raise error

    monkeypatch.setattr(datasets, "_load", exhausted)
    with pytest.raises(DataCheckError) as caught:
        load_task_data("npz", split="val", n_samples=None, seed=0, data_dir="d.npz")
    message = one_line(caught.value)
    assert message.startswith("--dataset npz --data-dir d.npz: ran out of memory loading the val split (")
    assert message.endswith("use fewer or smaller images, or run where more memory is free")
    monkeypatch.setattr(datasets, "_load", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("another failure")))
    with pytest.raises(RuntimeError, match="another failure"):  # not a memory failure: not relabelled
        load_task_data("npz", split="val", n_samples=None, seed=0, data_dir="d.npz")
