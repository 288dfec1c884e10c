"""Bad arguments: one-line errors and exit code 2, never a traceback; fuzzed parser and config loader.

tests/scripts/test_train.py and test_heuristic_cli.py already cover unknown preset, task, slot, reward mode
and device, `--envs 0`, and config-json with unknown keys, wrong types or bad choices; this file adds the
remaining bounds and the fuzzers.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from esper.leyline import SlotConfig, get_task_spec
from esper.scripts import train
from esper.simic.training.config import PRESETS, ConfigError, TrainingConfig
from esper.simic.training.outputs import claim_outputs
from esper.tolaria.devices import resolve_devices

FUZZ = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DOCUMENTED = train._user_errors()


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    try:
        code = train.main(list(argv))
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    return code, capsys.readouterr().err


def assert_usage_error(code: int, err: str, needle: str) -> None:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("train: error:"), err
    assert needle in lines[0], err


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--rounds", "0"), ("--rounds", "-1"), ("--episode-length", "0"), ("--episode-length", "-3"), ("--envs", "-2")],
)
def test_zero_or_negative_loop_sizes_exit_2_in_one_line(
    capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    assert_usage_error(*run_main(capsys, "ppo", flag, value), f"expected a positive integer, got {int(value)}")


@pytest.mark.parametrize(
    ("document", "needle"),
    [
        ({"n_episodes": 0}, "--rounds must be a positive integer, got 0"),
        ({"max_epochs": -1}, "--episode-length must be a positive integer, got -1"),
        ({"n_envs": 2.5}, "'n_envs' must be an integer"),
        ({"slots": ["r0c1", 3]}, "'slots' must be a list of str"),
    ],
)
def test_config_json_with_bad_loop_sizes_or_types_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], document: dict[str, Any], needle: str
) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(document))
    assert_usage_error(*run_main(capsys, "ppo", "--config-json", str(path)), needle)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b'{"lr": NaN}', "'lr' must be a finite number"),
        (b'{"clip_ratio": Infinity}', "'clip_ratio' must be a finite number"),
        (b"\xff\xfe{}", "is not UTF-8 text"),
        (b"[" * 100_000, "nests too deeply"),
    ],
)
def test_config_json_that_is_non_finite_binary_or_too_deep_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, needle: str
) -> None:
    path = tmp_path / "c.json"
    path.write_bytes(content)
    assert_usage_error(*run_main(capsys, "ppo", "--config-json", str(path)), needle)


def test_config_json_that_is_a_device_a_fifo_or_too_large_exits_2_without_reading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    from esper.simic.training.config import CONFIG_FILE_LIMIT_BYTES

    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # reading it would block forever
    large = tmp_path / "large.json"
    large.write_bytes(b" " * (CONFIG_FILE_LIMIT_BYTES + 1))
    for path, needle in [
        ("/dev/zero", "is not a regular file (a folder, FIFO or device)"),  # reading it would never end
        (str(fifo), "is not a regular file (a folder, FIFO or device)"),
        (str(large), f"over the limit of {CONFIG_FILE_LIMIT_BYTES} (CONFIG_FILE_LIMIT_BYTES)"),
    ]:
        assert_usage_error(*run_main(capsys, "ppo", "--config-json", path), needle)


def test_a_closed_stdout_after_a_completed_run_ends_quietly_with_its_exit_code(tmp_path: Path) -> None:
    """`train ... | head -c 0`: the reader is gone when the done line is printed; the run is saved, so exit 0."""
    import subprocess
    import sys

    tiny = ["--rounds", "1", "--envs", "1", "--train-samples", "50", "--val-samples", "25", "--batch-size", "25"]
    command = [sys.executable, "-m", "esper.scripts.train", "heuristic", *tiny]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # as `| head -c 0` does
    err = process.stderr.read().decode()
    assert process.wait(timeout=600) == 0, err
    assert "BrokenPipe" not in err and "Traceback" not in err


def test_a_non_finite_learning_rate_flag_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert_usage_error(*run_main(capsys, "ppo", "--lr", "nan"), "argument --lr: expected a finite number, got nan")


def test_an_inductor_mode_without_inductor_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert_usage_error(
        *run_main(capsys, "ppo", "--compile", "aot_eager", "--compile-mode", "max-autotune"),
        "--compile-mode max-autotune is inductor's: add --compile inductor or --compile-step inductor, or drop "
        "--compile-mode",
    )
    assert_usage_error(
        *run_main(capsys, "heuristic", "--compile-step", "aot_eager", "--compile-mode", "reduce-overhead"),
        "--compile-mode reduce-overhead is inductor's: add --compile inductor or --compile-step inductor, or drop "
        "--compile-mode",
    )


# ---- fuzzing: no exception other than the documented one-line errors escapes ----

FLAGS = [
    "--task", "--slots", "--seed", "--device", "--devices", "--telemetry-dir", "--telemetry-level", "--run-name",
    "--rounds", "--envs", "--episode-length", "--max-seeds", "--train-samples", "--val-samples", "--batch-size",
    "--dataset", "--data-dir", "--gpu-preload", "--save", "--resume", "--reward-mode", "--quiet", "--preset",
    "--config-json", "--amp", "--compile", "--compile-mode", "--compile-step", "--ppo-epochs", "--memory-size",
    "--entropy-anneal-episodes", "--lr", "--overwrite", "--no-gpu-preload", "--no-overwrite",
]  # fmt: skip
PLAUSIBLE = [
    "cifar_baseline", "cifar_minimal", "r0c0", "r0c1", "r1c2", "r9c9", "cpu", "cuda", "cuda:3", "shaped", "sparse",
    "off", "debug", "synthetic", "cifar10", "bfloat16", "nan", "inf", "-0", "1e3", "cifar_baseline_stable", "",
    "../x", "/", "a/b", ".", "..", "out", "out/ck.pt", "notes.txt", "notes.txt/ck.pt", "/dev/null", "x\x00y",
]  # fmt: skip


def _not_help(token: str) -> bool:
    """Tokens argparse would read as --help (exit 0 and a page of usage) are not bad input."""
    return not (token.startswith("-h") or (len(token) >= 3 and "--help".startswith(token.split("=")[0])))


TOKENS = st.one_of(
    st.sampled_from(FLAGS),
    st.sampled_from(PLAUSIBLE),
    st.integers(min_value=-(10**12), max_value=10**12).map(str),
    st.floats(allow_nan=True).map(repr),
    st.text(max_size=12).filter(_not_help),
)
FLAG_VALUE_PAIRS = st.lists(st.tuples(st.sampled_from(FLAGS), TOKENS), max_size=5).map(
    lambda pairs: [token for pair in pairs for token in pair]
)
ARGV = st.tuples(
    st.sampled_from(["ppo", "heuristic", "ppo", "bogus", "--quiet"]), st.lists(TOKENS, max_size=10) | FLAG_VALUE_PAIRS
)


def _pre_run_checks(config: TrainingConfig) -> None:
    """What run_training checks before any work: output paths (claimed, then let go), task, slot ids, devices."""
    claim_outputs(config).release()
    get_task_spec(config.task)
    SlotConfig(tuple(config.slots))
    resolve_devices(config.device, config.devices)


def _one_line(message: str) -> bool:
    return bool(message.strip()) and "\n" not in message.strip()


@pytest.mark.slow
@FUZZ
@given(ARGV)
def test_fuzzed_command_lines_end_in_a_config_or_a_one_line_error(
    fuzz_cwd: Path, argv_parts: tuple[str, list[str]]
) -> None:
    argv = [argv_parts[0], *argv_parts[1]]
    stderr = io.StringIO()
    (fuzz_cwd / "notes.txt").write_text("notes\n")  # a file that is not a checkpoint, for --save to meet
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            args = train.build_parser().parse_args(argv)
        config = train.config_from_args(args)
        assert isinstance(config, TrainingConfig)
        _pre_run_checks(config)
    except SystemExit as exit_:
        assert exit_.code == 2, (argv, stderr.getvalue())
        assert stderr.getvalue().startswith("train: error:") and _one_line(stderr.getvalue()), (argv, stderr.getvalue())
    except DOCUMENTED as error:
        assert _one_line(str(error)), (argv, str(error))


@pytest.fixture(scope="module")
def fuzz_cwd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Fuzzed relative output paths are created here, not in the checkout."""
    root = tmp_path_factory.mktemp("fuzz_cwd")
    with contextlib.chdir(root):
        yield root


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=6,
)
FIELD_NAMES = [name for name in TrainingConfig.__dataclass_fields__]
DOCUMENTS = st.dictionaries(st.sampled_from(FIELD_NAMES) | st.text(max_size=8), JSON_VALUES, max_size=6)


@pytest.mark.slow
@FUZZ
@given(DOCUMENTS, st.sampled_from([None, *PRESETS]))
def test_fuzzed_config_dicts_load_or_raise_one_line_config_errors(data: dict[str, Any], preset: str | None) -> None:
    base = TrainingConfig.from_dict(PRESETS[preset]) if preset else None
    try:
        config = TrainingConfig.from_dict(data, base=base)
    except ConfigError as error:
        assert _one_line(str(error)), (data, str(error))
        return
    assert isinstance(config, TrainingConfig)
    loaded = config.to_dict()  # JSON values again: tuples as lists, enums as the names the JSON used
    assert all(loaded[key] == value for key, value in data.items())


FILE_CONTENTS = st.one_of(
    st.binary(max_size=64),
    DOCUMENTS.map(json.dumps).map(str.encode),
    JSON_VALUES.map(json.dumps).map(str.encode),
    st.text(max_size=40).map(str.encode),
)


@pytest.fixture(scope="module")
def fuzz_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "config.json"


@pytest.mark.slow
@FUZZ
@given(content=FILE_CONTENTS)
def test_fuzzed_config_files_load_or_raise_one_line_config_errors(fuzz_file: Path, content: bytes) -> None:
    fuzz_file.write_bytes(content)
    try:
        config = TrainingConfig.from_json_file(fuzz_file)
    except ConfigError as error:
        assert _one_line(str(error)), (content, str(error))
        return
    assert isinstance(config, TrainingConfig)
