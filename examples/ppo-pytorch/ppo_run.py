"""The training loop of PPO-PyTorch's `train.py` (https://github.com/nikhilbarhate99/PPO-PyTorch, 728cce8) around its
own `PPO.py`, left unedited, on gymnasium's CartPole-v1: `train.py` itself hard-codes a Roboschool env and gym's
old API, so this file keeps its loop (select an action, store reward and done, update every `update_timestep` steps)
with gymnasium's reset and step read the old way. Copy it beside `PPO.py` in a checkout of PPO-PyTorch."""

import gymnasium as gym
import numpy as np
import torch

from PPO import PPO

SEED = 0
MAX_EP_LEN = 200
UPDATE_TIMESTEP = 400
TOTAL_TIMESTEPS = 1200


def main() -> None:
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    env = gym.make("CartPole-v1")
    state_dim, action_dim = env.observation_space.shape[0], env.action_space.n
    # train.py's discrete settings, with fewer epochs per update
    agent = PPO(state_dim, action_dim, 0.0003, 0.001, 0.99, 10, 0.2, False, 0.6)
    time_step, episode = 0, 0
    while time_step < TOTAL_TIMESTEPS:
        state, _ = env.reset(seed=SEED + episode)
        for _ in range(MAX_EP_LEN):
            action = agent.select_action(state)
            state, reward, terminated, truncated, _ = env.step(action)
            agent.buffer.rewards.append(reward)
            agent.buffer.is_terminals.append(terminated or truncated)
            time_step += 1
            if time_step % UPDATE_TIMESTEP == 0:
                agent.update()
            if terminated or truncated:
                break
        episode += 1
    print(f"done: {time_step} steps, {episode} episodes")


if __name__ == "__main__":
    main()
