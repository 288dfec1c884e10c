"""Sample Factory 2.1.1's APPO on gymnasium's CartPole, in its serial mode (every component in one process).

Sample Factory (https://github.com/alex-petrenko/sample-factory) is a high-throughput PPO built for GPUs: rollout
workers, inference workers and a learner exchanging trajectories through shared tensors. `--serial_mode` runs them
all in the main process, on one event loop, as its own tests do; the learner, the policy, the rollout buffers and the
tensorboard summaries are Sample Factory's own, unedited. This file is its `sf_examples/train_gym_env.py` with the
command line written out, the run's folder given by `--runs`.

Run where `sample_factory` imports (pip install sample-factory; it pins numpy below 2) as

    python appo_run.py [--device gpu] [--envs 4] [--steps 1024] [--seed 1] [--runs DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

import gymnasium as gym

from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
from sample_factory.envs.env_utils import register_env
from sample_factory.train import run_rl


def make_gym_env_func(full_env_name, cfg=None, env_config=None, render_mode: Optional[str] = None):  # noqa: ANN001
    return gym.make(full_env_name, render_mode=render_mode)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=1024, help="environment steps to train for")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", default="", help="the run's folder (default: runs/ beside this file)")
    args = parser.parse_args()
    runs = args.runs or os.path.join(os.path.dirname(os.path.abspath(__file__)), "runs")
    register_env("CartPole-v1", make_gym_env_func)
    argv = [
        "--algo=APPO",
        "--env=CartPole-v1",
        "--experiment=cartpole",
        f"--train_dir={runs}",
        "--restart_behavior=overwrite",
        "--serial_mode=True",
        "--async_rl=False",
        "--num_workers=1",
        f"--num_envs_per_worker={args.envs}",
        "--rollout=32",
        "--batch_size=128",
        "--num_batches_per_epoch=1",
        "--num_epochs=1",
        "--use_rnn=False",
        "--recurrence=1",
        f"--train_for_env_steps={args.steps}",
        f"--device={args.device}",
        f"--seed={args.seed}",
        "--save_every_sec=1000000",  # a checkpoint at the end only
        "--experiment_summaries_interval=0",  # the learner's summaries at every update
        "--stats_avg=10",
    ]
    parser, cfg = parse_sf_args(argv=argv)
    cfg = parse_full_cfg(parser, argv)
    return run_rl(cfg)


if __name__ == "__main__":
    sys.exit(main())
