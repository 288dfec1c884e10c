"""tripwire on Lightning Fabric's PPO example (`examples/fabric/reinforcement_learning/train_fabric.py`), unedited.

Run from that folder of a Lightning checkout (https://github.com/Lightning-AI/pytorch-lightning), in an environment
with torch, gymnasium, lightning, torchmetrics, tensorboard and tripwire:

    python -m tripwire run examples/fabric/ppo_scenario.py --root path/to/examples/fabric/reinforcement_learning \\
        --out results/base

The example is CleanRL's PPO moved onto Fabric: `fabric.setup` wraps the agent and its optimizer, `fabric.backward`
and `fabric.clip_gradients` run the update, torchmetrics' `MeanMetric` averages the episodes' returns on the device,
and `fabric.log` writes every scalar to a TensorBoard logger. The scenario runs 1,024 steps of 2 CartPole envs (4
updates of 2 epochs) and its closing test episode. The instruments sit on the example's own code: the agent's
`get_action_and_value` and the `train` function as regions, an iteration per `train`, a checkpoint of the agent and
the optimizer Fabric wrapped after each, and each `fabric.log` as an event. The steps-per-second scalar is left out by
name.
"""

from tripwire.scenario import Checkpoint, EventCall, Iteration, Region, Scenario

TRAIN = "__main__:train"

scenario = Scenario(
    name="fabric-ppo",
    script="train_fabric.py",
    argv=["--total-timesteps", "1024", "--num-envs", "2", "--num-steps", "128", "--update-epochs", "2"],
    regions=[
        Region("rl.agent:PPOLightningAgent.get_action_and_value", "act"),
        Region(TRAIN, "update"),
    ],
    iteration=Iteration(TRAIN),
    checkpoints=[Checkpoint(TRAIN, capture=("arg:agent", "arg:optimizer"))],
    event_calls=[EventCall("lightning.fabric.fabric:Fabric.log", label="name", fields=("value", "step"))],
    exclude=["Time/step_per_second::data.value", "event_id", "timestamp"],
)
