"""tripwire on a loop it does not own: a script-style PPO loop in CleanRL's shape, instrumented entirely from outside.

The loop (`loops/ppo_script.py`) is never edited; each test copies it into a folder of its own, a variant of the
copy carries one injected change, and the scenario file (`loops/ppo_script_scenario.py`) places every instrument by
name. Results are recorded in this process with `tripwire.outside.record.record`, as `python -m tripwire run` does.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tripwire.bitwise.magnitude import DRIFT, DRIFT_SCALE_ULPS, VALUE_CHANGE
from tripwire.outside.compare import compare_results
from tripwire.outside.record import record
from tripwire.outside.result import Result
from tripwire.scenario import Checkpoint, EventCall, Region, Scenario, load_scenario

LOOPS = Path(__file__).parents[1] / "loops"
SCRIPT = LOOPS / "ppo_script.py"
SCENARIO = load_scenario(LOOPS / "ppo_script_scenario.py")
SHIPPED = SCRIPT.read_bytes()

# One injected change per variant: (text in the loop, its replacement).
INJECTED_ITEM = (
    "                entropy_loss = entropy.mean()\n",
    "                entropy_loss = entropy.mean()\n                kl_seen = approx_kl.item()\n",
)
RENAMED = ("self.critic", "self.value_head")
REGROUPED = (
    "delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam",
    "delta + args.gamma * (args.gae_lambda * (nextnonterminal * lastgaelam))",
)
CHANGED_COEFFICIENT = ("vf_coef: float = 0.5", "vf_coef: float = 0.45")


def checkout(folder: Path, change: tuple[str, str] | None = None) -> Path:
    """A copy of the loop in `folder`, with one change applied (every occurrence)."""
    folder.mkdir(parents=True)
    text = SCRIPT.read_text(encoding="utf-8")
    if change is not None:
        assert change[0] in text, change
        text = text.replace(*change)
    (folder / SCRIPT.name).write_text(text, encoding="utf-8")
    return folder


def run(folder: Path, scenario: Scenario = SCENARIO) -> Result:
    result = record(scenario, folder)
    assert result.status == "ok", result.cause
    return result


@pytest.fixture(scope="module")
def base_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return checkout(tmp_path_factory.mktemp("base") / "checkout")


@pytest.fixture(scope="module")
def base(base_folder: Path) -> Result:
    return run(base_folder)


def test_the_loop_runs_unedited_with_every_instrument_placed_by_name(base: Result, base_folder: Path) -> None:
    assert (base_folder / SCRIPT.name).read_bytes() == SHIPPED == SCRIPT.read_bytes()  # nothing written to the loop
    assert sorted(path.name for path in base_folder.iterdir()) == [SCRIPT.name]  # it ran in a scratch folder
    assert base.calls["__main__:Agent.get_value"] == 3 and base.calls["torch.optim:Adam.step"] == 24
    assert len(base.trajectory) == 3 + 24  # Agent.get_value#1..3 and Adam.step#1..24
    assert base.trajectory.names()[:2] == ["Agent.get_value#1", "Adam.step#1"]
    assert base.telemetry is not None and base.telemetry["by_type"]["losses/value_loss"] == 3
    assert torch.optim.Adam.step.__name__ == "step" and not hasattr(torch.optim.Adam.step, "_hooks")  # restored


def test_syncs_are_counted_per_iteration_and_the_steady_state_repeats(base: Result) -> None:
    iterations = base.syncs.iterations
    assert len(iterations) == 3  # boundaries at Agent.get_value: rollout 1 is setup
    assert iterations[0] == iterations[1]  # update + next rollout, the same every iteration
    # <outside>: 46 host pulls (the `.numpy()` of a `.cpu()` copy just made is no second sync: 34 of the 80 reads)
    # and 96 host-to-device copies that block (3 per step: torch.tensor(...).to(device)), and 64 uploads of the
    # minibatches' NumPy indices (8 a minibatch: `b_obs[mb_inds]`, ..., which the subscript uploads on a GPU)
    # optimizer: Adam reads its step counters, which torch keeps in host memory, without a wait: none counted
    assert iterations[0] == {"<outside>": 206, "policy": 80}
    assert base.syncs.counts_by_region()["env"] == 0  # a declared region that never synced is counted as 0
    assert base.syncs.counts_by_region()["optimizer"] == 0
    policy = {record.via for record in base.syncs.records if record.region == "policy"}
    assert policy == {  # Categorical's argument checks, read where the logits are: named inside torch
        "torch/distributions/distribution.py:Distribution.__init__",
        "torch/distributions/distribution.py:Distribution._validate_sample",
    }
    own = [record for record in base.syncs.records if record.text.startswith("clipfracs")]
    assert own and all(record.via == "" for record in own)  # the loop's own .item(): not labelled as torch's


def test_two_runs_are_bitwise_equal_and_sites_match_across_checkout_folders(base: Result, tmp_path: Path) -> None:
    other = run(checkout(tmp_path / "elsewhere" / "deeper" / "checkout"))
    comparison = compare_results(base, other)
    assert comparison.ok, comparison.format()
    assert [v.status for v in comparison.verdicts] == ["same"] * 8  # run, context, trajectory, ..., clock
    assert {record.file for record in other.syncs.records} == {"ppo_script.py"}  # relative to the root, not the folder


def test_an_injected_item_is_named_at_its_own_line(base: Result, tmp_path: Path) -> None:
    head = run(checkout(tmp_path / "head", INJECTED_ITEM))
    verdict = compare_results(base, head).verdict("syncs")
    assert verdict.status == "differs" and verdict.kind == "new sync"
    new = [line for line in verdict.details if line.startswith("NEW")]
    line = 1 + SCRIPT.read_text().splitlines().index(INJECTED_ITEM[0].rstrip("\n")) + 1
    assert new == [f"NEW   '<outside>' ppo_script.py:{line} in <module>  ×24 [item]  `kl_seen = approx_kl.item()`"]
    assert "per iteration: <outside> 206 -> 214" in verdict.details  # 8 minibatches per iteration
    assert not any("inside torch" in line for line in new)


def test_a_renamed_tensor_is_reported_as_a_rename_not_a_value_change(base: Result, tmp_path: Path) -> None:
    head = run(checkout(tmp_path / "head", RENAMED))
    verdict = compare_results(base, head).verdict("trajectory")
    assert verdict.kind == "structure", verdict.details
    assert "renamed self.critic.0.weight -> self.value_head.0.weight" in verdict.summary
    assert not any("tensors differ" in line for line in verdict.details)  # no value differs


def test_a_regrouped_sum_is_low_bit_drift_with_its_ulp_figure(base: Result, tmp_path: Path) -> None:
    head = run(checkout(tmp_path / "head", REGROUPED))
    verdict = compare_results(base, head).verdict("trajectory")
    assert verdict.kind == DRIFT, verdict.details
    assert "ULP" in verdict.summary and "Adam.step#1" in verdict.summary
    scale_ulps = _first_divergence_scale_ulps(base, head)
    assert 0 < scale_ulps <= DRIFT_SCALE_ULPS


def test_a_changed_coefficient_is_a_value_change(base: Result, tmp_path: Path) -> None:
    head = run(checkout(tmp_path / "head", CHANGED_COEFFICIENT))
    verdict = compare_results(base, head).verdict("trajectory")
    assert verdict.kind == VALUE_CHANGE, verdict.details
    assert _first_divergence_scale_ulps(base, head) > 1000 * DRIFT_SCALE_ULPS


def _first_divergence_scale_ulps(a: Result, b: Result) -> float:
    from tripwire.bitwise.trajectory import compare_trajectories

    report = compare_trajectories(a.trajectory, b.trajectory, expected_values=a.values, actual_values=b.values)
    assert report.magnitude is not None
    return report.magnitude.max_scale_ulps


def test_results_saved_to_files_compare_as_they_did_in_memory(base: Result, tmp_path: Path) -> None:
    head = run(checkout(tmp_path / "head", REGROUPED))
    base.save(tmp_path / "a")
    head.save(tmp_path / "b")
    loaded = compare_results(Result.load(tmp_path / "a"), Result.load(tmp_path / "b"))
    in_memory = compare_results(base, head)
    assert [(v.check, v.status, v.kind) for v in loaded.verdicts] == [
        (v.check, v.status, v.kind) for v in in_memory.verdicts
    ]
    assert not math.isnan(Result.load(tmp_path / "b").seconds)


def test_a_target_the_tree_does_not_have_is_a_scenario_error_naming_it(tmp_path: Path) -> None:
    scenario = Scenario(**{**SCENARIO.__dict__, "regions": [Region("__main__:Agent.missing_method", "x")]})
    result = record(scenario, checkout(tmp_path / "checkout"))
    assert result.status == "error"
    assert "__main__:Agent.missing_method" in result.cause


def test_a_crash_is_one_line_naming_the_line_of_the_tree(tmp_path: Path) -> None:
    broken = ("        b_inds = np.arange(args.batch_size)\n", "        b_inds = np.arange(args.batch_size) + None\n")
    result = record(SCENARIO, checkout(tmp_path / "checkout", broken))
    assert result.status == "crash" and "\n" not in result.cause
    assert result.cause.startswith("TypeError: ") and "(ppo_script.py:" in result.cause
    assert result.traceback.startswith("Traceback") and "TypeError" in result.traceback


def test_a_crash_message_naming_a_file_of_the_tree_names_it_relative_to_the_tree(tmp_path: Path) -> None:
    """Python's own messages carry absolute paths (a circular import names the module's file): written relative to
    the tree, the same failure reads the same in two checkouts, so a history walk compares it."""
    from tripwire.outside.record import one_line

    causes = []
    for name in ("one", "two"):
        root = tmp_path / name
        try:
            raise ImportError(
                f"cannot import name 'A' from partially initialized module 'pkg' ({root}/pkg/__init__.py)"
            )
        except ImportError as error:
            causes.append(one_line(error, root))
    assert causes[0] == causes[1]
    assert "partially initialized module 'pkg' (pkg/__init__.py)" in causes[0] and str(tmp_path) not in causes[0]


def test_a_function_is_instrumented_under_every_name_a_module_holds_it_by(tmp_path: Path) -> None:
    """`torch.serialization:save` is also `torch.save`, and a function named where it is defined also its package's
    re-export (bound before the recording began: the package imported its submodule). Before, those names kept the
    original: `torch.save` never fired, the re-export's call was missed. Afterwards each name holds torch's own."""
    package = tmp_path / "aliaspkg"
    package.mkdir()
    (package / "impl.py").write_text("def helper(x):\n    return x + 1\n", encoding="utf-8")
    (package / "__init__.py").write_text("from aliaspkg.impl import helper\n", encoding="utf-8")
    (tmp_path / "loop.py").write_text(
        "import torch\nimport aliaspkg\nfrom aliaspkg.impl import helper\n\n"
        "assert aliaspkg.helper(1) + helper(2) == 5\ntorch.save(torch.ones(2), 'ones.pt')\n",
        encoding="utf-8",
    )
    saves = (torch.save, torch.serialization.save)
    scenario = Scenario(
        name="aliases",
        script="loop.py",
        regions=[Region("aliaspkg.impl:helper", "helper")],
        event_calls=[EventCall("torch.serialization:save", label="save")],
    )
    result = record(scenario, tmp_path)
    assert result.status == "ok", result.cause
    assert result.calls == {"aliaspkg.impl:helper": 2, "torch.serialization:save": 1}
    assert (torch.save, torch.serialization.save) == saves and torch.save is saves[1]


def test_a_float64_difference_below_float32_resolution_is_named_not_called_values_not_kept(tmp_path: Path) -> None:
    """A monitor's start time (SB3's `Monitor.t_start`, about 1.8e9 s) differs between two runs by seconds, under
    float32's spacing there (128 s): measured at float32's resolution it is 0 ULPs, and the verdict said the values
    were not kept, which they were. It now says what was found, and the plain values line shows both."""
    from tripwire.outside.compare import compare_results

    loop = (
        "from pathlib import Path\n\n\ndef step():\n    return {'t_start': float(Path('value.txt').read_text())}\n\n"
        "\ndef log(tag, value):\n    pass\n\n\nlog('t_start', step()['t_start'])\n"
    )
    scenario = Scenario(
        name="clock",
        script="loop.py",
        cwd="root",
        checkpoints=[Checkpoint("__main__:step", ("return",))],
        event_calls=[EventCall("__main__:log", label="tag")],
    )
    results = []
    for name, value in (("a", "1796337383.6566794"), ("b", "1796337389.8004224")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "loop.py").write_text(loop, encoding="utf-8")
        (tmp_path / name / "value.txt").write_text(value, encoding="utf-8")
        results.append(run(tmp_path / name, scenario))
    verdict = compare_results(*results).verdict("trajectory")
    assert verdict.status == "differs" and "not kept" not in verdict.summary
    assert verdict.summary.startswith("float64 values differ below float32's resolution only (measured as 0 ULPs): ")
    assert "  plain values that differ: return.t_start 1796337383.6566794 -> 1796337389.8004224" in verdict.details
    payloads = compare_results(*results).verdict("payloads")  # the same value logged as an event's field
    assert payloads.status == "differs" and payloads.summary.startswith(
        "float64 values differ below float32's resolution only (measured as 0 ULPs): data.value at event 1 of 1 "
    ), payloads.summary
