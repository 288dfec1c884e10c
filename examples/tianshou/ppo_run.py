"""Tianshou's own discrete PPO test (`test/discrete/test_ppo_discrete.py`, Tianshou 2.0.1), run small and unedited.

Placed at the root of a Tianshou checkout beside `test/`, so that `test.discrete.test_ppo_discrete` imports as the
repository's own tests do. Two epochs of 4 CartPole envs x 200 steps, 2 test envs, on the CPU.
"""

import sys

sys.argv = [
    sys.argv[0],
    *("--epoch", "2", "--epoch_num_steps", "400", "--collection_step_num_env_steps", "200"),
    *("--num_training_envs", "4", "--num_test_envs", "2", "--buffer_size", "2000"),
    *("--update_step_num_repetitions", "2", "--logdir", "log"),
]

from test.discrete.test_ppo_discrete import get_args, test_ppo  # noqa: E402  (after argv, as the test reads it)

test_ppo(get_args(), enable_assertions=False)
