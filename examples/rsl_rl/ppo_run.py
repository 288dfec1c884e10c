"""rsl_rl 5.4.2's `OnPolicyRunner` (PPO) on a vectorized point-reaching task written in torch, Isaac Gym's way.

rsl_rl (https://github.com/leggedrobotics/rsl_rl) is the PPO that legged_gym and Isaac Lab train with: its
environments live in a simulator on the GPU, so this file supplies one in plain torch, written the way legged_gym's
`LeggedRobot` writes its step (buffers on the device, `reset_buf.nonzero()` to find the environments to reset,
`reset_idx(env_ids)` writing into them by index, per-term episode sums reported as `extras["episode"]`, timeouts as
`extras["time_outs"]`). Nothing of rsl_rl is edited: the runner, PPO, storage, models and logger run as shipped,
with its tensorboard logger on (a run folder `logs/` beside this file).

Placed at the root of an rsl_rl checkout (so `rsl_rl` imports from it) and run as

    python ppo_run.py [--device cuda] [--envs 256] [--iterations 4] [--recurrent] [--compile]
"""

from __future__ import annotations

import argparse
import os

import torch
from tensordict import TensorDict

from rsl_rl.env import VecEnv
from rsl_rl.runners import OnPolicyRunner


class PointReach(VecEnv):
    """A point mass per environment, pushed by the action towards a goal drawn at each reset."""

    def __init__(self, num_envs: int, device: str, max_episode_length: int = 48) -> None:
        self.num_envs = num_envs
        self.num_actions = 2
        self.max_episode_length = max_episode_length
        self.device = device
        self.cfg = {"task": "point-reach", "num_envs": num_envs, "max_episode_length": max_episode_length}
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long, device=device)
        self.pos = torch.zeros(num_envs, 2, device=device)
        self.vel = torch.zeros(num_envs, 2, device=device)
        self.goal = torch.zeros(num_envs, 2, device=device)
        self.reset_buf = torch.ones(num_envs, dtype=torch.bool, device=device)
        self.time_out_buf = torch.zeros(num_envs, dtype=torch.bool, device=device)
        self.episode_sums = {
            "distance": torch.zeros(num_envs, device=device),
            "effort": torch.zeros(num_envs, device=device),
        }
        self.extras: dict = {}
        self.reset_idx(torch.arange(num_envs, device=device))

    def reset_idx(self, env_ids: torch.Tensor) -> None:
        if len(env_ids) == 0:
            return
        self.pos[env_ids] = torch.rand(len(env_ids), 2, device=self.device) * 2.0 - 1.0
        self.goal[env_ids] = torch.rand(len(env_ids), 2, device=self.device) * 2.0 - 1.0
        self.vel[env_ids] = 0.0
        self.extras["episode"] = {}
        for key in self.episode_sums:
            self.extras["episode"]["rew_" + key] = torch.mean(self.episode_sums[key][env_ids]) / self.max_episode_length
            self.episode_sums[key][env_ids] = 0.0
        self.episode_length_buf[env_ids] = 0

    def get_observations(self) -> TensorDict:
        policy = torch.cat((self.pos, self.vel, self.goal - self.pos), dim=-1)
        return TensorDict({"policy": policy}, batch_size=[self.num_envs], device=self.device)

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        actions = torch.clip(actions, -1.0, 1.0)
        self.vel = 0.9 * self.vel + 0.1 * actions
        self.pos = self.pos + 0.1 * self.vel
        self.episode_length_buf += 1
        distance = torch.norm(self.goal - self.pos, dim=-1)
        terms = {"distance": -distance, "effort": -0.01 * torch.sum(actions * actions, dim=-1)}
        rewards = torch.zeros(self.num_envs, device=self.device)
        for key, term in terms.items():
            rewards += term
            self.episode_sums[key] += term
        self.time_out_buf = self.episode_length_buf >= self.max_episode_length
        self.reset_buf = (distance < 0.05) | self.time_out_buf
        env_ids = self.reset_buf.nonzero(as_tuple=False).flatten()
        self.reset_idx(env_ids)
        self.extras["time_outs"] = self.time_out_buf.float()
        return self.get_observations(), rewards, self.reset_buf.float(), self.extras


def train_cfg(recurrent: bool, compiled: bool = False) -> dict:
    model = {"hidden_dims": [64, 64], "activation": "elu", "obs_normalization": True}
    if recurrent:
        model = {**model, "class_name": "RNNModel", "rnn_type": "lstm", "rnn_hidden_dim": 32, "rnn_num_layers": 1}
    else:
        model = {**model, "class_name": "MLPModel"}
    return {
        "num_steps_per_env": 24,
        "save_interval": 50,
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "actor": {**model, "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0}},
        "critic": dict(model),
        "algorithm": {
            "class_name": "PPO",
            "num_learning_epochs": 4,
            "num_mini_batches": 4,
            "learning_rate": 1e-3,
            "schedule": "adaptive",
            "desired_kl": 0.01,
            "rnd_cfg": None,
        },
        "run_name": "point-reach",
        "torch_compile_mode": "default" if compiled else None,  # rsl_rl's `torch.compile` of actor and critic
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--envs", type=int, default=256)
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--recurrent", action="store_true")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--log-dir", default=os.path.join("logs", "point-reach"))
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    env = PointReach(args.envs, args.device)
    runner = OnPolicyRunner(env, train_cfg(args.recurrent, args.compile), log_dir=args.log_dir, device=args.device)
    runner.learn(num_learning_iterations=args.iterations)


if __name__ == "__main__":
    main()
