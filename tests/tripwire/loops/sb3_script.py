"""A user's Stable-Baselines3 PPO run, as short as SB3's own quick start: tripwire instruments the library itself."""

from stable_baselines3 import PPO

model = PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=32, n_epochs=2, learning_rate=3e-4, seed=0, device="cpu")
model.learn(total_timesteps=256)
