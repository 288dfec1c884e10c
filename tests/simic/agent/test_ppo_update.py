"""The PPO update's gates and knobs: entropy annealing, per-head entropy weights, the finiteness gate and the
target-KL early stop, each on a tiny agent over a synthetic rollout."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from esper.leyline import ACTION_HEAD_NAMES, CNN_BLUEPRINTS, AlphaMode, SeedStage
from esper.simic.agent.ppo import NonFiniteUpdateError, PPOAgent, PPOConfig, default_head_entropy_weights
from esper.tamiyo.features import state_dim
from esper.tamiyo.masks import SlotMaskState, compute_action_masks, stack_masks
from esper.tamiyo.policy import FactoredRecurrentActorCritic

NUM_SLOTS = 2
N_ENVS = 3
N_STEPS = 4


def make_agent(config: PPOConfig, seed: int = 0) -> PPOAgent:
    policy = FactoredRecurrentActorCritic(
        state_dim(NUM_SLOTS), NUM_SLOTS, hidden_dim=16, lstm_hidden_dim=16, head_hidden_dim=16, seed=seed
    )
    return PPOAgent(policy, config, n_envs=N_ENVS, n_steps=N_STEPS, device="cpu")


def dormant_masks() -> dict[str, torch.Tensor]:
    slots = [SlotMaskState(SeedStage.DORMANT, 0, AlphaMode.HOLD, True) for _ in range(NUM_SLOTS)]
    one = compute_action_masks(slots, max_seeds=None, seeds_used=0, allowed_blueprints=CNN_BLUEPRINTS)
    return stack_masks([one] * N_ENVS, torch.device("cpu"))


def fill_rollout(agent: PPOAgent, seed: int = 0, reward_scale: float = 1.0) -> None:
    """One round of N_STEPS steps sampled from the agent's own policy, random rewards, truncated at the end."""
    gen = torch.Generator().manual_seed(seed)
    policy, masks = agent.policy, dormant_masks()
    hidden = policy.initial_hidden(N_ENVS, "cpu")
    blueprints = torch.zeros(N_ENVS, NUM_SLOTS, dtype=torch.long)
    for t in range(N_STEPS):
        obs = torch.randn(N_ENVS, state_dim(NUM_SLOTS), generator=gen)
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
            rewards=reward_scale * torch.randn(N_ENVS, generator=gen),
            dones=torch.zeros(N_ENVS, dtype=torch.bool),
            truncated=torch.full((N_ENVS,), t == N_STEPS - 1),
            hidden=hidden,
        )
        hidden = step.hidden
    agent.buffer.set_bootstrap(torch.zeros(N_ENVS))


def params_of(agent: PPOAgent, prefix: str = "") -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in agent.policy.named_parameters() if n.startswith(prefix)}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ---- entropy annealing ----


def test_entropy_coefficient_moves_linearly_from_start_to_end_over_the_anneal_steps() -> None:
    agent = make_agent(PPOConfig(entropy_coef=0.1, entropy_coef_end=0.02, entropy_anneal_steps=4))
    seen = []
    for _ in range(6):
        seen.append(agent.entropy_coef)
        agent.update_count += 1

    assert seen == pytest.approx([0.1, 0.08, 0.06, 0.04, 0.02, 0.02])


def test_annealed_entropy_coefficient_never_drops_below_the_floor() -> None:
    agent = make_agent(PPOConfig(entropy_coef=0.05, entropy_coef_end=0.0, entropy_anneal_steps=2, entropy_floor=0.01))
    agent.update_count = 2

    assert agent.entropy_coef == 0.01


def test_without_an_end_value_the_entropy_coefficient_stays_put() -> None:
    agent = make_agent(PPOConfig(entropy_coef=0.07, entropy_anneal_steps=10))
    agent.update_count = 5

    assert agent.entropy_coef == 0.07


def test_each_update_reports_the_coefficient_it_used_and_advances_the_schedule() -> None:
    agent = make_agent(PPOConfig(entropy_coef=0.1, entropy_coef_end=0.05, entropy_anneal_steps=2, target_kl=None))
    used = []
    for round_seed in range(3):
        fill_rollout(agent, seed=round_seed)
        used.append(agent.update().entropy_coef)

    assert used == pytest.approx([0.1, 0.075, 0.05])


# ---- per-head entropy weights ----


def test_default_head_entropy_weights_follow_jan() -> None:
    assert default_head_entropy_weights() == {
        "slot": 1.0,
        "blueprint": 1.3,
        "style": 1.2,
        "tempo": 1.3,
        "alpha_target": 1.2,
        "alpha_speed": 1.2,
        "alpha_curve": 1.2,
        "op": 1.0,
    }


def test_a_head_entropy_weight_changes_only_that_heads_update() -> None:
    base = PPOConfig(entropy_coef=0.5, max_grad_norm=1e9, target_kl=None, lr=1e-2)
    boosted = dataclasses.replace(base, head_entropy_weights={**base.head_entropy_weights, "blueprint": 10.0})
    plain_agent, boosted_agent = make_agent(base), make_agent(boosted)
    for agent in (plain_agent, boosted_agent):
        fill_rollout(agent, seed=4)
        agent.update()

    assert not same(params_of(plain_agent, "heads.blueprint."), params_of(boosted_agent, "heads.blueprint."))
    for head in ACTION_HEAD_NAMES:
        if head != "blueprint":
            assert same(params_of(plain_agent, f"heads.{head}."), params_of(boosted_agent, f"heads.{head}.")), head


def test_head_entropy_weights_must_name_every_head() -> None:
    with pytest.raises(ValueError, match="must name exactly the heads"):
        PPOConfig(head_entropy_weights={"op": 1.0})


# ---- finiteness gate ----


def poison_rewards(agent: PPOAgent) -> None:
    agent.buffer.rewards[0, 1] = float("nan")


def test_a_non_finite_update_is_skipped_and_leaves_the_weights_alone() -> None:
    agent = make_agent(PPOConfig(target_kl=None))
    fill_rollout(agent)
    poison_rewards(agent)
    before = params_of(agent)

    metrics = agent.update()

    assert metrics.skipped
    assert same(before, params_of(agent))
    assert agent.buffer.step_count == 0


def test_the_third_consecutive_non_finite_update_raises() -> None:
    agent = make_agent(PPOConfig(target_kl=None))
    for _ in range(2):
        fill_rollout(agent)
        poison_rewards(agent)
        assert agent.update().skipped
    fill_rollout(agent)
    poison_rewards(agent)

    with pytest.raises(NonFiniteUpdateError, match="3 consecutive non-finite PPO updates"):
        agent.update()


def test_a_finite_update_resets_the_non_finite_streak() -> None:
    agent = make_agent(PPOConfig(target_kl=None))
    for poisoned in (True, True, False, True, True):
        fill_rollout(agent)
        if poisoned:
            poison_rewards(agent)
        agent.update()

    assert agent.consecutive_nonfinite == 2


def test_a_finite_update_changes_the_weights() -> None:
    agent = make_agent(PPOConfig(target_kl=None))
    fill_rollout(agent)
    before = params_of(agent)

    metrics = agent.update()

    assert not metrics.skipped and not same(before, params_of(agent))


# ---- target-KL early stop ----


def test_kl_above_one_and_a_half_target_stops_the_remaining_epochs() -> None:
    config = PPOConfig(lr=5e-2, ppo_epochs=4, target_kl=1e-9)
    stopped, single = make_agent(config), make_agent(dataclasses.replace(config, ppo_epochs=1, target_kl=None))
    for agent in (stopped, single):
        fill_rollout(agent, seed=2)

    metrics = stopped.update()
    single.update()

    assert metrics.early_stopped
    assert same(params_of(stopped), params_of(single)), "only the first epoch (KL still 0) may step"
    assert stopped.buffer.step_count == 0


def test_without_a_target_kl_every_epoch_steps() -> None:
    config = PPOConfig(lr=5e-2, ppo_epochs=3, target_kl=None)
    multi, single = make_agent(config), make_agent(dataclasses.replace(config, ppo_epochs=1))
    for agent in (multi, single):
        fill_rollout(agent, seed=2)

    metrics = multi.update()
    single.update()

    assert not metrics.early_stopped
    assert not same(params_of(multi), params_of(single))
