"""Contracts of the factored action space between masks, policy, buffer, agent and the public entry point."""

from __future__ import annotations

import inspect

import pytest
import torch

from esper.leyline import ACTION_HEAD_NAMES, CNN_BLUEPRINTS, MASK_KEYS, AlphaMode, SeedStage, head_sizes
from esper.simic.agent.buffer import RolloutBuffer
from esper.simic.agent.ppo import PPOAgent
from esper.simic.training.vectorized import train_ppo_vectorized
from esper.tamiyo.features import state_dim
from esper.tamiyo.masks import SlotMaskState, compute_action_masks, mask_shapes, stack_masks
from esper.tamiyo.policy import FactoredRecurrentActorCritic

NUM_SLOTS = 3
N_ENVS = 4
EXPECTED_SHAPES = {
    "slot": (NUM_SLOTS,),
    "blueprint": (13,),
    "style": (4,),
    "tempo": (3,),
    "alpha_target": (3,),
    "alpha_speed": (4,),
    "alpha_curve": (5,),
    "op": (6,),
    "slot_by_op": (6, NUM_SLOTS),
}


def env_masks(stages: tuple[SeedStage, ...] = (SeedStage.DORMANT,) * NUM_SLOTS) -> dict[str, torch.Tensor]:
    slots = [SlotMaskState(stage=s, age=5, alpha_mode=AlphaMode.HOLD, enabled=True) for s in stages]
    return compute_action_masks(slots, max_seeds=None, seeds_used=0, allowed_blueprints=CNN_BLUEPRINTS)


def batched_masks() -> dict[str, torch.Tensor]:
    stages = [SeedStage.DORMANT, SeedStage.TRAINING, SeedStage.HOLDING, SeedStage.BLENDING]
    return stack_masks([env_masks((stage,) * NUM_SLOTS) for stage in stages], torch.device("cpu"))


def small_policy() -> FactoredRecurrentActorCritic:
    return FactoredRecurrentActorCritic(state_dim(NUM_SLOTS), NUM_SLOTS, hidden_dim=16, lstm_hidden_dim=16)


def test_masks_have_exactly_the_nine_keys() -> None:
    assert tuple(env_masks()) == MASK_KEYS
    assert len(MASK_KEYS) == 9


def test_mask_shapes_follow_the_brief() -> None:
    assert {key: tuple(mask.shape) for key, mask in env_masks().items()} == EXPECTED_SHAPES


def test_every_mask_is_bool() -> None:
    assert {mask.dtype for mask in env_masks().values()} == {torch.bool}


def test_batched_masks_lead_with_the_env_dimension() -> None:
    shapes = {key: tuple(mask.shape) for key, mask in batched_masks().items()}

    assert shapes == {key: (N_ENVS, *shape) for key, shape in EXPECTED_SHAPES.items()}


def test_head_sizes_match_the_mask_widths() -> None:
    assert {name: (size,) for name, size in head_sizes(NUM_SLOTS).items()} == {
        name: EXPECTED_SHAPES[name] for name in ACTION_HEAD_NAMES
    }


def test_get_action_returns_every_head_and_one_value_per_env() -> None:
    policy = small_policy()
    obs = torch.zeros(N_ENVS, state_dim(NUM_SLOTS))
    blueprints = torch.zeros(N_ENVS, NUM_SLOTS, dtype=torch.long)
    generator = torch.Generator().manual_seed(0)

    step = policy.get_action(
        obs, blueprints, batched_masks(), policy.initial_hidden(N_ENVS, "cpu"), generator=generator
    )

    assert tuple(step.actions) == ACTION_HEAD_NAMES
    assert {name: tuple(a.shape) for name, a in step.actions.items()} == {name: (N_ENVS,) for name in ACTION_HEAD_NAMES}
    assert step.values.shape == (N_ENVS,)
    assert step.hidden[0].shape == step.hidden[1].shape == (1, N_ENVS, 16)


def test_sampled_actions_respect_the_masks() -> None:
    policy = small_policy()
    masks = batched_masks()
    generator = torch.Generator().manual_seed(1)
    obs = torch.randn(N_ENVS, state_dim(NUM_SLOTS), generator=generator)

    for _ in range(20):
        step = policy.get_action(
            obs,
            torch.zeros(N_ENVS, NUM_SLOTS, dtype=torch.long),
            masks,
            policy.initial_hidden(N_ENVS, "cpu"),
            generator=generator,
        )
        for name in ACTION_HEAD_NAMES:
            chosen = masks[name].gather(1, step.actions[name].unsqueeze(1))
            assert bool(chosen.all()), f"head {name} sampled a masked value"


def test_buffer_accepts_every_head_plus_the_lstm_state() -> None:
    policy = small_policy()
    buffer = RolloutBuffer(N_ENVS, 2, state_dim(NUM_SLOTS), NUM_SLOTS, 16, "cpu")
    obs = torch.zeros(N_ENVS, state_dim(NUM_SLOTS))
    blueprints = torch.zeros(N_ENVS, NUM_SLOTS, dtype=torch.long)
    hidden = policy.initial_hidden(N_ENVS, "cpu")
    step = policy.get_action(obs, blueprints, batched_masks(), hidden, generator=torch.Generator().manual_seed(0))

    buffer.add(
        step=0,
        obs=obs,
        blueprint_idx=blueprints,
        masks=batched_masks(),
        actions=step.actions,
        log_probs=step.log_probs,
        values=step.values,
        effective_op=step.actions["op"],
        rewards=torch.ones(N_ENVS),
        dones=torch.zeros(N_ENVS, dtype=torch.bool),
        truncated=torch.zeros(N_ENVS, dtype=torch.bool),
        hidden=(torch.full_like(hidden[0], 0.5), torch.full_like(hidden[1], -0.5)),
    )

    assert buffer.step_count == 1
    assert all(torch.equal(buffer.actions[name][:, 0], step.actions[name]) for name in ACTION_HEAD_NAMES)
    assert bool((buffer.hidden_h[:, 0] == 0.5).all()) and bool((buffer.hidden_c[:, 0] == -0.5).all())


def test_buffer_refuses_a_step_missing_a_head() -> None:
    buffer = RolloutBuffer(1, 1, state_dim(1), 1, 8, "cpu")
    actions = {name: torch.zeros(1, dtype=torch.long) for name in ACTION_HEAD_NAMES if name != "tempo"}
    log_probs = {name: torch.zeros(1) for name in ACTION_HEAD_NAMES}

    with pytest.raises(KeyError, match=r"missing \['tempo'\]"):
        buffer.add(
            step=0,
            obs=torch.zeros(1, state_dim(1)),
            blueprint_idx=torch.zeros(1, 1, dtype=torch.long),
            masks={key: torch.ones(1, *shape, dtype=torch.bool) for key, shape in mask_shapes(1).items()},
            actions=actions,
            log_probs=log_probs,
            values=torch.zeros(1),
            effective_op=torch.zeros(1, dtype=torch.long),
            rewards=torch.zeros(1),
            dones=torch.zeros(1, dtype=torch.bool),
            truncated=torch.zeros(1, dtype=torch.bool),
            hidden=(torch.zeros(1, 1, 8), torch.zeros(1, 1, 8)),
        )


def test_train_ppo_vectorized_takes_the_loop_shape_and_no_recurrent_flag() -> None:
    params = inspect.signature(train_ppo_vectorized).parameters

    assert {"n_episodes", "n_envs", "max_epochs", "slots"} <= set(params)
    assert "recurrent" not in params


def test_ppo_agent_has_no_factored_or_recurrent_switch() -> None:
    params = set(inspect.signature(PPOAgent.__init__).parameters)

    assert not params & {"factored", "recurrent"}
    assert {"policy", "config", "n_envs", "n_steps", "device"} <= params
