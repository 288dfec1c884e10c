"""tripwire from outside on CleanRL's SAC as published (`sac_continuous_action.py` and the `cleanrl_utils.buffers`
replay buffer it imports, tests/tripwire/third_party/cleanrl): an off-policy loop, unlike the PPO loops of
test_third_party_loops.py. Three Adam optimizers, a replay buffer sampled with NumPy's global generator, and about 21
host syncs per update step, most of them inside torch (`torch.distributions`' argument checks); Adam's step counters,
read as often, live in host memory and are not counted.

What it must show: every instrument fires and each sync is named where the loop's own code made it; a recording in a
fresh process compares identical; an injected `.item()` is named at its line and nothing else moves; a rewrite that
computes the same bits compares identical; a changed soft-update rate is a value change.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from published_loops import checkout, ran

from tripwire.bitwise.magnitude import VALUE_CHANGE
from tripwire.outside.compare import Comparison, compare_results
from tripwire.outside.record import record, vendor_ops_note
from tripwire.outside.result import Result
from tripwire.scenario import load_scenario

HERE = Path(__file__).parents[1]
PUBLISHED = HERE / "third_party" / "cleanrl"
SAC = PUBLISHED / "sac_continuous_action.py"
SCENARIO_FILE = HERE / "third_party" / "cleanrl_sac_scenario.py"
SCENARIO = load_scenario(SCENARIO_FILE)

LEARNING_STARTS, TOTAL = 300, 600  # the scenario's argv: an update at every step after the first 300
UPDATES = TOTAL - LEARNING_STARTS - 1
QF_LOSS = "            qf_loss = qf1_loss + qf2_loss\n"
INJECTED_ITEM = (QF_LOSS, QF_LOSS + "            seen = qf_loss.item()\n")
COMMUTED = (QF_LOSS, "            qf_loss = qf2_loss + qf1_loss\n")  # IEEE addition commutes: the same bits
TAU = ("    tau: float = 0.005\n", "    tau: float = 0.006\n")


def sac_checkout(folder: Path, *changes: tuple[str, str]) -> Path:
    """A copy of the published SAC script, each change made at its one place, and the buffer package it imports."""
    for old, _ in changes:
        assert SAC.read_text(encoding="utf-8").count(old) == 1, old
    return checkout(folder, SAC, *changes, beside=[PUBLISHED / "cleanrl_utils"])


@pytest.fixture(scope="module")
def sac(tmp_path_factory: pytest.TempPathFactory) -> Result:
    return ran(record(SCENARIO, sac_checkout(tmp_path_factory.mktemp("sac") / "base")))


def compared_with(sac: Result, folder: Path, change: tuple[str, str]) -> tuple[Result, Comparison]:
    """The scenario recorded on a copy with `change` made, and its comparison with the published script's result."""
    head = ran(record(SCENARIO, sac_checkout(folder, change)))
    return head, compare_results(sac, head)


def sites(result: Result) -> Counter[tuple[str, str, str, str]]:
    """(region, file, kind, the line's text) -> count, summed over the lines of the same text."""
    found: Counter[tuple[str, str, str, str]] = Counter()
    for site in result.syncs.records:
        found[site.region, site.file, site.kind, site.text] += site.count
    return found


def test_sac_runs_as_published_with_every_instrument_firing(sac: Result) -> None:
    actor_updates = len([step for step in range(LEARNING_STARTS + 1, TOTAL) if step % 2 == 0]) * 2
    assert sac.calls["cleanrl_utils.buffers:ReplayBuffer.sample"] == UPDATES
    # acting, the target's next actions, the actor's update, the entropy tuning's no-grad pass
    assert sac.calls["__main__:Actor.get_action"] == (TOTAL - LEARNING_STARTS) + UPDATES + 2 * actor_updates
    assert sac.calls["torch.optim:Adam.step"] == UPDATES + 2 * actor_updates  # critics, actor, entropy temperature
    # the three optimizers' roots at their `.step()` lines (the default Adam on CPU), and the setting the script makes
    assert sac.notes == [
        vendor_ops_note(
            [
                "aten.sqrt.default float32 at sac_continuous_action.py:273 via torch/optim/adam.py (3588 calls)",
                "aten.sqrt.default float32 at sac_continuous_action.py:287 via torch/optim/adam.py (2384 calls)",
                "aten.sqrt.default float32 at sac_continuous_action.py:296 via torch/optim/adam.py (298 calls)",
            ]
        ),
        "the loop changed determinism settings: torch.backends.cudnn.deterministic False -> True at "
        "sac_continuous_action.py:180 in <module>",
    ]
    found = sites(sac)
    # the loop's own pulls, at its own lines
    assert found[("<outside>", SAC.name, "item", "alpha = log_alpha.exp().item()")] == 1 + actor_updates  # and setup
    assert found[("<outside>", SAC.name, "cpu", "actions = actions.detach().cpu().numpy()")] == TOTAL - LEARNING_STARTS
    # syncs inside torch and the buffer, named at the loop's line that reached them, in the region around it
    normal = ("actor", SAC.name, "bool", "normal = torch.distributions.Normal(mean, std)")
    assert found[normal] == 2 * sac.calls["__main__:Actor.get_action"]  # loc and scale checked
    # each Adam step reads a step counter per tensor, kept in host memory (`device="cpu"`): no wait, none counted
    assert not any(key[0] == "optimizer" for key in found)
    upload = ("replay", "cleanrl_utils/buffers.py", "tensor_to_device", "return th.tensor(array, device=self.device)")
    assert found[upload] == UPDATES * 5  # observations, actions, next observations, dones, rewards
    assert sum(found.values()) == sac.syncs.total


def test_a_recording_in_a_fresh_process_compares_identical(sac: Result, tmp_path: Path) -> None:
    sac.save(tmp_path / "a")
    command = [
        sys.executable,
        "-m",
        "tripwire",
        "run",
        str(SCENARIO_FILE),
        "--root",
        str(sac_checkout(tmp_path / "tree")),
    ]
    done = subprocess.run([*command, "--out", str(tmp_path / "b")], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    compared = subprocess.run(
        [sys.executable, "-m", "tripwire", "compare", str(tmp_path / "a"), str(tmp_path / "b")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert compared.returncode == 0, compared.stdout[-2000:]
    assert compared.stdout.strip().splitlines()[-1] == "identical"


def test_an_item_injected_in_the_critic_update_is_named_at_its_line_and_nothing_else_moves(
    sac: Result, tmp_path: Path
) -> None:
    head, comparison = compared_with(sac, tmp_path / "head", INJECTED_ITEM)
    syncs = comparison.verdict("syncs")
    assert syncs.status == "differs", syncs.details
    assert f"+{UPDATES} syncs" in syncs.summary and "`seen = qf_loss.item()`" in syncs.summary
    for name in ("trajectory", "telemetry", "payloads"):  # the later lines moved down one; their syncs did not
        assert comparison.verdict(name).status == "same", (name, comparison.verdict(name).details)
    assert head.syncs.total == sac.syncs.total + UPDATES


def test_a_rewrite_that_computes_the_same_bits_compares_identical(sac: Result, tmp_path: Path) -> None:
    _, comparison = compared_with(sac, tmp_path / "head", COMMUTED)
    assert all(verdict.status == "same" for verdict in comparison.verdicts), comparison.verdicts


def test_a_changed_soft_update_rate_is_a_value_change_named_at_its_first_checkpoint(
    sac: Result, tmp_path: Path
) -> None:
    _, comparison = compared_with(sac, tmp_path / "head", TAU)
    trajectory = comparison.verdict("trajectory")
    assert trajectory.status == "differs" and trajectory.kind == VALUE_CHANGE, trajectory.details
    # the first sample and the critics' first step come before the first soft update, so they are bitwise the
    # base's; the first checkpoint after it is the first that differs
    assert trajectory.summary.endswith("at #3 of 9 'Adam.step#151'"), trajectory.summary
    assert comparison.verdict("syncs").status == "same"
