"""A longer Stable-Baselines3 PPO run than tests/tripwire/loops/sb3_script.py, for `recording_cost.py`: the same
library calls at a size where the loop's own time shows, with SB3's own progress table printed (its `fps` is the
loop's rate). Named like the test script so the test scenario, which names `sb3_script.py`, records it as it is."""

import sys

from stable_baselines3 import PPO

steps = int(sys.argv[sys.argv.index("--timesteps") + 1]) if "--timesteps" in sys.argv else 4096
settings = {"n_steps": 256, "batch_size": 64, "n_epochs": 4, "learning_rate": 3e-4, "seed": 0, "device": "cpu"}
model = PPO("MlpPolicy", "CartPole-v1", verbose=1, **settings)
model.learn(total_timesteps=steps)
