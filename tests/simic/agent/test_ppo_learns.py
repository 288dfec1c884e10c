"""PPO learns: on a contextual bandit built from the real agent, heads and masks, it finds the paid action.

Each step every env sees a context c in {0, 1} (one-hot in the observation) and is paid 1 for GERMINATE on slot
c, 0 for anything else (6 ops x 2 slots: 1 in 12 by chance). Every step is its own episode (done). After a
bounded number of updates the sampled (op, slot) must be the paid one in at least 90 % of fresh draws.
"""

from __future__ import annotations

import torch

from esper.leyline import LifecycleOp
from esper.simic.agent.ppo import PPOAgent, PPOConfig
from esper.tamiyo.features import state_dim
from esper.tamiyo.masks import mask_shapes
from esper.tamiyo.policy import FactoredRecurrentActorCritic

NUM_SLOTS = 2
N_ENVS = 16
N_STEPS = 4
UPDATES = 50
PAID_OP = LifecycleOp.GERMINATE


def open_masks(n_envs: int) -> dict[str, torch.Tensor]:
    """Every value of every head allowed: the bandit, not the mask, decides what is right."""
    return {key: torch.ones(n_envs, *shape, dtype=torch.bool) for key, shape in mask_shapes(NUM_SLOTS).items()}


def observe(contexts: torch.Tensor) -> torch.Tensor:
    obs = torch.zeros(contexts.shape[0], state_dim(NUM_SLOTS))
    obs[torch.arange(contexts.shape[0]), contexts] = 1.0
    return obs


def paid(actions: dict[str, torch.Tensor], contexts: torch.Tensor) -> torch.Tensor:
    return (actions["op"] == int(PAID_OP)) & (actions["slot"] == contexts)


def play_round(agent: PPOAgent, gen: torch.Generator) -> None:
    policy, masks = agent.policy, open_masks(N_ENVS)
    hidden = policy.initial_hidden(N_ENVS, "cpu")
    blueprints = torch.zeros(N_ENVS, NUM_SLOTS, dtype=torch.long)
    for t in range(N_STEPS):
        contexts = torch.randint(0, NUM_SLOTS, (N_ENVS,), generator=gen)
        obs = observe(contexts)
        step = policy.get_action(obs, blueprints, masks, hidden, generator=gen)
        agent.buffer.add(
            step=t,
            obs=obs,
            blueprint_idx=blueprints,
            masks=masks,
            actions=step.actions,
            log_probs=step.log_probs,
            values=step.values,
            effective_op=step.actions["op"],
            rewards=paid(step.actions, contexts).float(),
            dones=torch.ones(N_ENVS, dtype=torch.bool),
            truncated=torch.zeros(N_ENVS, dtype=torch.bool),
            hidden=hidden,
        )
        hidden = step.hidden
    agent.update()


def paid_fraction(agent: PPOAgent, gen: torch.Generator, draws: int = 256) -> float:
    contexts = torch.randint(0, NUM_SLOTS, (draws,), generator=gen)
    policy = agent.policy
    step = policy.get_action(
        observe(contexts),
        torch.zeros(draws, NUM_SLOTS, dtype=torch.long),
        open_masks(draws),
        policy.initial_hidden(draws, "cpu"),
        generator=gen,
    )
    return paid(step.actions, contexts).float().mean().item()


def test_ppo_learns_to_pick_the_paid_op_and_slot_for_each_context() -> None:
    torch.manual_seed(0)
    policy = FactoredRecurrentActorCritic(
        state_dim(NUM_SLOTS), NUM_SLOTS, hidden_dim=32, lstm_hidden_dim=32, head_hidden_dim=32, seed=0
    )
    agent = PPOAgent(policy, PPOConfig(lr=1e-2, entropy_coef=0.01), n_envs=N_ENVS, n_steps=N_STEPS, device="cpu")
    gen = torch.Generator().manual_seed(1)
    before = paid_fraction(agent, gen)

    for _ in range(UPDATES):
        play_round(agent, gen)

    after = paid_fraction(agent, gen)
    assert before < 0.25, f"the untrained policy should be near chance (1/12), got {before:.2f}"
    assert after >= 0.9, f"after {UPDATES} updates the paid action was drawn {after:.0%} of the time"
