"""simic: the controller's training (PPO agent and rollout buffer in `simic.agent`, rewards and normalizers,
and the vectorized training loop in `simic.training`).

This package imports nothing itself; import the subpackage you need.
"""
