"""A user's Stable-Baselines3 SAC run on Pendulum: its environment sits under a vector env and four gym wrappers."""

import gymnasium
from stable_baselines3 import SAC

env = gymnasium.make("Pendulum-v1", g=10.0)
model = SAC(
    "MlpPolicy", env, buffer_size=1000, learning_starts=32, batch_size=16, train_freq=8, gradient_steps=1, seed=0,
    device="cpu", policy_kwargs={"net_arch": [16, 16]},
)  # fmt: skip
model.learn(total_timesteps=96)
