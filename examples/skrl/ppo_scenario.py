"""tripwire on skrl 2.0.0's Pendulum PPO example, fetched and left unedited.

Run from a checkout of skrl (https://github.com/Toni-SM/skrl, release 2.0.0), installed in an environment with
torch, gymnasium and tripwire:

    python -m tripwire run examples/skrl/ppo_scenario.py --root path/to/skrl --out results/base

The example trains for 100,000 timesteps, a figure written in the script: an adapter wraps the trainer's
constructor to cap it at 2,048 (two updates of its 1,024-step rollout) without touching the file. The instruments
sit on skrl's own classes: the agent's `act` and `update` as regions, an iteration per update, checkpoints of the
agent (models, optimizer, preprocessors, scheduler, its tracked data) after each update, and each scalar skrl's own
tensorboard writer adds as an event. Two runs of one tree compare identical (seen: 2 checkpoints, 20,772 syncs, 575
events); wall-clock figures, the run's folder and writer and the spaces' unseeded generators are left out by name.
"""

from tripwire.scenario import Adapter, Checkpoint, EventCall, Iteration, Region, Scenario

UPDATE = "skrl.agents.torch.ppo.ppo:PPO.update"
TIMESTEPS = 2048


def _capped(init):
    def __init__(self, *, cfg=None, **kwargs):
        cfg = dict(cfg or {})
        cfg["timesteps"] = min(int(cfg.get("timesteps", TIMESTEPS)), TIMESTEPS)
        init(self, cfg=cfg, **kwargs)

    return __init__


scenario = Scenario(
    name="skrl-ppo",
    script="examples/gymnasium/torch_gymnasium_pendulum_ppo.py",
    argv=["--headless", "--seed", "42", "--num_envs", "4"],
    regions=[
        Region("skrl.agents.torch.ppo.ppo:PPO.act", "act"),
        Region("skrl.envs.wrappers.torch.gymnasium_envs:GymnasiumWrapper.step", "env"),
        Region(UPDATE, "update"),
    ],
    iteration=Iteration(UPDATE),
    checkpoints=[
        Checkpoint(
            UPDATE,
            capture=("self",),
            # wall-clock figures, the run's folder (named by the time) and its tensorboard writer's thread and
            # file, and gymnasium's spaces' generators, drawn from OS entropy when a space is never seeded (nothing
            # samples from them here)
            exclude=("self.tracking_data.Stats / *", "self.experiment_dir", "self.writer.*", "*._np_random.*"),
        )
    ],
    event_calls=[EventCall("skrl.utils.tensorboard:SummaryWriter.add_scalar", label="tag")],
    exclude=["Stats / *::data.value", "event_id", "timestamp"],  # skrl's timings, in milliseconds
    adapters=[Adapter(wraps={"skrl.trainers.torch.sequential:SequentialTrainer.__init__": _capped})],
)
