"""tripwire on Tianshou 2.0.1's discrete PPO, from outside, nothing edited (docs/tripwire.md: a checkpoint's `exclude`).

Copy `examples/tianshou/ppo_run.py` to the root of a Tianshou checkout (https://github.com/thu-ml/tianshou, 2.0.1),
then, in an environment with torch, Tianshou's dependencies and tripwire:

    python -m tripwire run examples/tianshou/ppo_scenario.py --root path/to/tianshou --out results/base

The instruments sit on Tianshou's own classes: a region on the collector and one on the on-policy update, an
iteration per update, checkpoints of the algorithm (its modules' and optimizers' state) with the update's statistics
and of the collector (buffer, envs), and each tensorboard scalar as an event. Tianshou's statistics and scalars carry
the seconds each part took: the update checkpoint leaves out `return.train_time` by name, and the events their
time and speed scalars, so two runs of one tree compare identical (seen: 6 checkpoints, 2,424 syncs, 81 events) and
a changed `--vf_coef` is a value change from the first update on.
"""

from tripwire.scenario import Checkpoint, EventCall, Iteration, Region, Scenario

UPDATE = "tianshou.algorithm.algorithm_base:OnPolicyAlgorithm.update"

scenario = Scenario(
    name="tianshou-ppo",
    script="ppo_run.py",
    regions=[
        Region("tianshou.data.collector:BaseCollector.collect", "collect"),
        Region(UPDATE, "update"),
    ],
    iteration=Iteration(UPDATE),
    checkpoints=[
        Checkpoint(UPDATE, capture=("self", "return"), exclude=("return.train_time",)),
        Checkpoint("tianshou.data.collector:BaseCollector.collect", capture=("self",), every=4),
    ],
    event_calls=[EventCall("torch.utils.tensorboard.writer:SummaryWriter.add_scalar", label="tag")],
    exclude=["*time*::data.scalar_value", "*speed*::data.scalar_value", "event_id", "timestamp"],
)
