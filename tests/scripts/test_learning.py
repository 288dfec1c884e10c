"""`python -m esper.scripts.learning`: its verdict passes only on a real rise, and it runs the trainer for real.

The full check (3 seeds x 30 rounds, ~5 minutes per seed) is `nox -s learning`; here the verdict logic is
checked on hand-made figures, and a 2-round, 1-seed run goes through the real trainer in a spawned process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esper.scripts import learning
from esper.scripts.learning import SeedRun, judge, report


def _run(seed: int, rewards: list[float]) -> SeedRun:
    return SeedRun(
        seed=seed,
        rewards=rewards,
        accuracies=[30.0] * len(rewards),
        fossilizes=[0.0] * len(rewards),
        seconds=60.0,
    )


def test_the_late_window_is_compared_with_the_first_round() -> None:
    verdict = judge(_run(1, [1.0, 0.0, 5.0, 7.0]), window=2)
    assert (verdict.first, verdict.late, verdict.improved) == (1.0, 6.0, True)


def test_the_window_never_includes_the_first_round() -> None:
    verdict = judge(_run(1, [3.0, 2.0]), window=10)
    assert (verdict.late, verdict.improved) == (2.0, False)


def test_the_report_fails_when_any_seed_did_not_improve() -> None:
    text, ok = report([_run(1, [1.0, 2.0, 3.0]), _run(2, [4.0, 1.0, 2.0])], window=2)
    assert not ok
    assert "FAIL: no improvement for seed(s) 2" in text
    text, ok = report([_run(1, [1.0, 2.0, 3.0]), _run(2, [0.5, 1.0, 2.0])], window=2)
    assert ok
    assert "PASS" in text


def test_a_flat_run_does_not_pass() -> None:
    _, ok = report([_run(7, [2.0] * 12)], window=10)
    assert not ok


def test_one_round_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert learning.main(["--rounds", "1"]) == 2
    assert "--rounds must be at least 2" in capsys.readouterr().err


def test_bad_flags_exit_2_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        learning.main(["--window", "0"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("learning: error: argument --window: expected a positive integer, got 0")
    assert err.count("\n") == 1


def test_bad_overrides_are_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert learning.main(["--override", "[1]"]) == 2
    assert learning.main(["--override", "{nope"]) == 2
    assert learning.main(["--override", '{"n_envz": 2}']) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3
    assert "unknown config key(s) 'n_envz'" in err[2]


def test_bad_seeds_values_and_json_paths_are_refused_before_any_worker_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert learning.main(["--seeds", "1", "-5", "--rounds", "2"]) == 2
    assert learning.main(["--override", '{"lr": -1}', "--rounds", "2"]) == 2
    assert learning.main(["--json", str(tmp_path / "missing" / "figures.json"), "--rounds", "2"]) == 2
    assert learning.main(["--json", str(tmp_path), "--rounds", "2"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "learning: error: --seed must be >= 0, got -5",
        "learning: error: --lr must be > 0, got -1.0",
        f"learning: error: --json {tmp_path / 'missing' / 'figures.json'}: its folder does not exist: pass a file "
        "path in an existing folder",
        f"learning: error: --json {tmp_path}: is a folder: pass a file path in an existing folder",
    ]


def test_a_short_real_run_writes_its_figures(tmp_path: Path) -> None:
    small = {"n_envs": 2, "train_samples": 100, "val_samples": 50, "max_epochs": 3}  # seconds, not minutes
    out = tmp_path / "figures.json"
    args = ["--seeds", "3", "--rounds", "2", "--window", "1", "--jobs", "1", "--json", str(out)]
    code = learning.main([*args, "--override", json.dumps(small)])
    assert code in (0, 1)  # two tiny rounds decide nothing; the figures must be real
    saved = json.loads(out.read_text())
    (run,) = saved["runs"]
    assert run["seed"] == 3
    assert len(run["rewards"]) == len(run["accuracies"]) == len(run["fossilizes"]) == 2
    assert saved["config"]["n_envs"] == 2
    assert not list(tmp_path.glob("*.tmp"))
