"""tripwire on rl_games 1.6.5's continuous PPO (`a2c_continuous`, IsaacGymEnvs' trainer), installed and unedited.

Copy `examples/rl_games/ppo_run.py` into a folder and, in an environment with torch, rl-games 1.6.5 (with gymnasium,
tensorboardX and setproctitle) and tripwire:

    PYTHONHASHSEED=0 python -m tripwire run examples/rl_games/ppo_scenario.py --root that/folder --out results/base

The driver trains 4 epochs of 256 reaching environments x 24 steps, written in torch as IsaacGymEnvs writes a task, on
the device given by `--device` (the CPU here), with rl_games' `torch.compile` off (`--compile` turns it on). The
instruments sit on rl_games' own classes: the rollout (`play_steps`), the env step and the minibatch update as
regions, an iteration per epoch, a checkpoint of the agent (its model, optimizer, normalizers, learning rate) after
each minibatch's gradient step, and each tensorboard scalar as an event. rl_games' scalars include its rates and
times (frames per second, seconds per phase): those are left out by name.
"""

from tripwire.scenario import Checkpoint, EventCall, Iteration, Region, Scenario

EPOCH = "rl_games.common.a2c_common:ContinuousA2CBase.train_epoch"
UPDATE = "rl_games.algos_torch.a2c_continuous:A2CAgent.train_actor_critic"

scenario = Scenario(
    name="rl_games-ppo",
    script="ppo_run.py",
    argv=["--envs", "256", "--epochs", "4"],
    regions=[
        Region("rl_games.common.a2c_common:A2CBase.play_steps", "rollout"),
        Region("rl_games.common.a2c_common:A2CBase.env_step", "env"),
        Region(UPDATE, "update"),
    ],
    iteration=Iteration(EPOCH),
    checkpoints=[
        Checkpoint(
            UPDATE,
            capture=("self.model", "self.optimizer", "self.last_lr", "return"),
        )
    ],
    event_calls=[EventCall("tensorboardX.writer:SummaryWriter.add_scalar", label="tag")],
    exclude=["performance/*::data.scalar_value", "*/time::data.global_step", "event_id", "timestamp"],
)
