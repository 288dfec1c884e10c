"""tripwire on torch-ac 1.4.0's PPO (the trainer of rl-starter-files), from PyPI and unedited.

In an environment with torch, gymnasium, torch-ac and tripwire (or torch-ac's checkout on PYTHONPATH):

    python -m tripwire run examples/torch_ac/ppo_scenario.py --root examples/torch_ac --out results/base

The driver trains 4 updates of 4 CartPole environments x 128 frames, three of the environments in worker processes
torch-ac forks (`ParallelEnv`), on the device given by `--device` (the CPU here). The instruments sit on torch-ac's
own classes: the environments' step, the rollout and the update as regions, an iteration per update, a checkpoint
of the algorithm after each update (model, Adam, the rollout buffers) with the update's logs, and each update's
printed log as an event. The worker processes and their pipes are left out of the checkpoint by name.
"""

from tripwire.scenario import Checkpoint, EventCall, Iteration, Region, Scenario

UPDATE = "torch_ac.algos.ppo:PPOAlgo.update_parameters"

scenario = Scenario(
    name="torch_ac-ppo",
    script="ppo_run.py",
    argv=["--envs", "4", "--frames", "128", "--updates", "4"],
    regions=[
        Region("torch_ac.utils.penv:ParallelEnv.step", "env"),
        Region("torch_ac.algos.base:BaseAlgo.collect_experiences", "collect"),
        Region(UPDATE, "update"),
    ],
    iteration=Iteration(UPDATE),
    checkpoints=[Checkpoint(UPDATE, capture=("self", "return"), exclude=("self.env.*",))],
    event_calls=[EventCall("__main__:log_update", label="update", fields=("update", "frames", "logs"))],
    exclude=["event_id", "timestamp"],
)
