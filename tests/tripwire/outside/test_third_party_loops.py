"""tripwire from outside on loops nobody here wrote: CleanRL's `ppo.py` as published and a Stable-Baselines3 PPO run
instrumented inside the installed library. Each silent pass found on them is a test that must fail loudly now:

- an instrument that never fired (the iteration target renamed away) fails the run on one line, and a budget
  refuses the result, instead of every sync counting as set-up that no per-iteration cap sees;
- a per-iteration budget fails when the run marked no iteration, and `compare` tells results whose iteration counts
  or instrument calls differ apart, instead of `identical`;
- state kept in NumPy (SB3's rollout buffer) is digested, so a learning-rate change is a value change, and what a
  capture left out is named;
- an environment under its gym wrappers (SB3's SAC on Pendulum) is digested, so a changed gravity is named;
- a differing logged value (a real `SummaryWriter`, SB3's logger) is measured and classified, not digests only;
- an exclude pattern that matches no field (`data.value` on a `SummaryWriter`, whose field is `data.scalar_value`)
  is named in the result.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest
from published_loops import checkout, ran

from tripwire.bitwise.magnitude import VALUE_CHANGE
from tripwire.outside.commands import budget_main
from tripwire.outside.compare import compare_results
from tripwire.outside.record import record, vendor_ops_note
from tripwire.outside.result import Result
from tripwire.scenario import Iteration, Region, Scenario, load_scenario

HERE = Path(__file__).parents[1]
CLEANRL = HERE / "third_party" / "cleanrl" / "ppo.py"
CLEANRL_SCENARIO_FILE = HERE / "third_party" / "cleanrl_ppo_scenario.py"
CLEANRL_SCENARIO = load_scenario(CLEANRL_SCENARIO_FILE)
SB3_SCRIPT = HERE / "loops" / "sb3_script.py"
SB3_SCENARIO = load_scenario(HERE / "loops" / "sb3_script_scenario.py")

ITERATION_CALL = "next_value = agent.get_value(next_obs)"
# the silent pass found on CleanRL: a bitwise-neutral rename of the iteration target's call, and an injected .item()
RENAMED_AWAY = (ITERATION_CALL, "next_value = agent.critic(next_obs)")
ENTROPY = "                entropy_loss = entropy.mean()\n"
INJECTED_ITEM = (ENTROPY, ENTROPY + "                kl_seen = approx_kl.item()\n")
CLEANRL_LR = ("learning_rate: float = 2.5e-4", "learning_rate: float = 2.6e-4")
# The default Adam on CPU takes its root through MKL's vector math: the script's CPU bits follow the CPU's vendor
ADAM_NOTE = vendor_ops_note(["aten.sqrt.default float32 at ppo.py:290 via torch/optim/adam.py (384 calls)"])
# what the script sets, said by every recording of it (the recording before puts the caller's setting back)
# SB3's own line (its release is not pinned): `self.policy.optimizer.step()` in `PPO.train`
SB3_ADAM_NOTE = re.escape(vendor_ops_note(["SITE"])).replace(
    "SITE",
    re.escape("aten.sqrt.default float32 at stable_baselines3/ppo/ppo.py:")
    + r"\d+"
    + re.escape(" via torch/optim/adam.py (192 calls)"),
)
DETERMINISTIC_NOTE = (
    "the loop changed determinism settings: torch.backends.cudnn.deterministic False -> True at ppo.py:157 in <module>"
)
SB3_LR = ("learning_rate=3e-4", "learning_rate=1e-3")


@pytest.fixture(scope="module")
def cleanrl(tmp_path_factory: pytest.TempPathFactory) -> Result:
    return ran(record(CLEANRL_SCENARIO, checkout(tmp_path_factory.mktemp("cleanrl") / "base", CLEANRL)))


@pytest.fixture(scope="module")
def sb3(tmp_path_factory: pytest.TempPathFactory) -> Result:
    return ran(record(SB3_SCENARIO, checkout(tmp_path_factory.mktemp("sb3") / "base", SB3_SCRIPT)))


def test_cleanrl_runs_as_published_with_every_instrument_firing(cleanrl: Result) -> None:
    assert CLEANRL.read_text().count(ITERATION_CALL) == 1  # the published file, unedited
    assert len(cleanrl.syncs.iterations) == 4 and cleanrl.calls["__main__:Agent.get_value"] == 4
    assert all(count > 0 for count in cleanrl.calls.values()), cleanrl.calls
    # nothing left out, every exclude pattern matched; the one determinism setting the script sets, at its line
    assert cleanrl.notes == [ADAM_NOTE, DETERMINISTIC_NOTE]
    fields = dict(cleanrl.payloads.checkpoints)
    learning_rate = next(name for name in fields if name.endswith("charts/learning_rate"))
    assert sorted(fields[learning_rate]) == ["data.global_step", "data.scalar_value", "event_type"]
    assert not any("data.scalar_value" in fields[name] for name in fields if name.endswith("charts/SPS"))


def test_an_iteration_target_renamed_away_fails_the_run_and_the_budget_on_one_line(tmp_path: Path) -> None:
    """The silent pass on CleanRL: `get_value` no longer called, an `.item()` injected; `run` said `ok` and
    `budget check` exited 0. Now `run` fails on one line naming the target and what was placed on it."""
    base = checkout(tmp_path / "base", CLEANRL)
    head = checkout(tmp_path / "head", CLEANRL, RENAMED_AWAY, INJECTED_ITEM)

    def tripwire(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tripwire", *args]
        return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)

    done = tripwire("run", str(CLEANRL_SCENARIO_FILE), "--root", "base", "--out", "a", "--no-values")
    assert done.returncode == 0, done.stderr[-2000:]
    written = tripwire("budget", "write", "a", "budget.json", "--per-iteration")
    assert written.returncode == 0, written.stderr
    done = tripwire("run", str(CLEANRL_SCENARIO_FILE), "--root", str(head), "--out", "b", "--budget", "budget.json")
    assert done.returncode == 1
    summary = next(line for line in done.stdout.splitlines() if line.startswith("cleanrl-ppo:"))
    assert summary.startswith("cleanrl-ppo: error: instrument never fired: __main__:Agent.get_value [iteration, ")
    assert "checkpoint 'Agent.get_value'" in summary and "was never called" in summary
    checked = tripwire("budget", "check", "b", "budget.json")
    assert checked.returncode == 1 and checked.stdout == ""
    assert checked.stderr.startswith("error: b is a error result (instrument never fired: ")
    assert len(checked.stderr.strip().splitlines()) == 1
    assert Result.load(tmp_path / "b").status == "error"
    assert (base / CLEANRL.name).read_text() == CLEANRL.read_text()


def test_a_per_iteration_budget_fails_when_the_run_marked_no_iteration(
    cleanrl: Result, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The target fires (4 calls) but, closing one every 5th call, never closes an iteration: the cap would check
    nothing."""
    assert CLEANRL_SCENARIO.iteration is not None
    none_marked = dataclasses.replace(
        CLEANRL_SCENARIO, iteration=dataclasses.replace(CLEANRL_SCENARIO.iteration, at="end", every=5)
    )
    result = ran(record(none_marked, checkout(tmp_path / "checkout", CLEANRL)))
    assert result.syncs.iterations == []
    cleanrl.save(tmp_path / "a")
    result.save(tmp_path / "b")
    assert budget_main(["write", str(tmp_path / "a"), str(tmp_path / "budget.json"), "--per-iteration"]) == 0
    capsys.readouterr()
    assert budget_main(["check", str(tmp_path / "b"), str(tmp_path / "budget.json")]) == 1
    out = capsys.readouterr().out
    assert "written from a run of 4 iteration(s) and this run marked 0" in out
    assert budget_main(["check", str(tmp_path / "a"), str(tmp_path / "budget.json")]) == 0  # the cap itself holds
    # a budget that does not record the run's length (written in pytest, or by tripwire 0.4) fails all the same
    from tripwire.sync.budget import SyncBudget, check_budget

    report = check_budget(result.syncs, SyncBudget.from_dict({"per_iteration": {"policy": 80}}))
    assert not report.ok and "it caps each iteration and the run marked none" in report.format()


def test_compare_tells_apart_runs_that_marked_different_iteration_counts(cleanrl: Result, tmp_path: Path) -> None:
    assert CLEANRL_SCENARIO.iteration is not None
    halved = dataclasses.replace(CLEANRL_SCENARIO, iteration=dataclasses.replace(CLEANRL_SCENARIO.iteration, every=2))
    other = ran(record(halved, checkout(tmp_path / "checkout", CLEANRL)))
    comparison = compare_results(cleanrl, other)
    run = comparison.verdict("run")
    assert not comparison.ok and run.status == "differs" and run.kind == "instruments"
    assert run.summary == "iterations: 4 -> 2"
    assert comparison.verdict("trajectory").status == "same"  # everything else agrees: only the marks differ
    cleanrl.save(tmp_path / "a")
    other.save(tmp_path / "b")
    assert budget_main(["write", str(tmp_path / "a"), str(tmp_path / "budget.json")]) == 0
    assert budget_main(["check", str(tmp_path / "b"), str(tmp_path / "budget.json")]) == 1  # totals of a shorter run


def test_a_logged_value_that_changed_is_measured_and_classified(cleanrl: Result, tmp_path: Path) -> None:
    other = ran(record(CLEANRL_SCENARIO, checkout(tmp_path / "checkout", CLEANRL, CLEANRL_LR)))
    verdict = compare_results(cleanrl, other).verdict("payloads")
    assert verdict.status == "differs" and verdict.kind == VALUE_CHANGE, verdict.details
    assert verdict.summary.startswith("value change: max |Δ| 1e-05")
    assert "'charts/learning_rate'" in verdict.summary
    assert any("data.scalar_value: max |Δ| 1e-05" in line for line in verdict.details)


CLEANRL_SPS_PER_MS = (
    'writer.add_scalar("charts/SPS", int(global_step / (time.time() - start_time)), global_step)',
    'writer.add_scalar("charts/SPS", global_step / ((time.time() - start_time) * 1000), global_step)',
)


def test_a_wall_clock_field_in_another_unit_is_told_from_a_slower_run(cleanrl: Result, tmp_path: Path) -> None:
    """CleanRL's steps per second leave the payloads (wall clock), so a rate logged per millisecond changed no
    digest; its scale against the run's seconds did, by 1,000. The same loop recorded again (another wall time) is
    on the same scale."""
    assert cleanrl.clock is not None and list(cleanrl.clock["fields"]) == ["charts/SPS::data.scalar_value"]
    assert cleanrl.clock["fields"]["charts/SPS::data.scalar_value"]["kind"] == "rate"  # by its label
    again = ran(record(CLEANRL_SCENARIO, checkout(tmp_path / "again", CLEANRL)))
    same = compare_results(cleanrl, again)
    assert same.ok and same.verdict("clock").status == "same", same.format()
    per_ms = ran(record(CLEANRL_SCENARIO, checkout(tmp_path / "per_ms", CLEANRL, CLEANRL_SPS_PER_MS)))
    comparison = compare_results(cleanrl, per_ms)
    clock = comparison.verdict("clock")
    assert not comparison.ok and clock.status == "differs" and clock.kind == "unit", comparison.format()
    assert (
        clock.summary.startswith("charts/SPS::data.scalar_value: ")
        and "smaller against the run's wall" in clock.summary
    )
    assert comparison.verdict("payloads").status == "same"  # what the payloads alone said before


def test_an_exclude_pattern_that_matches_nothing_is_named(tmp_path: Path) -> None:
    wrong = dataclasses.replace(CLEANRL_SCENARIO, exclude=["charts/SPS::data.value"])
    result = ran(record(wrong, checkout(tmp_path / "checkout", CLEANRL)))
    assert result.notes == [
        ADAM_NOTE,
        DETERMINISTIC_NOTE,
        "exclude pattern 'charts/SPS::data.value' left out no field of any event: check the label and the field "
        "name (a field is named by the call's own argument, data.NAME)",
    ]


def test_every_exclude_pattern_that_matches_nothing_is_named_in_one_note(tmp_path: Path) -> None:
    wrong = dataclasses.replace(CLEANRL_SCENARIO, exclude=["charts/SPS::data.value", "data.*_mb", "charts/SPS::*"])
    result = ran(record(wrong, checkout(tmp_path / "checkout", CLEANRL)))
    assert result.notes == [
        ADAM_NOTE,
        DETERMINISTIC_NOTE,
        "exclude patterns 'charts/SPS::data.value', 'data.*_mb' left out no field of any event: check the label and "
        "the field name (a field is named by the call's own argument, data.NAME)",
    ]


def test_sb3_rollout_buffer_arrays_are_digested_down_to_its_spaces(sb3: Result) -> None:
    """The buffer's arrays, and inside its gymnasium spaces (objects inside the object) their bounds: nothing is left
    out, so no note of that."""
    specs = sb3.trajectory.specs["PPO.train#1"]
    assert specs["self.rollout_buffer.observations"] == "float32[64,4]"  # flattened by the update
    assert specs["self.rollout_buffer.advantages"] == "float32[64,1]"
    assert specs["self.rollout_buffer.observation_space.low"] == "float32[4]"
    # its Adam's root, at the library's own `optimizer.step()` line, named as on any machine (not by site-packages)
    [note] = sb3.notes
    assert re.fullmatch(SB3_ADAM_NOTE, note), note
    assert len(sb3.syncs.iterations) == 4


def test_sb3_learning_rate_change_is_a_value_change_in_numpy_state_and_in_the_logger(
    sb3: Result, tmp_path: Path
) -> None:
    """The silent pass on SB3: the buffer's arrays were not digested, so this compared `identical`."""
    other = ran(record(SB3_SCENARIO, checkout(tmp_path / "checkout", SB3_SCRIPT, SB3_LR)))
    comparison = compare_results(sb3, other)
    trajectory = comparison.verdict("trajectory")
    assert trajectory.kind == VALUE_CHANGE and "'PPO.train#2'" in trajectory.summary, trajectory.details
    assert any("self.rollout_buffer.values" in line for line in trajectory.details)
    payloads = comparison.verdict("payloads")
    assert payloads.kind == VALUE_CHANGE and "'train/learning_rate'" in payloads.summary, payloads.details


def test_sb3_an_instrument_on_a_method_learning_never_calls_fails_the_run(tmp_path: Path) -> None:
    regions = [*SB3_SCENARIO.regions, Region("stable_baselines3.common.policies:BasePolicy.predict", "predict")]
    result = record(dataclasses.replace(SB3_SCENARIO, regions=regions), checkout(tmp_path / "checkout", SB3_SCRIPT))
    assert result.status == "error" and "\n" not in result.cause
    assert result.cause.startswith(
        "instrument never fired: stable_baselines3.common.policies:BasePolicy.predict [region 'predict'] was never "
        "called"
    )


def test_an_instrument_renamed_by_an_adapter_keeps_its_name_in_the_calls(tmp_path: Path) -> None:
    """`calls` are kept under the scenario's names, so a tree an adapter renamed compares with one it did not."""
    from tripwire.scenario import Adapter

    folder = checkout(
        tmp_path / "checkout",
        CLEANRL,
        ("def get_value(self, x)", "def value_of(self, x)"),
        ("agent.get_value(", "agent.value_of("),
    )
    adapter = Adapter(targets={"__main__:Agent.get_value": "__main__:Agent.value_of"})
    scenario: Scenario = dataclasses.replace(
        CLEANRL_SCENARIO, adapters=[adapter], iteration=Iteration("__main__:Agent.get_value")
    )
    result = ran(record(scenario, folder))
    assert result.calls["__main__:Agent.get_value"] == 4 and "__main__:Agent.value_of" not in result.calls


def test_the_context_names_the_loops_own_libraries(sb3: Result) -> None:
    from tripwire.common.context import mismatches

    packages = sb3.context["packages"]
    assert {"stable_baselines3", "gymnasium", "numpy", "torch"} <= set(packages)
    assert "tripwire-gate" not in packages
    older = {**sb3.context, "packages": {**packages, "gymnasium": "0.28.0"}}
    assert mismatches(older, sb3.context) == [f"packages.gymnasium: '0.28.0' -> {packages['gymnasium']!r}"]


SB3_SAC_SCRIPT = HERE / "loops" / "sb3_sac_script.py"
SB3_SAC_SCENARIO = load_scenario(HERE / "loops" / "sb3_sac_script_scenario.py")


def test_sb3_sac_capture_reaches_the_environment_under_its_wrappers(tmp_path: Path) -> None:
    """SB3 keeps the environment under a vector env, a list and four gym wrappers (Monitor, TimeLimit,
    OrderEnforcing, PassiveEnvChecker), each holding the next in `env`. Counted a level each, Pendulum's state lay
    past the capture's depth, and every capture of the algorithm named it left out. Two runs compare identical with it
    digested (Monitor's wall-clock fields excluded), and a changed gravity is a value change in that state."""
    base = ran(record(SB3_SAC_SCENARIO, checkout(tmp_path / "a", SB3_SAC_SCRIPT)))
    env = "self.env.envs.0.env.env.env.env"
    specs = base.trajectory.specs["SAC.train#1"]
    assert specs[f"{env}.state"] == "float64[2]" and specs[f"{env}.g"] == "float"
    assert not any("deeper than" in note for note in base.notes), base.notes
    again = ran(record(SB3_SAC_SCENARIO, checkout(tmp_path / "b", SB3_SAC_SCRIPT)))
    assert compare_results(base, again).verdict("trajectory").status == "same"
    lighter = ran(record(SB3_SAC_SCENARIO, checkout(tmp_path / "c", SB3_SAC_SCRIPT, ("g=10.0", "g=9.0"))))
    trajectory = compare_results(base, lighter).verdict("trajectory")
    assert trajectory.kind == VALUE_CHANGE and "'SAC.train#1'" in trajectory.summary, trajectory.details
    plain = f"  plain values that differ: {env}.g 10.0 -> 9.0, {env}.spec.kwargs.g 10.0 -> 9.0, "
    assert any(line.startswith(plain) for line in trajectory.details), trajectory.details
