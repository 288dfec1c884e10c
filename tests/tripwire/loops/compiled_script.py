# A single-file PPO loop that compiles its parts the way LeanRL's `ppo_continuous_action_torchcompile.py` does:
# `torch.compile` of the policy step, of GAE (fullgraph) and of the update, on a small numpy "vector env", so it
# needs nothing beyond torch and numpy. Written for tripwire's tests: the loop runs inline under
# `if __name__ == "__main__":`; tripwire watches it from outside (compiled_script_scenario.py), and the tests only
# copy this file, each variant of the copy carrying one injected change.
import argparse
import random
from dataclasses import dataclass, fields

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.distributions.categorical import Categorical

torch.distributions.Distribution.set_default_validate_args(False)  # its checks read tensors on the host


@dataclass
class Args:
    seed: int = 1
    total_timesteps: int = 256
    learning_rate: float = 2.5e-4
    num_envs: int = 4
    num_steps: int = 16
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int = 2
    update_epochs: int = 2
    clip_coef: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    compile_backend: str = "inductor"


def parse_args():
    parser = argparse.ArgumentParser()
    for field in fields(Args):
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=type(field.default), default=field.default)
    return Args(**vars(parser.parse_args()))


class ToyVecEnv:
    """Balance a point: observation (x, v, a, b); action 1 pushes right, 0 left; reward 1 while |x| < 1."""

    def __init__(self, num_envs, seed):
        self.num_envs = num_envs
        self.rng = np.random.default_rng(seed)
        self.state = self.rng.uniform(-0.05, 0.05, size=(num_envs, 4)).astype(np.float32)
        self.steps = np.zeros(num_envs, dtype=np.int64)

    def reset(self):
        return self.state.copy()

    def step(self, actions):
        push = np.where(actions == 1, 0.1, -0.1).astype(np.float32)
        self.state[:, 1] += push + 0.05 * self.state[:, 0]
        self.state[:, 0] += 0.1 * self.state[:, 1]
        self.state[:, 2:] = self.rng.normal(0.0, 0.1, size=(self.num_envs, 2)).astype(np.float32)
        self.steps += 1
        done = (np.abs(self.state[:, 0]) > 1.0) | (self.steps >= 30)
        reward = np.where(np.abs(self.state[:, 0]) > 1.0, 0.0, 1.0).astype(np.float32)
        if done.any():
            self.state[done] = self.rng.uniform(-0.05, 0.05, size=(int(done.sum()), 4)).astype(np.float32)
            self.steps[done] = 0
        return self.state.copy(), reward, done


class Agent(nn.Module):
    def __init__(self):
        super().__init__()
        self.critic = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 1))
        self.actor = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 2))

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        logits = self.actor(x)
        probs = Categorical(logits=logits)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


def gae(next_value, next_done, rewards, dones, values, gamma, gae_lambda):
    advantages = torch.zeros_like(rewards)
    lastgaelam = torch.zeros_like(next_value)
    num_steps = rewards.shape[0]
    for t in range(num_steps - 1, -1, -1):
        if t == num_steps - 1:
            nextnonterminal, nextvalues = 1.0 - next_done, next_value
        else:
            nextnonterminal, nextvalues = 1.0 - dones[t + 1], values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
    return advantages, advantages + values


def update(agent, optimizer, obs, actions, logprobs, advantages, returns, args):
    _, newlogprob, entropy, newvalue = agent.get_action_and_value(obs, actions)
    ratio = (newlogprob - logprobs).exp()
    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    pg_loss = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)).mean()
    v_loss = 0.5 * ((newvalue.view(-1) - returns) ** 2).mean()
    loss = pg_loss - args.ent_coef * entropy.mean() + v_loss * args.vf_coef
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
    return loss.detach()


if __name__ == "__main__":
    args = parse_args()
    batch_size = args.num_envs * args.num_steps
    minibatch_size = batch_size // args.num_minibatches
    num_iterations = args.total_timesteps // batch_size

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    envs = ToyVecEnv(args.num_envs, args.seed)
    agent = Agent()
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    policy = torch.compile(agent.get_action_and_value, backend=args.compile_backend)
    gae = torch.compile(gae, fullgraph=True, backend=args.compile_backend)
    update = torch.compile(update, backend=args.compile_backend)

    obs = torch.zeros((args.num_steps, args.num_envs, 4))
    actions = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long)
    logprobs = torch.zeros((args.num_steps, args.num_envs))
    rewards = torch.zeros((args.num_steps, args.num_envs))
    dones = torch.zeros((args.num_steps, args.num_envs))
    values = torch.zeros((args.num_steps, args.num_envs))

    next_obs = torch.tensor(envs.reset())
    next_done = torch.zeros(args.num_envs)
    for iteration in range(1, num_iterations + 1):
        for step in range(args.num_steps):
            obs[step], dones[step] = next_obs, next_done
            with torch.no_grad():
                action, logprob, _, value = policy(next_obs)
            values[step], actions[step], logprobs[step] = value.flatten(), action, logprob
            next_obs_np, reward, done = envs.step(action.numpy())
            rewards[step] = torch.as_tensor(reward)
            next_obs, next_done = torch.as_tensor(next_obs_np), torch.as_tensor(done, dtype=torch.float)

        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(-1)
            advantages, returns = gae(next_value, next_done, rewards, dones, values, args.gamma, args.gae_lambda)

        b_obs, b_actions, b_logprobs = obs.reshape(-1, 4), actions.reshape(-1), logprobs.reshape(-1)
        b_advantages, b_returns = advantages.reshape(-1), returns.reshape(-1)
        for epoch in range(args.update_epochs):
            order = torch.randperm(batch_size)
            for start in range(0, batch_size, minibatch_size):
                mb = order[start : start + minibatch_size]
                update(agent, optimizer, b_obs[mb], b_actions[mb], b_logprobs[mb], b_advantages[mb], b_returns[mb], args)
                optimizer.step()
