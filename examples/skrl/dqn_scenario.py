"""tripwire on skrl 2.0.0's CartPole DQN example, fetched and left unedited: a loop seeded with `--seed 42` whose
recordings still differ, and the adapter that makes them agree.

Run from a checkout of skrl (https://github.com/Toni-SM/skrl, release 2.0.0), installed in an environment with
torch, gymnasium and tripwire:

    python -m tripwire run examples/skrl/dqn_scenario.py --root path/to/skrl --out results/a
    python -m tripwire run examples/skrl/dqn_scenario.py --root path/to/skrl --out results/b
    python -m tripwire compare results/a results/b

An adapter caps the example's 50,000 timesteps at 800 (700 updates after 100 random steps). `set_seed(42)` seeds
torch, NumPy's global generator and Python's, but the agent explores through `sample_space`, which samples a batch
copy of the action space, and no space is ever seeded: gymnasium makes its generator from OS entropy. Three
recordings in eleven took other random actions from the first update on, and `compare` says `NumPy generators from
OS entropy`, naming the line: `skrl/utils/spaces/torch/spaces.py:398 via gymnasium/vector/utils/spaces.py` where
skrl runs from the checkout, `examples/gymnasium/torch_gymnasium_cartpole_dqn.py:72 via skrl/models/torch/base.py`
(the models' `init_state_dict`) where it is installed.
`seeded` (below) is the same scenario with an adapter seeding the agent's and its models' spaces once the agent is
built: sixteen recordings of it compared identical. Point `tripwire run` at it by a file of your own that imports
it (`from dqn_scenario import seeded as scenario`).
"""

import dataclasses

from tripwire.scenario import Adapter, Checkpoint, EventCall, Region, Scenario

UPDATE = "skrl.agents.torch.dqn.dqn:DQN.update"
TIMESTEPS = 800
SEED = 42


def _capped(init):
    def __init__(self, *, cfg=None, **kwargs):
        cfg = dict(cfg or {})
        cfg["timesteps"] = min(int(cfg.get("timesteps", TIMESTEPS)), TIMESTEPS)
        init(self, cfg=cfg, **kwargs)

    return __init__


def _spaces_seeded(init):
    """The agent built, then every space it and its models hold seeded: what they sample is the seed's."""

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        spaces = [self.observation_space, self.action_space]
        for model in self.models.values():
            spaces += [model.observation_space, model.action_space]
        for space in spaces:
            if space is not None:
                space.seed(SEED)

    return __init__


scenario = Scenario(
    name="skrl-dqn",
    script="examples/gymnasium/torch_gymnasium_cartpole_dqn.py",
    argv=["--headless", "--seed", str(SEED)],
    regions=[Region("skrl.agents.torch.dqn.dqn:DQN.act", "act"), Region(UPDATE, "update")],
    checkpoints=[
        Checkpoint(
            UPDATE,
            capture=("self",),
            every=100,
            # wall-clock figures, the run's folder (named by the time) and its tensorboard writer
            exclude=("self.tracking_data.Stats / *", "self.experiment_dir", "self.writer.*"),
        )
    ],
    event_calls=[EventCall("skrl.utils.tensorboard:SummaryWriter.add_scalar", label="tag")],
    exclude=["Stats / *::data.value", "event_id", "timestamp"],  # skrl's timings, in milliseconds
    adapters=[Adapter(wraps={"skrl.trainers.torch.sequential:SequentialTrainer.__init__": _capped})],
)

seeded = dataclasses.replace(
    scenario,
    name="skrl-dqn-seeded",
    adapters=[*scenario.adapters, Adapter(wraps={"skrl.agents.torch.dqn.dqn:DQN.__init__": _spaces_seeded})],
)
