"""The device command's dress rehearsal, here: `nox -s gpu_rehearsal` (CI runs it).

    python tests/device/rehearse.py [--work build/rehearsal] [--original GIT_DIR_OR_CHECKOUT] [-- check.py options]

A device session has about 15 minutes, and the image it runs in is not ours: torch 2.11, the packages of
tests/device/image.txt, nothing fetched, nothing of the project installed. A missing wheel or an import the image
cannot satisfy would spend those minutes on a traceback. This runs the same command on this machine's CPU in an
environment built to hold what the image holds, and no more:

1. a virtual environment whose site-packages links, from the running environment, exactly the distributions
   image.txt names (nothing of esper, tripwire, or anything else installed here), with torch and torchvision at the
   image's versions (installed once with `pip install --no-deps --target build/<name>-<version>`, as
   `nox -s torch_versions` installs other torches);
2. `tests/device/pack.py` into `<work>/pack`, as a developer makes it before a device session;
3. `bash tests/device/on_device.sh --quick` with that environment's python and `DEVICE=cpu`, as the device runs it;
4. every step of the check must pass, and the archive must hold the summary.

Exits 0 when it did, 1 with the failing step named.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMAGE = Path(__file__).with_name("image.txt")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def image_packages() -> tuple[set[str], dict[str, str]]:
    """image.txt: the names of the image's distributions, and the pinned ones (torch's and torchvision's version)."""
    names: set[str] = set()
    pinned: dict[str, str] = {}
    for line in IMAGE.read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        name, _, version = line.partition("==")
        names.add(_normal(name))
        if version:
            pinned[_normal(name)] = version
    return names, pinned


def pinned_install(name: str, version: str) -> Path:
    """`name==version` in its own folder beside the environment (installed once, reused)."""
    target = ROOT / "build" / f"{name}-{version}"
    if not (target / name / "__init__.py").exists():
        print(f"installing {name} {version} into {target}", flush=True)
        command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target)]
        subprocess.run([*command, f"{name}=={version}"], check=True)
    return target


def _top_level(dist: importlib.metadata.Distribution) -> set[str]:
    """The entries a distribution puts directly in site-packages (its packages, modules, dist-info, .pth files)."""
    files = dist.files or []
    return {file.parts[0] for file in files if file.parts and file.parts[0] not in ("..", "__pycache__")}


def build_image(env_dir: Path) -> Path:
    """A virtual environment that imports what the image imports; returns its python."""
    names, pinned = image_packages()
    shutil.rmtree(env_dir, ignore_errors=True)
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    here = Path(importlib.metadata.distribution("pip").locate_file(""))
    linked: set[str] = set()
    for dist in importlib.metadata.distributions():
        name = _normal(dist.metadata["Name"] or "")
        if name not in names or name in pinned or Path(dist.locate_file("")) != here:
            continue
        for entry in _top_level(dist):
            source = here / entry
            if source.exists() and not (site / entry).exists():
                (site / entry).symlink_to(source)
        linked.add(name)
    for name, version in pinned.items():
        target = pinned_install(name, version)
        for entry in target.iterdir():
            if entry.name != "bin" and not (site / entry.name).exists():
                (site / entry.name).symlink_to(entry)
        linked.add(name)
    print(f"image environment {env_dir}: {len(linked)} of image.txt's {len(names)} distributions linked")
    return python


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tests/device/rehearse.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "rehearsal")
    parser.add_argument("--original", type=Path, help="also pack the original (a git directory or a checkout)")
    parser.add_argument("check", nargs="*", help="check.py's options after --quick (e.g. --steps sync tests)")
    args = parser.parse_args(argv)
    python = build_image(args.work / "image")
    _, pinned = image_packages()
    probe = (
        "import importlib.util as u, torch; "
        "print(torch.__version__.split('+')[0], *[n for n in ('syrupy', 'esper', 'tripwire') if u.find_spec(n)])"
    )
    seen = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=False, cwd=args.work)
    if seen.stdout.split() != [pinned["torch"]]:
        print(f"rehearsal: the image's environment is not the image's: {seen.stdout.strip()} {seen.stderr[-300:]}")
        return 1  # torch at another version, or something the image lacks (the project, the packed wheels) leaked in
    print(f"the image's python: torch {pinned['torch']}, without syrupy, esper or tripwire (as on the image)")
    pack = [sys.executable, str(ROOT / "tests" / "device" / "pack.py"), "--out", str(args.work / "pack")]
    if subprocess.run(pack + (["--original", str(args.original)] if args.original else []), check=False).returncode:
        print("rehearsal: packing failed (above)", file=sys.stderr)
        return 1
    out = args.work / "out"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(args.work / "gpu", ignore_errors=True)
    env = {**os.environ, "PY": str(python), "PACK": str(args.work / "pack"), "DEVICE": "cpu", "OUT": str(out)}
    env["GPU_OUT"] = str(args.work / "gpu")  # not build/gpu, which may hold a real device run
    env = {key: value for key, value in env.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["OMP_NUM_THREADS"] = "1"
    command = ["bash", str(ROOT / "tests" / "device" / "on_device.sh"), "--quick", *args.check]
    code = subprocess.run(command, cwd=ROOT, env=env, check=False).returncode
    archive = out / "gpu.tar.gz"
    if not archive.is_file():
        print(f"rehearsal: on_device.sh exited {code} and left no {archive}", file=sys.stderr)
        return 1
    with tarfile.open(archive) as tar:
        summary = tar.extractfile("gpu/summary.json")
        results = json.loads(summary.read()) if summary is not None else {}
    failed = [f"{step}: {result.get('detail')}" for step, result in results.items() if result.get("status") != "passed"]
    if code or failed or not results:
        print(f"rehearsal: on_device.sh exited {code}; not passed: {failed or 'no steps'}", file=sys.stderr)
        return 1
    print(f"rehearsal passed: {len(results)} steps in the image's environment; {archive}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
