"""tripwire's scenario for LeanRL's `leanrl/ppo_continuous_action_torchcompile.py`, a loop that compiles itself.

LeanRL (github.com/pytorch-labs/LeanRL) is CleanRL with torch.compile: with `--compile` the script compiles its
policy step (`torch.compile(agent.get_action_and_value)`), its GAE (`fullgraph=True`) and its update (a
`TensorDictModule`). The script runs unedited; this file places the instruments by name: a region on the compiled
policy step and one on the env step, an iteration at each rollout, and checkpoints of GAE's and the rollout's
results. Two adapters, nothing edited: wandb, which the script logs to, is replaced for the run by a stub that keeps
nothing (the script calls `wandb.init` unconditionally), and the vector env's first reset is seeded with the run's
seed (the script resets it unseeded, so two runs would start from different states). Pendulum-v1 keeps it to
gymnasium's classic-control envs (no MuJoCo). Written for gymnasium 0.29 (the script predates gymnasium 1.0).

    git clone https://github.com/pytorch-labs/LeanRL && pip install "gymnasium<1.0" tensordict==0.10.0 tyro tqdm
    python -m tripwire run examples/leanrl/ppo_continuous_scenario.py --root LeanRL --out results/base

(tensordict 0.11 and later change `.data`, under which the script fails on its own.) The suite runs this command on
the copy in tests/tripwire/third_party/leanrl (tests/tripwire/outside/test_third_party_leanrl.py).
"""

import sys
import types
from typing import Any

from tripwire.scenario import Adapter, Checkpoint, Iteration, Region, Scenario

_WANDB = types.ModuleType("tripwire_example_wandb")
_WANDB.init = lambda *args, **kwargs: None  # type: ignore[attr-defined]
_WANDB.log = lambda *args, **kwargs: None  # type: ignore[attr-defined]
sys.modules.setdefault("tripwire_example_wandb", _WANDB)
SEED = 1


def _seeded(reset: Any) -> Any:
    """`SyncVectorEnv.reset`, seeded with the run's seed when the script passes none."""

    def seeded_reset(self: Any, *, seed: Any = None, options: Any = None) -> Any:
        return reset(self, seed=SEED if seed is None else seed, options=options)

    return seeded_reset


scenario = Scenario(
    name="leanrl-ppo-continuous-compiled",
    script="leanrl/ppo_continuous_action_torchcompile.py",
    argv=[
        "--env-id",
        "Pendulum-v1",
        "--compile",
        "--no-cuda",
        "--total-timesteps",
        "2048",
        "--num-envs",
        "4",
        "--num-steps",
        "128",
        "--num-minibatches",
        "4",
        "--update-epochs",
        "2",
        "--measure-burnin",
        "1",
    ],
    regions=[
        Region("__main__:Agent.get_action_and_value", "policy"),  # the script compiles this bound method
        Region("__main__:step_func", "env"),
    ],
    iteration=Iteration("__main__:rollout", at="start"),
    checkpoints=[
        Checkpoint("__main__:gae", capture=("return",)),  # the compiled GAE's advantages and returns
        Checkpoint("__main__:rollout", capture=("return",)),
    ],
    adapters=[
        Adapter(aliases={"wandb": "tripwire_example_wandb"}, note="wandb replaced by a stub that keeps nothing"),
        Adapter(wraps={"gymnasium.vector.sync_vector_env:SyncVectorEnv.reset": _seeded}, note="envs reset seeded"),
    ],
)
