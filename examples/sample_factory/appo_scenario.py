"""tripwire on Sample Factory 2.1.1's APPO in its serial mode, from PyPI and unedited.

In an environment with torch, gymnasium, sample-factory (and its numpy below 2) and tripwire:

    PYTHONHASHSEED=0 python -m tripwire run examples/sample_factory/appo_scenario.py \\
        --root examples/sample_factory --out results/base

The driver trains 1,280 CartPole steps (4 environments, rollouts of 32, batches of 128: 10 learner updates), every
component in one process. The instruments sit on Sample Factory's own classes: the rollout worker's step, the
inference worker's policy step and the learner's `train` as regions, an iteration per `train`, a checkpoint of the
actor-critic and its Adam after each with the training statistics `train` returns, and each tensorboard scalar as an
event. Its wall-clock scalars (frames per second, memory, its timing tree) are left out by name.
"""

from tripwire.scenario import Checkpoint, EventCall, Iteration, Region, Scenario

TRAIN = "sample_factory.algo.learning.learner:Learner.train"

scenario = Scenario(
    name="sample_factory-appo",
    script="appo_run.py",
    argv=["--envs", "4", "--steps", "1024"],
    regions=[
        Region("sample_factory.algo.sampling.non_batched_sampling:NonBatchedVectorEnvRunner.advance_rollouts", "collect"),
        Region("sample_factory.algo.sampling.inference_worker:InferenceWorker._handle_policy_steps", "inference"),
        Region(TRAIN, "learn"),
    ],
    iteration=Iteration(TRAIN),
    checkpoints=[Checkpoint(TRAIN, capture=("self.actor_critic", "self.optimizer", "return"))],
    event_calls=[EventCall("tensorboardX.writer:SummaryWriter.add_scalar", label="tag")],
    exclude=["perf/*::data.*", "stats/*::data.*", "event_id", "timestamp"],
)
