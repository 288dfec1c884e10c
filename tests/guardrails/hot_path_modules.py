"""The hot-path modules the static sync audit reads (the gate and the hazard runner share this list)."""

# The modules the epoch loop runs through: the engine's passes and transfer, the trainer's epoch, observation
# building, the policy call and its transfer, counterfactual attribution, action execution, the host and slots.
HOT_PATH_MODULES = (
    "src/esper/tolaria/engine.py",
    "src/esper/tolaria/epoch.py",
    "src/esper/tolaria/streams.py",
    "src/esper/tolaria/batches.py",
    "src/esper/tolaria/governor.py",
    "src/esper/simic/training/trainer.py",
    "src/esper/simic/training/observations.py",
    "src/esper/simic/training/policy_client.py",
    "src/esper/simic/training/counterfactual_eval.py",
    "src/esper/simic/training/action_execution.py",
    "src/esper/kasmina/model.py",
    "src/esper/kasmina/host.py",
    "src/esper/kasmina/slot.py",
    "src/esper/kasmina/blending.py",
    "src/esper/tamiyo/policy.py",
    "src/esper/tamiyo/features.py",
)
