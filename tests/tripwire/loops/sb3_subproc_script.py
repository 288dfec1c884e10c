"""A user's Stable-Baselines3 PPO with its envs in worker processes (`SubprocVecEnv`: forkserver where the platform
has it, else spawn), each env wrapped to scale its observations by a torch root; Adam fused, so every vendor-bound
op of the run is in the workers. With `open` it leaves the vector env open at the end, as SB3's quick start does."""

import sys

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import SubprocVecEnv


class Rooted(gym.ObservationWrapper):
    def observation(self, observation):
        return torch.sqrt(torch.as_tensor(np.abs(observation))).numpy()


if __name__ == "__main__":
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0, vec_env_cls=SubprocVecEnv, wrapper_class=Rooted)
    fused = {"optimizer_kwargs": {"fused": True}}
    model = PPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=2, seed=0, device="cpu", policy_kwargs=fused)
    model.learn(total_timesteps=256)
    if sys.argv[1:] != ["open"]:
        env.close()
