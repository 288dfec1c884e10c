"""Pack what the device machine lacks, here, before a device session spends its minutes: `nox -s gpu_pack`.

    python tests/device/pack.py [--out build/device] [--original GIT_DIR_OR_CHECKOUT] [--commit 11ebe0f6]

The device machine's image (tests/device/image.txt) has torch 2.11 and most of the test tools, but not everything
the GPU check imports, and nothing can be fetched there. This writes, under `--out` (ignored by git, carried by the
device call):

- `wheels/`: the pinned wheels of tests/device/pack.txt, downloaded for the image's Python (3.12, x86-64), each
  without its dependencies (pack.txt names them all; `tests/device/rehearse.py` proves the list is enough);
- `original/src/`: the original esper-lite's source at `--commit`, from a git directory or a checkout, when
  `--original` names one (the check's rate step then measures it beside ours).

It then prints the one device call that runs the check (`tests/device/on_device.sh`). Exits 1 when the download
fails or the carried folder would not fit beside the tree in the 64 MiB a device call takes.
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACK = Path(__file__).with_name("pack.txt")
IMAGE_PYTHON = "3.12"  # the image's python3 (tests/device/image.txt)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64")
CARRY_LIMIT = 64 * 2**20  # the working tree and the carried paths of one device call together
ORIGINAL_COMMIT = "11ebe0f6"


def download(wheels: Path, python: str = IMAGE_PYTHON) -> list[Path]:
    """pack.txt's wheels into `wheels` (emptied first: two versions of one package stop an install)."""
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir(parents=True)
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(wheels)]
    command += ["--python-version", python, "--implementation", "cp", "-r", str(PACK)]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    subprocess.run(command, check=True)
    return sorted(wheels.glob("*.whl"))


def export_original(source: Path, commit: str, into: Path) -> int:
    """The original's `src/` at `commit` into `into/src`, from a git directory (a bare mirror too) or a checkout."""
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    git_dir = source if (source / "HEAD").is_file() and (source / "objects").is_dir() else source / ".git"
    if git_dir.is_dir():
        command = ["git", "--git-dir", str(git_dir), "archive", "--format=tar", commit, "src"]
        archive = subprocess.run(command, capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(into, filter="data")
    elif (source / "src" / "esper").is_dir():
        shutil.copytree(source / "src", into / "src", ignore=shutil.ignore_patterns("__pycache__"))
    else:
        raise SystemExit(f"--original {source}: neither a git directory nor a checkout with src/esper; point it at one")
    return sum(path.stat().st_size for path in (into / "src").rglob("*") if path.is_file())


def tree_bytes() -> int:
    """What a device call sends besides the carried paths: the tracked and the untracked, not ignored, files."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    paths = (ROOT / name for name in listed.decode().split("\0") if name)
    return sum(path.stat().st_size for path in paths if path.is_file())


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tests/device/pack.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "device")
    parser.add_argument("--original", type=Path, help="the original esper-lite: a git directory or a checkout")
    parser.add_argument("--commit", default=ORIGINAL_COMMIT, help=f"the original's commit (default {ORIGINAL_COMMIT})")
    parser.add_argument("--python", default=IMAGE_PYTHON, help=f"the image's Python (default {IMAGE_PYTHON})")
    args = parser.parse_args(argv)
    try:
        wheels = download(args.out / "wheels", args.python)
    except subprocess.CalledProcessError as error:
        print(f"pack: pip download failed (exit {error.returncode}); check the pins of {PACK}", file=sys.stderr)
        return 1
    print(f"{len(wheels)} wheels in {args.out / 'wheels'}: {', '.join(path.name for path in wheels)}")
    if args.original is not None:
        try:
            size = export_original(args.original, args.commit, args.out / "original")
        except subprocess.CalledProcessError as error:
            print(f"pack: git archive {args.commit} of {args.original} failed: {error.stderr.decode().strip()}")
            return 1
        print(f"the original's src/ at {args.commit}: {size / 2**20:.1f} MiB in {args.out / 'original'}")
    elif (args.out / "original" / "src").is_dir():
        print(f"the original packed before stays in {args.out / 'original'} (delete it to run without the original)")
    total = tree_bytes() + folder_bytes(args.out)
    print(f"a device call carries {total / 2**20:.1f} MiB of its {CARRY_LIMIT / 2**20:.0f} MiB")
    if total > CARRY_LIMIT:
        print("pack: too large for one device call; drop --original or ignore large untracked files", file=sys.stderr)
        return 1
    carried = args.out.resolve().relative_to(ROOT)
    print(f'device run: command "bash tests/device/on_device.sh", carry ["{carried}"], timeout_s 560')
    return 0


if __name__ == "__main__":
    sys.exit(main())
