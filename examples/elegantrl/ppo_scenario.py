"""tripwire on ElegantRL's PPO and its GPU-vectorized `PointChasingVecEnv`, fetched and unedited.

Copy `examples/elegantrl/ppo_run.py` to the root of an ElegantRL checkout
(https://github.com/AI4Finance-Foundation/ElegantRL, commit 7c64395), then, in an environment with torch, numpy,
gymnasium, matplotlib and tripwire:

    python -m tripwire run examples/elegantrl/ppo_scenario.py --root path/to/ElegantRL --out results/base

The driver trains 4 updates of 32 environments x 64 steps in one process, on the device given by `--device` (the
CPU here), evaluating and saving the actor after each. The instruments sit on ElegantRL's own classes: the policy's
`explore_action`, the environment's `step`, `update_net` and the evaluation as regions, an iteration per update, a
checkpoint of the agent (actor, critic, their Adam states) with the update's mean objectives, and each evaluation
call (its exploration return and the update's objectives) as an event. The evaluator's wall-clock fields (its start
time, and the folder of the run) are left out by name.
"""

from tripwire.scenario import Checkpoint, EventCall, Iteration, Region, Scenario

UPDATE = "elegantrl.agents.AgentPPO:AgentPPO.update_net"
EVALUATE = "elegantrl.train.evaluator:Evaluator.evaluate_and_save"

scenario = Scenario(
    name="elegantrl-ppo",
    script="ppo_run.py",
    argv=["--envs", "32", "--horizon", "64", "--iterations", "4"],
    regions=[
        Region("elegantrl.agents.AgentPPO:AgentPPO.explore_action", "act"),
        Region("elegantrl.envs.PointChasingEnv:PointChasingVecEnv.step", "env"),
        Region(UPDATE, "update"),
        Region(EVALUATE, "evaluate"),
    ],
    iteration=Iteration(UPDATE),
    checkpoints=[Checkpoint(UPDATE, capture=("self", "return"))],
    event_calls=[EventCall(EVALUATE, label="evaluation", fields=("steps", "exp_r", "logging_tuple"))],
    exclude=["event_id", "timestamp"],
)
