"""tripwire on rsl_rl 5.4.2's PPO (`OnPolicyRunner`, the trainer of legged_gym and Isaac Lab), fetched and unedited.

Copy `examples/rsl_rl/ppo_run.py` to the root of an rsl_rl checkout (https://github.com/leggedrobotics/rsl_rl, tag
v5.4.2), then, in an environment with torch, tensordict, tensorboard, GitPython and tripwire:

    PYTHONHASHSEED=0 python -m tripwire run examples/rsl_rl/ppo_scenario.py --root path/to/rsl_rl --out results/base

The driver trains 4 iterations of 256 point-reaching environments x 24 steps, written in torch the way legged_gym
writes a robot's step, on the device given by `--device` (the CPU here). The instruments sit on rsl_rl's own
classes: the policy's `act`, the environment step and `update` as regions, an iteration per update, a checkpoint
of the algorithm (actor, critic, their normalizers, Adam, the rollout storage) with the update's mean losses, and
each tensorboard scalar as an event. rsl_rl logs its wall-clock figures (collection and learning times, steps per
second, the time-indexed curves): those scalars are left out by name. Its episode scalars are written in the order
of a set of their names, which follows Python's string hashing: with `PYTHONHASHSEED=0` two runs of one tree compare
identical (seen: 4 checkpoints, 1,386 syncs, 56 events); without it `compare` names the hashing.
"""

from tripwire.scenario import Checkpoint, EventCall, Iteration, Region, Scenario

UPDATE = "rsl_rl.algorithms.ppo:PPO.update"

scenario = Scenario(
    name="rsl_rl-ppo",
    script="ppo_run.py",
    argv=["--envs", "256", "--iterations", "4"],
    regions=[
        Region("rsl_rl.algorithms.ppo:PPO.act", "act"),
        Region("__main__:PointReach.step", "env"),
        Region("rsl_rl.algorithms.ppo:PPO.process_env_step", "store"),
        Region(UPDATE, "update"),
    ],
    iteration=Iteration(UPDATE),
    checkpoints=[Checkpoint(UPDATE, capture=("self", "return"))],
    event_calls=[EventCall("torch.utils.tensorboard.writer:SummaryWriter.add_scalar", label="tag")],
    # the wall-clock scalars (seconds, steps per second) and the curves indexed by elapsed seconds
    exclude=["Perf/*::data.scalar_value", "*/time::data.*", "event_id", "timestamp"],
)
