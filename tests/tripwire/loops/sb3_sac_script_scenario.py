"""tripwire's scenario for tests/tripwire/loops/sb3_sac_script.py: the whole algorithm (`self`) after every update,
with the wall-clock fields SB3's `Monitor` keeps left out by name."""

from tripwire.scenario import Checkpoint, Iteration, Region, Scenario

TRAIN = "stable_baselines3.sac.sac:SAC.train"

scenario = Scenario(
    name="sb3-sac",
    script="sb3_sac_script.py",
    regions=[Region(TRAIN, "train")],
    iteration=Iteration(TRAIN),
    checkpoints=[
        Checkpoint(
            TRAIN,
            capture=("self",),
            exclude=("self.start_time", "self.env.envs.*.t_start", "self.env.envs.*.episode_times"),
        )
    ],
)
