"""`calculate_entropy_anneal_steps` (brief 1.14): ceil(episodes / n_envs) rounds times max(1, updates per round)."""

from __future__ import annotations

import pytest

from esper.simic.agent.ppo import calculate_entropy_anneal_steps


@pytest.mark.parametrize(
    ("episodes", "n_envs", "updates", "steps"),
    [(100, 4, 1, 25), (100, 4, 2, 50), (100, 1, 1, 100)],
)
def test_steps_are_rounds_times_updates_per_round(episodes: int, n_envs: int, updates: int, steps: int) -> None:
    assert calculate_entropy_anneal_steps(episodes, n_envs, updates) == steps


@pytest.mark.parametrize("episodes", [0, -1, -100])
def test_zero_or_negative_episodes_disable_annealing(episodes: int) -> None:
    assert calculate_entropy_anneal_steps(episodes, 4, 1) == 0


def test_rounds_are_rounded_up() -> None:
    assert calculate_entropy_anneal_steps(10, 3, 1) == 4


def test_eight_envs_round_up_one_hundred_episodes_to_thirteen_rounds() -> None:
    assert calculate_entropy_anneal_steps(100, 8, 1) == 13


@pytest.mark.parametrize("n_envs", [0, -2])
def test_non_positive_env_count_raises(n_envs: int) -> None:
    with pytest.raises(ValueError, match="n_envs must be positive"):
        calculate_entropy_anneal_steps(100, n_envs, 1)


def test_zero_updates_per_round_counts_as_one() -> None:
    assert calculate_entropy_anneal_steps(100, 4, 0) == 25
