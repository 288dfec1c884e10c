"""tripwire on CleanRL's own `cleanrl/ppo.py`, fetched and left unedited (docs/tripwire.md, "CleanRL's ppo.py").

Run from a checkout of CleanRL (https://github.com/vwxyzjn/cleanrl), in an environment with torch, gymnasium,
tyro, tensorboard and tripwire:

    python -m tripwire run examples/cleanrl/ppo_scenario.py --root path/to/cleanrl --out results/base

Every instrument is placed by name from here: the loop is the script's inline `__main__` block, so the regions are
the methods it calls (the agent's forward pass, the vector env's step, Adam's step), an iteration starts at each
bootstrap-value call (once per rollout), checkpoints digest the agent and the optimizer, and each tensorboard
scalar becomes a telemetry event.
"""

from tripwire.scenario import Checkpoint, EventCall, Iteration, Region, Scenario

scenario = Scenario(
    name="cleanrl-ppo",
    script="cleanrl/ppo.py",
    # 4 iterations of 4 envs x 128 steps on CartPole-v1, on the CPU
    argv=["--total-timesteps", "2048", "--num-envs", "4", "--num-steps", "128", "--no-cuda"],
    regions=[
        Region("__main__:Agent.get_action_and_value", "policy"),
        Region("gymnasium.vector:SyncVectorEnv.step", "env"),
        Region("torch.optim:Adam.step", "optimizer"),
    ],
    iteration=Iteration("__main__:Agent.get_value"),
    checkpoints=[
        Checkpoint("__main__:Agent.get_value", capture=("self", "return")),
        Checkpoint("torch.optim:Adam.step", capture=("self",)),
    ],
    event_calls=[EventCall("torch.utils.tensorboard:SummaryWriter.add_scalar", label="tag")],
    exclude=["charts/SPS::data.*"],  # steps per second: wall clock
)
