"""tripwire on PPO-PyTorch's `PPO.py` (https://github.com/nikhilbarhate99/PPO-PyTorch, 728cce8), left unedited.

Copy `examples/ppo-pytorch/ppo_run.py` beside `PPO.py` in a checkout, then, in an environment with torch, gymnasium
and tripwire:

    python -m tripwire run examples/ppo-pytorch/ppo_scenario.py --root path/to/PPO-PyTorch --out results/base

The instruments sit on PPO-PyTorch's own class: `select_action` and `update` as regions, an iteration per update,
and a checkpoint of the agent (both policies, the optimizer) after each update.
"""

from tripwire.scenario import Checkpoint, Iteration, Region, Scenario

scenario = Scenario(
    name="ppo-pytorch",
    script="ppo_run.py",
    regions=[Region("PPO:PPO.select_action", "act"), Region("PPO:PPO.update", "update")],
    iteration=Iteration("PPO:PPO.update"),
    checkpoints=[Checkpoint("PPO:PPO.update", capture=("self",))],
)
