"""tripwire's scenario for tests/tripwire/loops/compiled_script.py: the loop compiles its own parts; tripwire
places its instruments from outside, a region on a function the loop compiles included."""

from tripwire.scenario import Checkpoint, Iteration, Region, Scenario

scenario = Scenario(
    name="compiled-script",
    script="compiled_script.py",
    argv=["--compile-backend", "eager"],
    regions=[
        Region("__main__:Agent.get_action_and_value", "policy"),  # the loop compiles this bound method
        Region("__main__:ToyVecEnv.step", "env"),
        Region("__main__:update", "update"),  # and this function
    ],
    iteration=Iteration("__main__:Agent.get_value"),
    checkpoints=[Checkpoint("torch.optim:Adam.step", capture=("self",))],
)
