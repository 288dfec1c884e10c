"""ElegantRL's PPO on its own GPU-vectorized environment, `PointChasingVecEnv`, in one process.

ElegantRL (https://github.com/AI4Finance-Foundation/ElegantRL) trains its agents on "massively parallel"
environments whose state lives on the GPU. `PointChasingVecEnv` is the one it ships in plain torch: every
environment's points are device tensors, and a reset writes each environment's new state into them one by one.
Nothing of ElegantRL is edited: this file only fills its `Config` and calls its single-process trainer
(`train_agent_single_process`: explore, update, evaluate and save the actor), with the run's folder beside this file.
That trainer logs an attribute ElegantRL's PPO lacks (commit 7c64395): the agent here is its `AgentPPO` with that
one attribute added.

Placed at the root of an ElegantRL checkout (so `elegantrl` imports from it) and run as

    python ppo_run.py [--device cuda] [--envs 32] [--horizon 64] [--iterations 4] [--seed 0] [--runs DIR]
"""

from __future__ import annotations

import argparse
import os

from elegantrl.agents.AgentPPO import AgentPPO
from elegantrl.envs.PointChasingEnv import PointChasingVecEnv
from elegantrl.train.config import Config
from elegantrl.train.run import train_agent_single_process


class AgentPPOLogged(AgentPPO):
    """ElegantRL's `AgentPPO` as it is, with the `explore_rate` its single-process trainer logs after each update
    (`run.py`: `(*logging_tuple, agent.explore_rate, show_str)`), which only its DQN agents define: without it the
    trainer stops with an AttributeError after the first update. None, so the evaluator prints and records nothing
    for it (it keeps only the numbers of that tuple)."""

    explore_rate = None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--envs", type=int, default=32)
    parser.add_argument("--horizon", type=int, default=64, help="steps of every environment per update")
    parser.add_argument("--iterations", type=int, default=4, help="explore-and-update rounds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", default="", help="the folder of the run's files (default: runs/ beside this file)")
    args = parser.parse_args()

    gpu_id = 0 if args.device == "cuda" else -1
    env_args = {
        "env_name": "PointChasingVecEnv",
        "num_envs": args.envs,
        "env_num": args.envs,  # the environment's own names for the count and the device
        "sim_gpu_id": gpu_id,
        "max_step": args.horizon,  # an episode per rollout, so every environment resets once per iteration
        "state_dim": 2 * 4,
        "action_dim": 2,
        "if_discrete": False,
    }
    config = Config(agent_class=AgentPPOLogged, env_class=PointChasingVecEnv, env_args=env_args)
    config.gpu_id = gpu_id
    config.random_seed = args.seed
    config.num_threads = max(1, int(os.environ.get("OMP_NUM_THREADS", "1")))  # ElegantRL sets torch's threads
    config.net_dims = [64, 64]
    config.horizon_len = args.horizon
    config.batch_size = 128
    config.repeat_times = 4.0
    config.break_step = args.horizon * (args.iterations - 1)  # the trainer stops once its step count passes this
    config.eval_per_step = args.horizon  # evaluate (and maybe save the actor) after every update
    config.eval_times = 1
    config.save_gap = 1  # save the actor at every evaluation, not only at a new best return
    runs = args.runs or os.path.join(os.path.dirname(os.path.abspath(__file__)), "runs")
    config.cwd = os.path.join(runs, "PointChasingVecEnv_PPO")
    config.if_remove = True
    train_agent_single_process(config)


if __name__ == "__main__":
    main()
