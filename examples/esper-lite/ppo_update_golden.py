"""esper-lite's own PPO-update golden scenario, taken from each commit's test file where it exists.

`tests/simic/test_ppo_update_golden.py` builds a seeded agent, fills its rollout buffer with one fixed 4-step
episode and runs one PPO update; the original asserts nine metrics within a tolerance (1e-6, later 2e-4, then 5e-4).
This scenario runs the same helpers of the same commit's own test file (never a copy of ours) and lets tripwire
digest everything bitwise instead: the agent's network and optimizer after construction and after the update, the
update's metrics, and the host syncs inside the update. Where the file does not exist the commit is `n/a`.

The test file's helpers changed signature over the history; the two adapters say how, for the commits where each
form is found (K=1, the one form every version has, is what runs).
"""

from __future__ import annotations

from tripwire.scenario import Adapter, Checkpoint, NotApplicable, Region, Scenario, Tree

GOLDEN_TEST = "tests/simic/test_ppo_update_golden.py"


def _source(tree: Tree) -> str:
    return tree.read(GOLDEN_TEST) if tree.has(GOLDEN_TEST) else ""


def ppo_update(tree: Tree) -> None:
    """Build, fill and update exactly as the commit's own golden test does, at K=1."""
    if not tree.has(GOLDEN_TEST):
        raise NotApplicable(f"{GOLDEN_TEST} does not exist at this commit")
    golden = tree.load_module(GOLDEN_TEST)
    agent, slot_config = golden._build_agent(**tree.options.get("build", {}))
    golden._fill_buffer(agent, slot_config, **tree.options.get("fill", {}))
    agent.update(clear_buffer=True)


scenario = Scenario(
    name="esper-lite-ppo-update-golden",
    call=ppo_update,
    paths=["src", "."],
    regions=[Region("esper.simic.agent:PPOAgent.update", "ppo_update")],
    checkpoints=[
        Checkpoint("esper.simic.agent:PPOAgent.__init__", capture=("self.policy.network", "self.optimizer")),
        Checkpoint("esper.simic.agent:PPOAgent.update", capture=("return", "self.policy.network", "self.optimizer")),
    ],
    adapters=[
        # 255f5076 and later: `_build_agent(recurrent_n_epochs: int = 1)`; before that it took no argument
        Adapter(
            when=lambda tree: "def _build_agent(recurrent_n_epochs" in _source(tree),
            options={"build": {"recurrent_n_epochs": 1}},
            note="the agent builder takes the recurrent epoch count",
        ),
        # the first versions filled the buffer with an explicit log-prob offset, which their test passed as 0.1
        Adapter(
            when=lambda tree: "log_prob_offset: float" in _source(tree),
            options={"fill": {"log_prob_offset": 0.1}},
            note="the buffer filler takes a log-prob offset",
        ),
    ],
)
