"""rl_games 1.6.5's continuous PPO (`a2c_continuous`, the trainer of IsaacGymEnvs) on a vectorized task in torch.

rl_games (https://github.com/Denys88/rl_games) trains Isaac Gym's and Brax's environments, whose state lives on the
device. This file registers one in plain torch the way IsaacGymEnvs' `VecTask` writes a task (observations, rewards,
`reset_buf` and `progress_buf` as device tensors, `reset_idx(env_ids)` for the environments `reset_buf.nonzero()`
names, `extras["time_outs"]`) and runs rl_games' own `Runner` on it with a config written as its brax configs are.
Nothing of rl_games is edited; its run folder (`runs/`, tensorboard and checkpoints) is written beside this file.

    python ppo_run.py [--device cuda] [--envs 256] [--epochs 4] [--compile]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from rl_games.common import env_configurations, vecenv
from rl_games.common.gym_compat import gym
from rl_games.common.ivecenv import IVecEnv
from rl_games.torch_runner import Runner

OBSERVATIONS, ACTIONS = 6, 2


class ReachTask(IVecEnv):
    """A point mass per environment, pushed towards a goal drawn at each reset; an episode ends at the goal or after
    `max_episode_length` steps."""

    def __init__(
        self, config_name: str, num_actors: int, device: str = "cpu", max_episode_length: int = 48, seed: int = 0
    ) -> None:
        self.num_envs, self.device, self.max_episode_length = num_actors, device, max_episode_length
        high = np.full(OBSERVATIONS, np.inf, dtype=np.float32)
        self.observation_space = gym.spaces.Box(-high, high, dtype=np.float32)
        self.action_space = gym.spaces.Box(-np.ones(ACTIONS, np.float32), np.ones(ACTIONS, np.float32))
        self.pos = torch.zeros(num_actors, 2, device=device)
        self.vel = torch.zeros(num_actors, 2, device=device)
        self.goal = torch.zeros(num_actors, 2, device=device)
        self.obs_buf = torch.zeros(num_actors, OBSERVATIONS, device=device)
        self.rew_buf = torch.zeros(num_actors, device=device)
        self.reset_buf = torch.ones(num_actors, dtype=torch.long, device=device)
        self.progress_buf = torch.zeros(num_actors, dtype=torch.long, device=device)
        self.extras: dict = {}

    def reset_idx(self, env_ids: torch.Tensor) -> None:
        self.pos[env_ids] = torch.rand(len(env_ids), 2, device=self.device) * 2.0 - 1.0
        self.goal[env_ids] = torch.rand(len(env_ids), 2, device=self.device) * 2.0 - 1.0
        self.vel[env_ids] = 0.0
        self.progress_buf[env_ids] = 0
        self.reset_buf[env_ids] = 0

    def compute_observations(self) -> dict[str, torch.Tensor]:
        self.obs_buf[:] = torch.cat((self.pos, self.vel, self.goal - self.pos), dim=-1)
        return {"obs": self.obs_buf}

    def reset(self) -> dict[str, torch.Tensor]:
        self.reset_idx(torch.arange(self.num_envs, device=self.device))
        return self.compute_observations()

    def step(self, actions: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, dict]:
        env_ids = self.reset_buf.nonzero(as_tuple=False).squeeze(-1)
        if len(env_ids) > 0:
            self.reset_idx(env_ids)
        actions = torch.clamp(actions, -1.0, 1.0)
        self.vel = 0.9 * self.vel + 0.1 * actions
        self.pos = self.pos + 0.1 * self.vel
        self.progress_buf += 1
        distance = torch.norm(self.goal - self.pos, dim=-1)
        self.rew_buf[:] = -distance - 0.01 * torch.sum(actions * actions, dim=-1)
        time_outs = self.progress_buf >= self.max_episode_length
        self.reset_buf = torch.where((distance < 0.05) | time_outs, 1, 0)
        self.extras["time_outs"] = time_outs
        return self.compute_observations(), self.rew_buf.clone(), self.reset_buf.clone(), self.extras

    def get_number_of_agents(self) -> int:
        return 1

    def get_env_info(self) -> dict:
        return {"action_space": self.action_space, "observation_space": self.observation_space}


def config(args: argparse.Namespace) -> dict:
    return {
        "params": {
            "seed": args.seed,
            "torch_threads": 0,  # the process's own count
            "algo": {"name": "a2c_continuous"},
            "model": {"name": "continuous_a2c_logstd"},
            "network": {
                "name": "actor_critic",
                "separate": False,
                "space": {
                    "continuous": {
                        "mu_activation": "None",
                        "sigma_activation": "None",
                        "mu_init": {"name": "default"},
                        "sigma_init": {"name": "const_initializer", "val": 0},
                        "fixed_sigma": True,
                    }
                },
                "mlp": {"units": [64, 64], "activation": "elu", "d2rl": False, "initializer": {"name": "default"}},
            },
            "config": {
                "name": "reach",
                "full_experiment_name": "reach",
                "env_name": "torch-reach",
                "device": args.device,
                "ppo_device": args.device,
                "multi_gpu": False,
                "mixed_precision": False,
                "torch_compile": args.compile,
                "normalize_input": True,
                "normalize_value": True,
                "normalize_advantage": True,
                "value_bootstrap": True,
                "reward_shaper": {"scale_value": 1.0},
                "gamma": 0.99,
                "tau": 0.95,
                "learning_rate": 3e-4,
                "lr_schedule": "adaptive",
                "kl_threshold": 0.008,
                "score_to_win": 20000,
                "max_epochs": args.epochs,
                "save_best_after": 100,
                "save_frequency": 0,
                "grad_norm": 1.0,
                "entropy_coef": 0.0,
                "truncate_grads": True,
                "e_clip": 0.2,
                "horizon_length": 24,
                "num_actors": args.envs,
                "minibatch_size": args.envs * 24 // 4,
                "mini_epochs": 4,
                "critic_coef": 2,
                "clip_value": True,
                "bounds_loss_coef": 0.0001,
                "env_config": {"device": args.device},
            },
        }
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--envs", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--compile", action="store_true")
    args = parser.parse_args()

    vecenv.register("TORCH_REACH", lambda config_name, num_actors, **kwargs: ReachTask(config_name, num_actors, **kwargs))
    env_configurations.register(
        "torch-reach", {"vecenv_type": "TORCH_REACH", "env_creator": lambda **kwargs: None}
    )
    runner = Runner()
    runner.load(config(args))
    runner.reset()
    runner.run({"train": True, "play": False, "checkpoint": None, "sigma": None})


if __name__ == "__main__":
    main()
