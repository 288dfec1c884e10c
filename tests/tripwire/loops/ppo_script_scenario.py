"""tripwire's scenario for tests/tripwire/loops/ppo_script.py: every instrument placed from outside, by name."""

from tripwire.scenario import Checkpoint, EventCall, Iteration, Region, Scenario

scenario = Scenario(
    name="ppo-script",
    script="ppo_script.py",
    argv=["--total-timesteps", "384"],
    regions=[
        Region("__main__:Agent.get_action_and_value", "policy"),
        Region("__main__:ToyVecEnv.step", "env"),
        Region("torch.optim:Adam.step", "optimizer"),
    ],
    iteration=Iteration("__main__:Agent.get_value"),
    checkpoints=[
        Checkpoint("__main__:Agent.get_value", capture=("self", "return")),
        Checkpoint("torch.optim:Adam.step", capture=("self",)),
    ],
    event_calls=[EventCall("__main__:Writer.add_scalar", label="tag")],
    exclude=["charts/SPS::data.value"],  # steps per second: wall clock
)
