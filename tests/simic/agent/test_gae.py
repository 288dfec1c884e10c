"""GAE in the rollout buffer: per env, bootstrapped on truncation, cut on done (checked against a hand loop)."""

from __future__ import annotations

import pytest
import torch

from esper.simic.agent.buffer import RolloutBuffer

GAMMA, LAMBDA = 0.9, 0.8


def buffer_with(
    rewards: list[list[float]],
    values: list[list[float]],
    *,
    bootstrap: list[float],
    done: frozenset[tuple[int, int]] = frozenset(),
    truncated: frozenset[tuple[int, int]] = frozenset(),
) -> RolloutBuffer:
    n_envs, n_steps = len(rewards), len(rewards[0])
    buffer = RolloutBuffer(n_envs, n_steps, state_dim=1, num_slots=1, lstm_hidden_dim=1, device="cpu")
    buffer.rewards[:] = torch.tensor(rewards)
    buffer.values[:] = torch.tensor(values)
    for env, step in done:
        buffer.dones[env, step] = True
    for env, step in truncated:
        buffer.truncated[env, step] = True
    buffer.step_count = n_steps
    buffer.set_bootstrap(torch.tensor(bootstrap))
    return buffer


def reference_gae(rewards: list[float], values: list[float], last_value: float, done_at: int | None) -> list[float]:
    """Textbook GAE for one env's episode; `last_value` is V(s_T) (0 when the episode ended in a done)."""
    advantages, running = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        terminal = done_at == t
        next_value = 0.0 if terminal else (last_value if t == len(rewards) - 1 else values[t + 1])
        delta = rewards[t] + GAMMA * next_value - values[t]
        running = delta + (0.0 if terminal else GAMMA * LAMBDA * running)
        advantages[t] = running
    return advantages


def test_truncated_last_step_bootstraps_from_each_envs_own_value() -> None:
    rewards = [[1.0, 0.0, 2.0], [0.5, -1.0, 0.0]]
    values = [[0.2, 0.4, 0.1], [0.0, 0.3, -0.2]]
    buffer = buffer_with(rewards, values, truncated=frozenset({(0, 2), (1, 2)}), bootstrap=[1.5, -3.0])

    advantages, returns = buffer.compute_gae(GAMMA, LAMBDA)

    for env in range(2):
        expected = reference_gae(rewards[env], values[env], [1.5, -3.0][env], None)
        assert advantages[env].tolist() == pytest.approx(expected)
    assert torch.allclose(returns, advantages + torch.tensor(values))


def test_envs_do_not_leak_into_each_other() -> None:
    rewards = [[1.0, 1.0], [0.0, 0.0]]
    values = [[0.0, 0.0], [0.0, 0.0]]
    base = buffer_with(rewards, values, truncated=frozenset({(0, 1), (1, 1)}), bootstrap=[0.0, 0.0])
    changed = buffer_with(
        [[1.0, 1.0], [5.0, -5.0]], values, truncated=frozenset({(0, 1), (1, 1)}), bootstrap=[0.0, 9.0]
    )

    assert torch.equal(base.compute_gae(GAMMA, LAMBDA)[0][0], changed.compute_gae(GAMMA, LAMBDA)[0][0])


def test_a_done_step_never_bootstraps() -> None:
    rewards = [[1.0, 2.0]]
    values = [[0.5, 0.5]]
    with_big_bootstrap = buffer_with(rewards, values, done=frozenset({(0, 1)}), bootstrap=[100.0])

    advantages, _ = with_big_bootstrap.compute_gae(GAMMA, LAMBDA)

    assert advantages[0].tolist() == pytest.approx(reference_gae(rewards[0], values[0], 0.0, done_at=1))


def test_a_mid_episode_done_cuts_the_recursion() -> None:
    rewards = [[1.0, 2.0, 3.0]]
    values = [[0.0, 0.0, 0.0]]
    buffer = buffer_with(rewards, values, done=frozenset({(0, 0)}), truncated=frozenset({(0, 2)}), bootstrap=[0.0])

    advantages, _ = buffer.compute_gae(GAMMA, LAMBDA)

    assert advantages[0, 0].item() == pytest.approx(1.0)  # r_0 only: no value and no advantage flow back


def test_rollback_penalty_replaces_the_last_reward_and_ends_the_episode() -> None:
    buffer = buffer_with([[1.0, 1.0]], [[0.0, 0.0]], truncated=frozenset({(0, 1)}), bootstrap=[50.0])

    buffer.replace_last_reward(0, -4.0)
    advantages, _ = buffer.compute_gae(GAMMA, LAMBDA)

    assert advantages[0, 1].item() == pytest.approx(-4.0)
    assert bool(buffer.dones[0, 1]) and not bool(buffer.truncated[0, 1])


def test_gae_on_an_empty_buffer_is_refused() -> None:
    buffer = RolloutBuffer(1, 2, state_dim=1, num_slots=1, lstm_hidden_dim=1, device="cpu")

    with pytest.raises(ValueError, match="empty buffer"):
        buffer.compute_gae(GAMMA, LAMBDA)
