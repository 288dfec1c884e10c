"""The factored LSTM actor-critic: the update replays exactly what the rollout sampled; masked draws; sizes."""

from __future__ import annotations

import torch

from esper.leyline import ACTION_HEAD_NAMES, CNN_BLUEPRINTS, AlphaMode, SeedStage
from esper.tamiyo.distributions import MaskedCategorical
from esper.tamiyo.features import state_dim
from esper.tamiyo.masks import SlotMaskState, compute_action_masks, stack_masks
from esper.tamiyo.policy import FactoredRecurrentActorCritic

K, T, SLOTS = 3, 5, 2


def policy(seed: int = 0) -> FactoredRecurrentActorCritic:
    return FactoredRecurrentActorCritic(state_dim(SLOTS), SLOTS, hidden_dim=16, lstm_hidden_dim=16, seed=seed)


def masks() -> dict[str, torch.Tensor]:
    stages = [SeedStage.DORMANT, SeedStage.BLENDING]
    one = compute_action_masks(
        [SlotMaskState(s, 5, AlphaMode.HOLD, True) for s in stages],
        max_seeds=None,
        seeds_used=0,
        allowed_blueprints=CNN_BLUEPRINTS,
    )
    return stack_masks([one] * K, torch.device("cpu"))


def test_state_dim_is_23_plus_31_per_slot() -> None:
    assert (state_dim(1), state_dim(3)) == (54, 116)


def test_same_seed_builds_identical_weights_without_touching_the_global_rng() -> None:
    before = torch.random.get_rng_state()
    a, b = policy(7), policy(7)

    assert torch.equal(torch.random.get_rng_state(), before)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_evaluate_actions_replays_the_rollouts_log_probs_and_values() -> None:
    net, m = policy(), masks()
    gen = torch.Generator().manual_seed(0)
    obs = torch.randn(K, T, state_dim(SLOTS), generator=gen)
    blueprints = torch.zeros(K, T, SLOTS, dtype=torch.long)
    hidden0 = net.initial_hidden(K, "cpu")
    hidden = hidden0
    sampled: dict[str, list[torch.Tensor]] = {name: [] for name in ACTION_HEAD_NAMES}
    logp: dict[str, list[torch.Tensor]] = {name: [] for name in ACTION_HEAD_NAMES}
    values = []
    for t in range(T):
        step = net.get_action(obs[:, t], blueprints[:, t], m, hidden, generator=gen)
        hidden = step.hidden
        values.append(step.values)
        for name in ACTION_HEAD_NAMES:
            sampled[name].append(step.actions[name])
            logp[name].append(step.log_probs[name])
    actions = {name: torch.stack(sampled[name], dim=1) for name in ACTION_HEAD_NAMES}
    seq_masks = {key: mask.unsqueeze(1).expand(K, T, *mask.shape[1:]) for key, mask in m.items()}

    replay_logp, _, replay_values = net.evaluate_actions(obs, blueprints, seq_masks, actions, hidden0)

    for name in ACTION_HEAD_NAMES:
        assert torch.allclose(replay_logp[name], torch.stack(logp[name], dim=1), atol=1e-5), name
    assert torch.allclose(replay_values, torch.stack(values, dim=1), atol=1e-5)


def test_the_slot_is_drawn_under_the_sampled_ops_slot_row() -> None:
    net, m = policy(), masks()
    gen = torch.Generator().manual_seed(3)
    for _ in range(30):
        step = net.get_action(
            torch.randn(K, state_dim(SLOTS), generator=gen),
            torch.zeros(K, SLOTS, dtype=torch.long),
            m,
            net.initial_hidden(K, "cpu"),
            generator=gen,
        )
        rows = m["slot_by_op"][torch.arange(K), step.actions["op"]]
        assert bool(rows[torch.arange(K), step.actions["slot"]].all())


def test_masked_entropy_is_normalized_by_the_number_of_valid_values() -> None:
    uniform = MaskedCategorical(
        torch.zeros(2, 4), torch.tensor([[True, True, False, False], [True, False, False, False]])
    )

    assert torch.allclose(uniform.entropy(), torch.tensor([1.0, 0.0]))


def test_a_masked_value_is_never_sampled_even_with_a_huge_logit() -> None:
    dist = MaskedCategorical(
        torch.tensor([[50.0, 0.0, 0.0]]).expand(500, 3), torch.tensor([False, True, True]).expand(500, 3)
    )

    assert not bool((dist.sample(torch.Generator().manual_seed(0)) == 0).any())
