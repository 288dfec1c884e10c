"""nox sessions: tests, lint, train, guardrails, bench, baselines, hazards, learning, gpu, torch_versions.

Every session runs inside ONE shared project environment, `.venv`, built on first use with
`pip install -e src/tripwire -e .[dev]` (the harness's own distribution, then the trainer and its tools) and updated
in place when either pyproject.toml changes. torch (a multi-GB wheel) is therefore installed once, not once per
session. `.venv` is also uv's project environment: `uv run ...` finds it and keeps its torch (it reinstalls only the
two editable projects), and an environment `uv run` built first is adopted here (pip is added to it), not rebuilt.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent / "src"))
from tripwire.common.numerics import portable_cpu_env  # torch-free: the one definition of the pin

ROOT = Path(__file__).parent
ENV_DIR = ROOT / ".venv"  # nox's and uv's one environment
STAMP = ENV_DIR / ".pyproject-sha256"
BIN = ENV_DIR / "bin"

# Threads and determinism knobs pinned for every run whose results are compared bitwise.
PINNED_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
    "PYTHONHASHSEED": "0",
}
# The gate also pins the CPU kernel paths (ATen dispatch, oneDNN, MKL) to the AVX2 level, so goldens recorded
# on one x86-64 machine verify bitwise on another (tripwire/common/numerics.py). Benchmarks run at native speed.
GATE_ENV = {**PINNED_ENV, **portable_cpu_env()}

nox.options.sessions = ["lint", "tests"]
nox.options.default_venv_backend = "none"


class _NoUvProbeNotice(logging.Filter):
    """nox probes for uv on every session and logs "uv binary not found." when it is absent, which reads like an
    error; the sessions here never use uv (they run the project env's own pip), so that line is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "uv binary not found."


logging.getLogger("nox").addFilter(_NoUvProbeNotice())


PYPROJECTS = (ROOT / "pyproject.toml", ROOT / "src" / "tripwire" / "pyproject.toml")


def _pyproject_hash() -> str:
    return hashlib.sha256(b"".join(path.read_bytes() for path in PYPROJECTS)).hexdigest()


def project_env(session: nox.Session) -> dict[str, str]:
    """Build (once) the shared environment and return the env vars that put it first on PATH."""
    wanted = _pyproject_hash()
    if not (STAMP.exists() and STAMP.read_text().strip() == wanted):
        if not (BIN / "python").exists():
            session.log(f"building the project environment in {ENV_DIR} (torch is installed once)")
            subprocess.run([sys.executable, "-m", "venv", str(ENV_DIR)], check=True)
        elif subprocess.run([str(BIN / "python"), "-m", "pip", "--version"], capture_output=True).returncode:
            session.log(f"adopting {ENV_DIR} (built by uv): adding pip to it")
            session.run(str(BIN / "python"), "-m", "ensurepip", "-q", external=True)
        else:
            session.log(f"updating the project environment in {ENV_DIR} (pyproject.toml changed)")
        session.run(
            str(BIN / "python"), "-m", "pip", "install", "-q", "-e", "./src/tripwire", "-e", ".[dev]", external=True
        )
        STAMP.write_text(wanted)
    return {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "VIRTUAL_ENV": str(ENV_DIR)}


def run_in_env(session: nox.Session, *args: str, env: dict[str, str] | None = None) -> None:
    merged = project_env(session)
    if env:
        merged.update(env)
    # nox resolves the program with its own PATH, not `env`'s: name the environment's executable explicitly.
    program = BIN / args[0]
    command = (str(program), *args[1:]) if program.exists() else args
    session.run(*command, env=merged, external=True)


@nox.session(tags=["ci"])
def tests(session: nox.Session) -> None:
    """Run the whole test suite (unit, contract and guardrail tests)."""
    run_in_env(session, "python", "-m", "pytest", "-q", *session.posargs, env=GATE_ENV)


SEEDS_COMMAND = (
    "ppo --preset cifar_baseline --task cifar_baseline --rounds 1 --envs 1 --episode-length 5 --telemetry-dir telemetry"
)


@nox.session
def train(session: nox.Session) -> None:
    """Run the trainer on the built-in synthetic task (default: the seeds' validation command); posargs replace it."""
    args = session.posargs or SEEDS_COMMAND.split()
    run_in_env(session, "python", "-m", "esper.scripts.train", *args)


@nox.session(tags=["ci"])
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check, mypy on src/, and the import-linter contracts."""
    run_in_env(session, "ruff", "check", "src", "tests", "benchmarks", "noxfile.py")
    run_in_env(session, "ruff", "format", "--check", "src", "tests", "benchmarks", "noxfile.py")
    run_in_env(session, "mypy", "src")
    run_in_env(session, "lint-imports", "--no-cache")


# The gate's tests: scenarios and hazards, the action contracts, and the "leyline loads no torch" subprocess check.
GATE_PATHS = (
    "tests/guardrails",
    "tests/meta",
    "tests/test_import_isolation.py::test_leyline_loads_no_torch_and_no_other_esper_package",
)


# Short tracebacks, but a failing snapshot's summary of changed event types is never cut off.
GATE_PYTEST_ARGS = ("-q", "--tb=short", "-o", "truncation_limit_lines=60")


def _existing(paths: tuple[str, ...]) -> list[str]:
    return [path for path in paths if (ROOT / path.split("::")[0]).exists()]


# What a base tree records for `--against`: the scenario checks, the static audit and the configuration values, as
# goldens in a scratch dir.
AGAINST_RECORD_PATHS = (
    "tests/guardrails/test_guardrail_scenarios.py",
    "tests/guardrails/test_guardrail_static_audit.py",
    "tests/guardrails/test_guardrail_config.py",
    "tests/guardrails/test_guardrail_loads_without.py",
)


@nox.session(tags=["ci"])
def guardrails(session: nox.Session) -> None:
    """The refactor gate: canonical scenarios vs goldens (telemetry, sync budgets, trajectories) and contracts.

    `-- --against REF` (default REF: the merge-base with main) compares against base tree REF instead of the
    committed goldens: REF is checked out in a git worktree, its scenarios record goldens on this machine, and
    this tree's gate runs against them. That gates bitwise on any machine, whatever goldens it has. The scenarios
    run under coverage.py: every line of src/esper changed since the base (without `--against`: since the
    merge-base with main, when there is a main) must have run under a scenario or check
    (tests/guardrails/exercised_gate.py); with no base at all, what they ran is reported.
    """
    args = list(session.posargs)
    pytest_args = [*GATE_PYTEST_ARGS]
    base = ""
    if "--against" in args:
        position = args.index("--against")
        ref = args[position + 1] if position + 1 < len(args) and not args[position + 1].startswith("-") else ""
        del args[position : position + (2 if ref else 1)]
        base = ref or _merge_base(session)
        pytest_args += _record_base(session, base)
    run_in_env(session, "lint-imports", "--no-cache", env=GATE_ENV)
    env = {**GATE_ENV, "TRIPWIRE_KEEP_VALUES": "1"} if "--tripwire-against" in " ".join(pytest_args) else GATE_ENV
    # The scenarios run under coverage.py, so the gate can say which changed lines none of them ran.
    data = ROOT / "build" / "guardrails" / "coverage" / ".coverage"
    shutil.rmtree(data.parent, ignore_errors=True)
    data.parent.mkdir(parents=True)
    env = {**env, "COVERAGE_FILE": str(data), "COVERAGE_RCFILE": str(ROOT / "pyproject.toml")}
    coverage = ("python", "-m", "coverage", "run", "-m", "pytest")
    run_in_env(session, *coverage, *pytest_args, *_existing(GATE_PATHS), *args, env=env)
    run_in_env(session, "python", "-m", "coverage", "combine", "-q", env=env)
    # Changed lines are judged against the base, or else against the merge-base with main when there is one.
    line_base = base or _main_merge_base()
    resolved = _git("rev-parse", "--verify", "--end-of-options", f"{line_base}^{{commit}}") if line_base else ""
    against = ["--against", resolved] if resolved else []
    run_in_env(session, "python", "tests/guardrails/exercised_gate.py", str(data), *against, env=GATE_ENV)


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"nox > git {' '.join(args)} failed: {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout.strip()


def _main_merge_base() -> str:
    """The merge-base of HEAD with main (origin/main when there is no local main), or "" when there is neither."""
    for branch in ("origin/main", "main"):
        check = subprocess.run(["git", "rev-parse", "--verify", "-q", branch], cwd=ROOT, capture_output=True)
        if check.returncode == 0:
            return _git("merge-base", "HEAD", branch)
    return ""


def _merge_base(session: nox.Session) -> str:
    """The merge-base of HEAD with main, for `--against` without a ref."""
    base = _main_merge_base()
    if not base:
        session.error("--against needs a ref: no main or origin/main here (pass one: --against REF)")
    return base


def _worktree(ref: str, folder: str) -> tuple[str, Path]:
    """`ref` checked out (once) as a detached git worktree under build/<folder>/; returns (sha, path)."""
    sha = _git("rev-parse", "--verify", "--end-of-options", f"{ref}^{{commit}}")
    tree = ROOT / "build" / folder / sha[:12]
    if not (tree / ".git").exists():
        if tree.exists():
            shutil.rmtree(tree)
        _git("worktree", "prune")
        _git("worktree", "add", "--detach", str(tree), sha)
    return sha, tree


def _record_base(session: nox.Session, ref: str) -> list[str]:
    """Check out `ref` in a worktree under build/, record its goldens there; pytest args to compare against them."""
    sha, tree = _worktree(ref, "against")
    goldens = tree.parent / f"{sha[:12]}-goldens"
    if goldens.exists():
        shutil.rmtree(goldens)
    paths = [path for path in AGAINST_RECORD_PATHS if (tree / path).exists()]
    session.log(f"recording base {ref} ({sha[:12]}) goldens on this machine into {goldens}")
    env = {
        **GATE_ENV,
        "PYTHONPATH": str(tree / "src"),  # the base's own trainer and harness, ahead of this tree's editable install
        "CI": "",  # the base writes scratch goldens, never committed ones
        "TRIPWIRE_KEEP_VALUES": "1",  # values beside the scratch goldens: a divergence then says how big it is
    }
    # From the base's own root: a sync site is named relative to the working folder, so recorded from here every base
    # site would read `build/against/<sha>/src/...` and every unchanged line of the head MOVED from there.
    with session.chdir(tree):
        run_in_env(
            session,
            "python",
            "-m",
            "pytest",
            "-q",
            "--tb=short",
            "-p",
            "no:cacheprovider",
            f"--rootdir={tree}",
            "-o",
            f"tripwire_baselines={goldens}",
            "--snapshot-update",
            "--tripwire-update",
            *[str(tree / path) for path in paths],
            env=env,
        )
    return ["-o", f"tripwire_baselines={goldens}", f"--tripwire-against={ref}"]


@nox.session(default=False)
def baselines(session: nox.Session) -> None:
    """Regenerate the goldens on purpose (snapshots, sync budgets, trajectories) and show what changed."""
    if os.environ.get("CI"):
        session.error("refused: CI is set; goldens are regenerated locally and reviewed in the diff, never in CI")
    run_in_env(
        session,
        "python",
        "-m",
        "pytest",
        *GATE_PYTEST_ARGS,
        "tests/guardrails",
        "--snapshot-update",
        "--tripwire-update",
        *session.posargs,
        env=GATE_ENV,
    )
    session.run("git", "status", "--short", "--", "baselines/", external=True)
    session.run("git", "diff", "--stat", "--", "baselines/", external=True)
    session.run("git", "--no-pager", "diff", "--", "baselines/", external=True)


# The torch versions tripwire declares and is tested on (src/tripwire/pyproject.toml: torch>=2.11): the oldest, which
# the GPU machines' image has, and the newest, the project environment's own. CI runs both (.ci/run).
TORCH_VERSIONS = ("2.11.0", "2.12.0", "2.13.0", "2.14.1")  # every minor version tripwire declares (torch>=2.11)
# The trainer's own code that leans on a torch version: its steps around torch's bugs, each shown to crash there
# without its workaround, and its direct SGD step, held to `SGD.step`'s bits and wrapper on each version
TORCH_WORKAROUND_TESTS = ("tests/kasmina/test_group_norm.py", "tests/tolaria/test_optim_steps.py")


@nox.session(default=False, tags=["ci"])
def torch_versions(session: nox.Session) -> None:
    """tripwire's own tests (tests/tripwire) on each torch version it declares (`-- 2.11.0` for some), and the
    trainer's code that leans on a torch version (TORCH_WORKAROUND_TESTS): a version other than the environment's is
    installed beside it once, `pip install --no-deps --target build/torch-<v>`, reusing its CUDA libraries, and put
    first on the path."""
    env = project_env(session)
    installed = subprocess.run(
        [str(BIN / "python"), "-c", "import torch; print(torch.__version__.split('+')[0])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    for version in session.posargs or TORCH_VERSIONS:
        extra: dict[str, str] = {}
        if version != installed:
            target = ROOT / "build" / f"torch-{version}"
            if not (target / "torch" / "__init__.py").exists():
                session.log(f"installing torch {version} beside the environment's {installed} into {target}")
                session.run(
                    str(BIN / "python"), "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    f"torch=={version}", env=env, external=True,
                )  # fmt: skip
            extra["PYTHONPATH"] = str(target)
        session.log(f"tripwire's tests and the trainer's torch-version tests on torch {version}")
        run_in_env(session, "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/tripwire",
                   *TORCH_WORKAROUND_TESTS, env={**GATE_ENV, **extra})  # fmt: skip


@nox.session(default=False)
def gpu(session: nox.Session) -> None:
    """The GPU check (tests/device/check.py): every scenario on the device with the cross-check, bitwise twice, the
    GPU tests, CUDATimer against the wall clock, throughput beside the plain loop (and the original with
    `-- --original PATH/src`), the paired A/A and a 5 % slowdown, the suite's baseline; one folder, one summary
    (`build/gpu`). `-- --device cpu --quick` is the dry run CI makes."""
    args = list(session.posargs)
    if not any(arg.startswith("--device") for arg in args):
        args = ["--device", "cuda", *args]
    run_in_env(session, "python", "tests/device/check.py", *args)


@nox.session(default=False)
def gpu_pack(session: nox.Session) -> None:
    """Before a device session: the wheels the device image lacks (tests/device/pack.txt) into build/device, and
    the original's source with `-- --original GIT_DIR`; prints the one device call to make (tests/device/pack.py)."""
    run_in_env(session, "python", "tests/device/pack.py", *session.posargs)


@nox.session(default=False, tags=["ci"])
def gpu_rehearsal(session: nox.Session) -> None:
    """The device command's dry run here, in an environment of exactly the device image's packages (torch 2.11,
    tests/device/image.txt) with the packed wheels: what a device session would hit, found before it starts."""
    run_in_env(session, "python", "tests/device/rehearse.py", *session.posargs)


@nox.session(default=False, tags=["perf"])
def bench(session: nox.Session) -> None:
    """Throughput benchmarks; `-- --compare baselines/` gates on the committed baseline, `-- --save` records one,
    `-- --ab [REF]` runs the paired A/B of this tree against REF (default: the merge-base with main)."""
    env = {**os.environ, **project_env(session), **PINNED_ENV}
    args = list(session.posargs)
    if "--ab" in args:
        position = args.index("--ab")
        ref = args[position + 1] if position + 1 < len(args) and not args[position + 1].startswith("-") else ""
        del args[position : position + (2 if ref else 1)]
        _, base = _worktree(ref or _merge_base(session), "ab")
        command = [str(BIN / "python"), "-m", "tripwire", "bench-ab", "--base", str(base), "--head", str(ROOT), *args]
    else:
        command = [str(BIN / "python"), "-m", "tripwire.bench", "--suite", "benchmarks", *args]
    session.log(" ".join(command[1:]))
    code = subprocess.run(command, env=env, cwd=ROOT, check=False).returncode
    if code == 2:  # a usage error or a missing/corrupted baseline: keep the tool's exit code (nox would say 1)
        raise SystemExit(2)
    if code:
        session.error(f"bench failed (exit {code}): see the table above and the report it names")


@nox.session(default=False, tags=["ci"])
def hazards(session: nox.Session) -> None:
    """Apply each catalogued refactor hazard to a temporary copy; fail unless its own guardrail catches it."""
    run_in_env(session, "python", "tests/hazards/runner.py", *session.posargs, env=GATE_ENV)


@nox.session(default=False)
def learning(session: nox.Session) -> None:
    """PPO on the impaired synthetic task, 3 seeds x 30 rounds (~10 min on 2 cores): fail unless every seed's
    last 10 rounds beat its first round's mean episode reward. Figures in build/learning.json."""
    Path("build").mkdir(exist_ok=True)
    args = session.posargs or ["--json", "build/learning.json"]
    run_in_env(session, "python", "-m", "esper.scripts.learning", *args, env=PINNED_ENV)
