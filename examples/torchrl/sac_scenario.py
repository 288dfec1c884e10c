"""tripwire on TorchRL 0.10.1's own SAC (`sota-implementations/sac/sac.py`), fetched and left unedited.

Run from a checkout of TorchRL (https://github.com/pytorch/rl, tag v0.10.1), in the environment the PPO scenario
beside this one names:

    python -m tripwire run examples/torchrl/sac_scenario.py --root path/to/rl --out results/base

3,000 frames of HalfCheetah-v4 on one env (1,000 of them random, before the first update), batches of 500 frames,
minibatches of 64, no logger; regions on `SACLoss.forward` and Adam's step, an iteration and a checkpoint of the loss
module (actor, Q networks, their targets, the entropy coefficient) at each loss. The script seeds torch, NumPy and
its envs with `env.seed` (42), yet two runs differ: its replay buffer samples ahead on a thread pool (`prefetch=3` in
`make_replay_buffer`), drawing from torch's default generator while the main thread draws the policy's actions, in
the order the OS runs them. `run` names the threads that drew (4: the main one and three of the pool), and `compare`
adds `torch drawn on several threads` to the trajectory difference (seen at updates 978 and 659).
"""

from tripwire.scenario import Checkpoint, Iteration, Region, Scenario

LOSS = "torchrl.objectives.sac:SACLoss.forward"

scenario = Scenario(
    name="torchrl-sac",
    script="sota-implementations/sac/sac.py",
    paths=(".", "sota-implementations/sac"),
    argv=[
        "logger.backend=",
        "collector.total_frames=3000",
        "collector.init_random_frames=1000",
        "collector.frames_per_batch=500",
        "collector.env_per_collector=1",
        "collector.init_env_steps=500",
        "optim.batch_size=64",
        "hydra.run.dir=.",
        "hydra.output_subdir=null",
    ],
    regions=[Region(LOSS, "loss"), Region("torch.optim:Adam.step", "optimizer")],
    iteration=Iteration(LOSS),
    checkpoints=[Checkpoint(LOSS, capture=("self",))],
)
