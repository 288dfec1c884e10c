"""tripwire on TorchRL 0.10.1's own MuJoCo PPO (`sota-implementations/ppo/ppo_mujoco.py`), fetched and left unedited.

Run from a checkout of TorchRL (https://github.com/pytorch/rl, tag v0.10.1), in an environment with torch,
torchrl 0.10.1, tensordict 0.10, hydra-core, gymnasium with mujoco, tqdm and tripwire:

    python -m tripwire run examples/torchrl/ppo_scenario.py --root path/to/rl --out results/base

The script is a hydra app, so its settings are hydra overrides given as argv: two collector batches of 2,048 frames
of HalfCheetah-v4, two PPO epochs of 32 minibatches each, no logger, one test episode, and hydra's folder kept in
the run's own. The script seeds nothing (torch draws its seed from the OS at import, gymnasium its envs' seeds), so
two runs differ from the first checkpoint and `run` says why; two adapters seed it without editing it: torch before
the models are built, and each env as `make_env` returns it. The instruments sit on TorchRL's classes: the
collector's rollout, GAE, the PPO loss and Adam's step as regions, an iteration per GAE call (one per epoch), and a
checkpoint of the loss module (actor and critic parameters) before each minibatch's loss. Two runs of one tree
compare identical (seen: 128 checkpoints, 37,259 syncs).
"""

from typing import Any

from tripwire.scenario import Adapter, Checkpoint, Iteration, Region, Scenario

LOSS = "torchrl.objectives.ppo:ClipPPOLoss.forward"
GAE = "torchrl.objectives.value.advantages:GAE.forward"
SEED = 0


def _seeded_models(make_ppo_models: Any) -> Any:
    def seeded(*args: Any, **kwargs: Any) -> Any:
        import torch

        torch.manual_seed(SEED)
        return make_ppo_models(*args, **kwargs)

    return seeded


def _seeded_env(make_env: Any) -> Any:
    def seeded(*args: Any, **kwargs: Any) -> Any:
        env = make_env(*args, **kwargs)
        env.set_seed(SEED)
        return env

    return seeded


scenario = Scenario(
    name="torchrl-ppo",
    script="sota-implementations/ppo/ppo_mujoco.py",
    paths=(".", "sota-implementations/ppo"),
    argv=[
        "logger.backend=",
        "collector.total_frames=4096",
        "loss.ppo_epochs=2",
        "logger.num_test_episodes=1",
        "hydra.run.dir=.",
        "hydra.output_subdir=null",
    ],
    regions=[
        Region("torchrl.collectors.collectors:SyncDataCollector.rollout", "collect"),
        Region(GAE, "advantage"),
        Region(LOSS, "loss"),
        Region("torch.optim:Adam.step", "optimizer"),
    ],
    iteration=Iteration(GAE),
    checkpoints=[Checkpoint(LOSS, capture=("self",))],
    adapters=[
        Adapter(
            wraps={"utils_mujoco:make_ppo_models": _seeded_models, "utils_mujoco:make_env": _seeded_env},
            note="the script seeds nothing: torch seeded before the models are built, each env as it is made",
        )
    ],
)
