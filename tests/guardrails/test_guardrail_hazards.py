"""Each guardrail catches its hazard: inject it (monkeypatch, or a patched copy of src/) and read the failure.

Every injected run is compared through the same `GoldenStore` code the gate uses, against goldens written
from the session's clean run into a temporary directory, so these tests hold on any machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from guardrail_scenarios import HOT_REGIONS, ROUND_END, SCENARIOS, TWO_ENVS, GateScenario, ScenarioRun, run_scenario

import esper.simic.training.wiring as wiring_module
from esper.simic.rewards import RewardConfig
from esper.simic.rewards.normalizers import RewardNormalizer, RunningMeanStd
from esper.simic.training.trainer import VectorizedPPOTrainer
from esper.simic.training.wiring import BatchSource
from esper.tolaria.engine import VectorizedEngine
from esper.tolaria.governor import RollbackReport, TolariaGovernor
from tripwire.common.errors import SyncBudgetExceeded, TrajectoryDivergence
from tripwire.gates.goldens import GoldenStore
from tripwire.gates.pytest_plugin import GateLog
from tripwire.telemetry.counts import diff_counts, reduce_events
from tripwire.telemetry.snapshot import TelemetrySnapshotExtension

pytestmark = pytest.mark.guardrail

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().relative_to(ROOT).as_posix()

_TRAIN_BATCH = VectorizedEngine.train_batch
_BATCH_SOURCE_CALL = BatchSource.__call__
_RUN_EPOCH = VectorizedPPOTrainer.run_epoch


def _train_batch_with_item(self: VectorizedEngine, env: Any, acc: Any, inputs: Any, targets: Any) -> None:
    """Hazard: a per-env `.item()` inside the train pass (a debugging print left in)."""
    _TRAIN_BATCH(self, env, acc, inputs, targets)
    acc.stats[0].item()


def _batch_source_with_extra_draw(self: BatchSource, round_idx: int, epoch: int) -> Any:
    """Hazard: one more draw from the batch generator before the shuffle consumes it."""
    iterator = _BATCH_SOURCE_CALL(self, round_idx, epoch)
    torch.randint(0, 2, (1,), generator=self.generator)
    return iterator


def _run_epoch_reversed(self: VectorizedPPOTrainer, envs: list[Any], round_idx: int, epoch: int) -> Any:
    """Hazard: the env loop walks the envs in reverse order."""
    return _RUN_EPOCH(self, list(reversed(envs)), round_idx, epoch)


_REWARD_UPDATE = RewardNormalizer.update
_OBS_UPDATE = RunningMeanStd.update


def _reward_update_twice(self: RewardNormalizer, reward: float) -> None:
    """Hazard: the reward normalizer absorbs every reward twice (an update left in a moved helper)."""
    _REWARD_UPDATE(self, reward)
    _REWARD_UPDATE(self, reward)


def _obs_update_twice(self: RunningMeanStd, batch: torch.Tensor) -> None:
    """Hazard: the observation normalizer is updated twice at the end of a round."""
    _OBS_UPDATE(self, batch)
    _OBS_UPDATE(self, batch)


_ROLLBACK = TolariaGovernor.execute_rollback


def _rollback_then_empty_cache(self: TolariaGovernor, epoch: int, reason: str) -> RollbackReport:
    """Hazard: the rollback hands the freed snapshot memory back to the device (`torch.cuda.empty_cache()`, a wait
    for the device and a no-op on a CPU run; the original trainer keeps it out on purpose)."""
    report = _ROLLBACK(self, epoch, reason)
    torch.cuda.empty_cache()
    return report


@dataclass(frozen=True)
class CheaperGermination(RewardConfig):
    """Hazard: one reward constant changed (germination cost -0.02 -> -0.03)."""

    germinate_cost: float = -0.03


def golden_store(tmp_path: Path, name: str, clean: ScenarioRun) -> GoldenStore:
    """A store whose goldens were written from the clean run (update mode), reopened for checking."""
    writer = GoldenStore(tmp_path / "baselines", update=True)
    writer.check_sync_budget(name, clean.counter, clean.trajectory.context, HOT_REGIONS)
    writer.check_trajectory(name, clean.trajectory)
    return GoldenStore(tmp_path / "baselines", update=False)


def diverged_run(store: GoldenStore, name: str, scenario: GateScenario, tmp_path: Path) -> tuple[ScenarioRun, str]:
    """Run `scenario` with the hazard patched in; its run and the trajectory check's failure message."""
    hazard = run_scenario(scenario, tmp_path)
    with pytest.raises(TrajectoryDivergence) as failure:
        store.check_trajectory(name, hazard.trajectory)
    return hazard, str(failure.value)


def budget_failure(tmp_path: Path, name: str, clean: ScenarioRun) -> str:
    """Run scenario `name` with its hazard patched in, against the budget written from its clean run: the message
    the sync budget check fails with."""
    store = golden_store(tmp_path, name, clean)
    hazard = run_scenario(SCENARIOS[name], tmp_path)
    with pytest.raises(SyncBudgetExceeded) as failure:
        store.check_sync_budget(name, hazard.counter, hazard.trajectory.context)
    return str(failure.value)


def test_extra_item_in_per_env_loop_fails_the_budget_naming_region_and_site(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, run_a_baseline: ScenarioRun, gate_log: GateLog
) -> None:
    monkeypatch.setattr(VectorizedEngine, "train_batch", _train_batch_with_item)
    message = budget_failure(tmp_path, "a_baseline", run_a_baseline)
    assert "region 'train_pass': 40 syncs, budget 0 (+40)" in message  # 8 batches x 5 epochs
    assert f"NEW {HERE}:" in message and "in _train_batch_with_item  ×40  [item×40]" in message
    gate_log.add("hazard: .item() in env loop", "a_baseline", "caught", message.splitlines()[1].strip())


def test_emptying_the_cuda_cache_in_the_rollback_fails_the_budget_on_a_cpu_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, run_c_rollback: ScenarioRun, gate_log: GateLog
) -> None:
    monkeypatch.setattr(TolariaGovernor, "execute_rollback", _rollback_then_empty_cache)
    message = budget_failure(tmp_path, "c_rollback", run_c_rollback)
    assert f"NEW {HERE}:" in message and "in _rollback_then_empty_cache  ×1  [cuda_empty_cache×1]" in message
    gate_log.add("hazard: empty_cache in rollback", "c_rollback", "caught", message.splitlines()[1].strip())


def test_changed_rng_consumption_names_the_first_diverging_checkpoint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, run_a_baseline: ScenarioRun, gate_log: GateLog
) -> None:
    store = golden_store(tmp_path, "a_baseline", run_a_baseline)
    monkeypatch.setattr(BatchSource, "__call__", _batch_source_with_extra_draw)
    _, message = diverged_run(store, "a_baseline", SCENARIOS["a_baseline"], tmp_path)
    assert "diverged at checkpoint 1 of 29, 'r0/e1/env0/train'" in message
    assert "first tensor: 'model." in message
    gate_log.add("hazard: RNG order", "a_baseline", "caught", message.splitlines()[0])


def test_dropped_or_duplicated_event_is_named_in_the_snapshot_diff(
    run_a_baseline: ScenarioRun, gate_log: GateLog
) -> None:
    events = run_a_baseline.events
    pruned = next(i for i, e in enumerate(events) if e["event_type"] == "SEED_PRUNED")
    epoch = next(i for i, e in enumerate(events) if e["event_type"] == "EPOCH_COMPLETED")
    dropped = events[:pruned] + events[pruned + 1 :]
    duplicated = [*events[: epoch + 1], events[epoch], *events[epoch + 1 :]]
    extension = TelemetrySnapshotExtension()
    golden = extension.serialize(reduce_events(events, round_end=ROUND_END).to_snapshot())
    for changed, expected in ((dropped, "SEED_PRUNED: 1 -> 0 (-1)"), (duplicated, "EPOCH_COMPLETED: 5 -> 6 (+1)")):
        now = extension.serialize(reduce_events(changed, round_end=ROUND_END).to_snapshot())
        assert not extension.matches(serialized_data=now, snapshot_data=golden)
        diff = "\n".join(extension.diff_lines(now, golden))
        assert diff.startswith("telemetry changed (golden -> now):") and expected in diff
        gate_log.add("hazard: event count", "a_baseline", "caught", expected)


def test_reordered_env_loop_diverges_in_trajectory_and_event_order(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, run_a_two_envs: ScenarioRun, gate_log: GateLog
) -> None:
    clean = run_a_two_envs
    store = golden_store(tmp_path, "a_two_envs", clean)
    monkeypatch.setattr(VectorizedPPOTrainer, "run_epoch", _run_epoch_reversed)
    hazard, message = diverged_run(store, "a_two_envs", TWO_ENVS, tmp_path)
    assert "'r0/e1/env0/train'" in message.splitlines()[0]
    order = diff_counts(
        reduce_events(clean.events, round_end=ROUND_END).to_snapshot(),
        reduce_events(hazard.events, round_end=ROUND_END).to_snapshot(),
    )
    assert any(line.startswith("order of round 0 changed at position") for line in order), order
    gate_log.add("hazard: env loop order", "a_two_envs", "caught", message.splitlines()[0])


def test_changed_reward_constant_diverges_first_at_a_reward(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, run_a_baseline: ScenarioRun, gate_log: GateLog
) -> None:
    store = golden_store(tmp_path, "a_baseline", run_a_baseline)
    monkeypatch.setattr(wiring_module, "RewardConfig", CheaperGermination)
    _, message = diverged_run(store, "a_baseline", SCENARIOS["a_baseline"], tmp_path)
    head = message.splitlines()[0]
    assert head.split(", ")[1].startswith("'r0/e") and "/reward'" in head, head
    gate_log.add("hazard: reward constant", "a_baseline", "caught", head)


@pytest.mark.parametrize(
    ("normalizer", "hazard", "first"),
    [
        ("reward", (RewardNormalizer, "update", _reward_update_twice), "'r0/e1/reward_normalizer'"),
        ("observation", (RunningMeanStd, "update", _obs_update_twice), "'r0/obs_normalizer'"),
    ],
    ids=["reward", "observation"],
)
def test_a_normalizer_updated_twice_is_named_at_the_normalizer_not_the_policy(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    run_a_baseline: ScenarioRun,
    gate_log: GateLog,
    normalizer: str,
    hazard: tuple[type, str, Any],
    first: str,
) -> None:
    store = golden_store(tmp_path, "a_baseline", run_a_baseline)
    monkeypatch.setattr(*hazard)
    _, message = diverged_run(store, "a_baseline", SCENARIOS["a_baseline"], tmp_path)
    head = message.splitlines()[0]
    assert first in head, head
    gate_log.add(f"hazard: {normalizer} normalizer twice", "a_baseline", "caught", head)


def _copy_tree(tmp_path: Path) -> Path:
    """A copy of src/ and pyproject.toml (the import-linter config) to break on purpose."""
    shutil.copytree(ROOT / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_import_back_into_vectorized_breaks_the_named_contract(tmp_path: Path, gate_log: GateLog) -> None:
    tree = _copy_tree(tmp_path)
    batch_ops = tree / "src/esper/simic/training/observations.py"
    batch_ops.write_text(
        batch_ops.read_text() + "\nfrom esper.simic.training import vectorized  # noqa: E402,F401\n", encoding="utf-8"
    )
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--no-cache"], cwd=tree, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode != 0, done.stdout[-2000:]
    assert "extracted training modules never import simic.training.vectorized BROKEN" in done.stdout
    assert "esper.simic.training.observations -> esper.simic.training.vectorized" in done.stdout
    gate_log.add("hazard: import into vectorized", "src copy", "caught", "contract 'extracted-modules' BROKEN")
