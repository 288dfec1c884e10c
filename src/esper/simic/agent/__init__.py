"""simic.agent: the PPO agent and its rollout buffer (imports esper.leyline, esper.tamiyo and torch)."""

from esper.simic.agent.buffer import RolloutBuffer
from esper.simic.agent.ppo import (
    NonFiniteUpdateError,
    PPOAgent,
    PPOConfig,
    PPOMetrics,
    calculate_entropy_anneal_steps,
    default_head_entropy_weights,
)

__all__ = [
    "NonFiniteUpdateError",
    "PPOAgent",
    "PPOConfig",
    "PPOMetrics",
    "RolloutBuffer",
    "calculate_entropy_anneal_steps",
    "default_head_entropy_weights",
]
