"""tripwire's scenario for CleanRL's `sac_continuous_action.py` as published (tests/tripwire/third_party/cleanrl):
Pendulum, 300 random steps then 300 steps with an update each (three Adam optimizers, a replay buffer sampled with
NumPy's generator, `torch.distributions.Normal` with its argument checks), every instrument placed by name."""

from tripwire.scenario import Checkpoint, EventCall, Region, Scenario

ARGV = "--env-id Pendulum-v1 --total-timesteps 600 --learning-starts 300 --batch-size 32 --no-cuda"

scenario = Scenario(
    name="cleanrl-sac",
    script="sac_continuous_action.py",
    argv=ARGV.split(),
    regions=[
        Region("__main__:Actor.get_action", "actor"),
        Region("cleanrl_utils.buffers:ReplayBuffer.sample", "replay"),
        Region("torch.optim:Adam.step", "optimizer"),
    ],
    checkpoints=[
        Checkpoint("cleanrl_utils.buffers:ReplayBuffer.sample", capture=("return",), every=100),
        Checkpoint("torch.optim:Adam.step", capture=("self",), every=150),
    ],
    event_calls=[EventCall("torch.utils.tensorboard.writer:SummaryWriter.add_scalar", label="tag")],
    exclude=["charts/SPS::data.scalar_value"],  # steps per second: wall clock
)
