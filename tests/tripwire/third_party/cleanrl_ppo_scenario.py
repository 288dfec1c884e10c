"""tripwire's scenario for CleanRL's `ppo.py` as published (tests/tripwire/third_party/cleanrl): four short
iterations on CartPole, every instrument placed by name, its real `SummaryWriter.add_scalar` calls taken as events."""

from tripwire.scenario import Checkpoint, EventCall, Iteration, Region, Scenario

scenario = Scenario(
    name="cleanrl-ppo",
    script="ppo.py",
    argv=["--num-envs", "2", "--num-steps", "32", "--total-timesteps", "256", "--update-epochs", "2"],
    regions=[
        Region("__main__:Agent.get_action_and_value", "policy"),
        Region("torch.optim:Adam.step", "optimizer"),
    ],
    iteration=Iteration("__main__:Agent.get_value"),
    checkpoints=[
        Checkpoint("__main__:Agent.get_value", capture=("self", "return")),
        Checkpoint("torch.optim:Adam.step", capture=("self",), every=4),
    ],
    # a SummaryWriter scalar's fields are the call's own arguments: data.scalar_value and data.global_step
    event_calls=[EventCall("torch.utils.tensorboard.writer:SummaryWriter.add_scalar", label="tag")],
    exclude=["charts/SPS::data.scalar_value"],  # steps per second: wall clock
)
