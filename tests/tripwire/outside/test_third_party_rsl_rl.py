"""rsl_rl 5.4.2's `OnPolicyRunner` (the PPO legged_gym and Isaac Lab train with), installed from PyPI as its users run
it, recorded from outside with `examples/rsl_rl/ppo_scenario.py` on that folder's driver, whose vectorized env is
written the way legged_gym writes a robot's step.

What running it found, each a test here:

- the runner steps the env inside `torch.inference_mode`, so the env's state, rebuilt at each step, is an inference
  tensor, and its resets by index (`self.vel[env_ids] = 0.0`, a number uploaded before the put on a GPU) went
  uncounted on a CPU run, where the same reset of a buffer built outside inference mode counted;
- its logger writes its episode scalars in the order of a set of their names: two processes hashing strings at
  random wrote them in another order (tests/tripwire/outside/test_hash_seed.py). Recorded in one process here, two
  runs compare identical.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from published_loops import checkout, ran

from tripwire.outside.compare import compare_results
from tripwire.outside.record import record
from tripwire.outside.result import Result
from tripwire.scenario import Scenario, load_scenario

pytest.importorskip("rsl_rl", reason="rsl_rl is a test dependency (pyproject.toml's test extra: rsl-rl-lib)")

EXAMPLES = Path(__file__).parents[3] / "examples" / "rsl_rl"
DRIVER = EXAMPLES / "ppo_run.py"
ITERATIONS, STEPS = 2, 24  # the driver's rollout: 24 steps an iteration
SCENARIO: Scenario = dataclasses.replace(
    load_scenario(EXAMPLES / "ppo_scenario.py"), argv=["--envs", "64", "--iterations", str(ITERATIONS)]
)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Result:
    return ran(record(SCENARIO, checkout(tmp_path_factory.mktemp("rsl_rl") / "base", DRIVER)))


def _sites(result: Result, file: str) -> dict[tuple[str, str], tuple[str, int]]:
    return {
        (site.region, site.text): (site.kind, site.count) for site in result.syncs.records if site.file.endswith(file)
    }


def test_a_reset_of_the_envs_inference_state_counts_as_the_reset_of_its_other_buffers(base: Result) -> None:
    env = _sites(base, "ppo_run.py")
    resets = env[("env", "self.episode_length_buf[env_ids] = 0")]  # built outside inference mode: counted before
    assert resets[0] == "to_device" and resets[1] > 0
    assert env[("env", "self.vel[env_ids] = 0.0")] == resets  # rebuilt inside it at every step
    assert env[("env", "env_ids = self.reset_buf.nonzero(as_tuple=False).flatten()")] == (
        "implicit:nonzero",
        ITERATIONS * STEPS,
    )


def test_the_loggers_and_nan_checks_reads_are_counted_once_a_step(base: Result) -> None:
    steps = ITERATIONS * STEPS
    logger = _sites(base, "rsl_rl/utils/logger.py")
    assert logger[("<outside>", "new_ids = (dones > 0).nonzero(as_tuple=False)")] == ("implicit:nonzero", steps)
    assert logger[("<outside>", "self.cur_reward_sum[new_ids] = 0")] == ("to_device", steps)
    assert logger[("<outside>", "self.cur_episode_length[new_ids] = 0")] == ("to_device", steps)
    checks = _sites(base, "rsl_rl/utils/utils.py")
    assert checks[("<outside>", "if torch.isnan(rewards).any():")] == ("bool", steps)


def test_two_runs_in_one_process_compare_identical(base: Result, tmp_path: Path) -> None:
    again = ran(record(SCENARIO, checkout(tmp_path / "again", DRIVER)))
    comparison = compare_results(base, again)
    assert comparison.ok, comparison.format()
    assert base.trajectory is not None and len(base.trajectory) == ITERATIONS
