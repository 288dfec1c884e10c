"""tripwire's scenario for tests/tripwire/loops/sb3_script.py: the instruments sit on Stable-Baselines3 in
site-packages (nothing of SB3 or the script is edited), its rollout buffer (NumPy arrays) is digested after every
update and its logger's `record` calls are the events."""

from tripwire.scenario import Checkpoint, EventCall, Iteration, Region, Scenario

scenario = Scenario(
    name="sb3-ppo",
    script="sb3_script.py",
    regions=[
        Region("stable_baselines3.common.policies:ActorCriticPolicy.forward", "policy"),
        Region("stable_baselines3.ppo.ppo:PPO.train", "train"),
    ],
    iteration=Iteration("stable_baselines3.ppo.ppo:PPO.train"),
    checkpoints=[Checkpoint("stable_baselines3.ppo.ppo:PPO.train", capture=("self.rollout_buffer",))],
    # a logger entry's fields are `record`'s own arguments: data.value (and data.exclude when given)
    event_calls=[EventCall("stable_baselines3.common.logger:Logger.record", label="key")],
    exclude=["time/*::data.value"],  # fps and elapsed time: wall clock
)
