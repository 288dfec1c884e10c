"""torch-ac 1.4.0's PPO (`PPOAlgo`, the trainer of rl-starter-files) on gymnasium's CartPole, in rl-starter-files' shape.

torch-ac (https://github.com/lcswillems/torch-ac) steps its environments in forked worker processes
(`ParallelEnv`: the first in the trainer's process, each other in its own), and keeps its rollout on the device
given. This file builds the environments, an actor-critic of torch-ac's `ACModel` kind and the algorithm, then runs
`collect_experiences` and `update_parameters` in turn as rl-starter-files' `train.py` does, logging what it logs.
Nothing of torch-ac is edited.

Run where `torch_ac` imports (pip install torch-ac, or its checkout on PYTHONPATH) as

    python ppo_run.py [--device cuda] [--envs 4] [--frames 128] [--updates 4] [--seed 1]
"""

from __future__ import annotations

import argparse
import random

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Categorical

import torch_ac


class ACModel(nn.Module, torch_ac.ACModel):
    """An actor and a critic over CartPole's four numbers, as rl-starter-files' model is over MiniGrid's image."""

    def __init__(self, obs_size: int, actions: int) -> None:
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(obs_size, 64), nn.Tanh(), nn.Linear(64, actions))
        self.critic = nn.Sequential(nn.Linear(obs_size, 64), nn.Tanh(), nn.Linear(64, 1))

    def forward(self, obs: torch.Tensor) -> tuple[Categorical, torch.Tensor]:
        dist = Categorical(logits=torch.log_softmax(self.actor(obs), dim=1))
        return dist, self.critic(obs).squeeze(1)


def preprocess_obss(obss: list[np.ndarray], device: torch.device | None = None) -> torch.Tensor:
    return torch.tensor(np.array(obss), dtype=torch.float32, device=device)


def log_update(update: int, frames: int, logs: dict) -> None:
    """What rl-starter-files' `train.py` prints after each update (its CSV and tensorboard rows hold the same)."""
    returns = logs["return_per_episode"]
    print(
        f"U {update} | F {frames:06} | R:mean {np.mean(returns):.2f} | H {logs['entropy']:.3f} | "
        f"V {logs['value']:.3f} | pL {logs['policy_loss']:.3f} | vL {logs['value_loss']:.3f} | "
        f"grad {logs['grad_norm']:.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--frames", type=int, default=128, help="frames per process per update")
    parser.add_argument("--updates", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    random.seed(args.seed)  # rl-starter-files' utils.seed
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    envs = []
    for i in range(args.envs):
        env = gym.make("CartPole-v1")
        env.reset(seed=args.seed + 10000 * i)
        envs.append(env)
    model = ACModel(envs[0].observation_space.shape[0], envs[0].action_space.n)
    algo = torch_ac.PPOAlgo(  # rl-starter-files' defaults for PPO, with no recurrence
        envs,
        model,
        torch.device(args.device),
        num_frames_per_proc=args.frames,
        discount=0.99,
        lr=0.001,
        gae_lambda=0.95,
        entropy_coef=0.01,
        value_loss_coef=0.5,
        max_grad_norm=0.5,
        recurrence=1,
        adam_eps=1e-8,
        clip_eps=0.2,
        epochs=4,
        batch_size=256,
        preprocess_obss=preprocess_obss,
    )
    frames = 0
    for update in range(1, args.updates + 1):
        exps, logs1 = algo.collect_experiences()
        logs2 = algo.update_parameters(exps)
        frames += logs1["num_frames"]
        log_update(update, frames, {**logs1, **logs2})


if __name__ == "__main__":
    main()
