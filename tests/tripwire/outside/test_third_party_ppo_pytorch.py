"""PPO-PyTorch's `PPO.py` as published (github.com/nikhilbarhate99/PPO-PyTorch, 728cce8), driven by its `train.py`
loop on CartPole (`examples/ppo-pytorch/ppo_run.py`) and recorded from outside with `examples/ppo-pytorch`'s scenario:
a loop none of tripwire's rules were written for.

Every sync a GPU run of it makes, and nothing else, is what the CPU run reports, site by site:

- `torch.FloatTensor(state).to(device)` each step: a pageable host tensor uploaded, blocking (`to_device`);
- `action.item()` each step, and the two checks `Categorical` runs with torch's default argument validation
  (`Distribution.__init__`'s `if not valid.all()` and `log_prob`'s `_validate_sample`), each a `bool` of a device
  tensor: each step, and in each of an update's epochs;
- `torch.tensor(rewards, ...).to(device)` once an update;
- the two policies' `.to(device)` at setup, 12 tensors each.

Not a sync on a GPU, and not counted: `torch.stack(self.buffer.states).detach().to(device)` (device tensors already)
and `policy_old.load_state_dict(policy.state_dict())` (device to device).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from published_loops import checkout, ran

from tripwire.outside.compare import compare_results
from tripwire.outside.record import record
from tripwire.outside.result import Result
from tripwire.scenario import Scenario, load_scenario

pytest.importorskip("gymnasium", reason="gymnasium is a test dependency (pyproject.toml's test extra)")

HERE = Path(__file__).parents[1]
PPO_PY = HERE / "third_party" / "ppo_pytorch" / "PPO.py"
EXAMPLE = HERE.parents[1] / "examples" / "ppo-pytorch"
SCENARIO: Scenario = load_scenario(EXAMPLE / "ppo_scenario.py")
STEPS, UPDATES, EPOCHS = 1211, 3, 10  # the driver's episodes run on past 1,200 steps to the end of the last one


def _tree(folder: Path, *changes: tuple[str, str]) -> Path:
    """PPO.py (with `changes`) and the driver beside it, as the scenario's `--root`."""
    checkout(folder, PPO_PY, *changes)
    shutil.copy(EXAMPLE / "ppo_run.py", folder / "ppo_run.py")
    return folder


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Result:
    return ran(record(SCENARIO, _tree(tmp_path_factory.mktemp("ppo_pytorch") / "base")))


def test_the_cpu_run_reports_a_gpu_runs_syncs_site_by_site(base: Result) -> None:
    assert base.syncs is not None
    sites = {(site.region, site.line, site.kind): site.count for site in base.syncs.records}
    assert sites == {
        ("<outside>", 138, "to_device"): 12,  # self.policy = ActorCritic(...).to(device)
        ("<outside>", 144, "to_device"): 12,  # self.policy_old = ...
        ("act", 190, "to_device"): STEPS,  # state = torch.FloatTensor(state).to(device)
        ("act", 198, "item"): STEPS,  # return action.item()
        ("act", 94, "bool"): STEPS,  # dist = Categorical(action_probs)
        ("act", 97, "bool"): STEPS,  # action_logprob = dist.log_prob(action)
        ("update", 116, "bool"): UPDATES * EPOCHS,  # the same two in evaluate(), each epoch
        ("update", 117, "bool"): UPDATES * EPOCHS,
        ("update", 211, "to_device"): UPDATES,  # rewards = torch.tensor(rewards, ...).to(device)
    }
    assert base.trajectory is not None and len(base.trajectory) == UPDATES


def test_two_runs_compare_identical(base: Result, tmp_path: Path) -> None:
    comparison = compare_results(base, ran(record(SCENARIO, _tree(tmp_path / "again"))))
    assert comparison.ok, comparison.format()


def test_an_item_read_in_the_update_is_named_at_its_line_and_nothing_else_moves(base: Result, tmp_path: Path) -> None:
    read = ("            loss.mean().backward()\n",
            "            loss.mean().backward()\n            seen = loss.mean().item()\n")  # fmt: skip
    comparison = compare_results(base, ran(record(SCENARIO, _tree(tmp_path / "item", read))))
    syncs = comparison.verdict("syncs")
    assert syncs.summary.startswith(f"+{UPDATES * EPOCHS} syncs; NEW   'update' PPO.py:245 in PPO.update"), (
        syncs.summary
    )
    assert comparison.verdict("trajectory").status == "same", comparison.format()


def test_a_changed_entropy_bonus_is_a_value_change_from_the_first_update(base: Result, tmp_path: Path) -> None:
    bonus = ("- 0.01 * dist_entropy", "- 0.02 * dist_entropy")
    trajectory = compare_results(base, ran(record(SCENARIO, _tree(tmp_path / "bonus", bonus)))).verdict("trajectory")
    assert trajectory.status == "differs" and trajectory.kind == "value change", trajectory.details
    assert f"#1 of {UPDATES} 'PPO.update#1'" in trajectory.summary, trajectory.summary
