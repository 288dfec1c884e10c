"""Resume trusts nothing it did not check: the checkpoint scenario (a) saved, each field replaced by a hostile value,
is refused naming that field before any of it is used (a refactor that drops or loosens a check fails here), and the
fields a run may legitimately see differ (another device's Adam kernel) still load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from guardrail_scenarios import ScenarioRun, scenario_config

from esper.simic.training.checkpoint import CheckpointError, CheckpointLayout, load_checkpoint, state_spec
from esper.simic.training.checkpoint_schema import problem
from esper.simic.training.policy_client import HeuristicClient
from esper.simic.training.wiring import build_policy_client
from run_helpers import replaced
from tripwire.gates.pytest_plugin import GateLog

pytestmark = pytest.mark.guardrail

AGENT = ("state", "client", "agent")
GROUP = (*AGENT, "optimizer", "param_groups", 0)
# (field, hostile value, what the refusal must say): one per kind of check.
HOSTILE: list[tuple[tuple[Any, ...], Any, str]] = [
    (("version",), 2, "has format version 2, this trainer reads 1"),
    (("rounds_completed",), "3", "rounds_completed: a str, expected an int"),
    (("rounds_completed",), -1, "rounds_completed: -1, expected at least 0"),
    (("n_envs",), 2**70, "n_envs: 1180591620717411303424, expected an integer below 2**63"),
    (("slot_ids",), "r0c1", "slot_ids: a str, expected a list"),
    (("state", "client"), [], "state.client: a list, expected a dict"),
    ((*AGENT, "update_count"), 1.5, "state.client.agent.update_count: a float, expected an int"),
    ((*AGENT, "policy", "trunk.0.bias"), torch.zeros(3), "trunk.0.bias: a float32 tensor of shape (3,), expected"),
    ((*AGENT, "policy", "trunk.0.bias"), torch.zeros(2, 2).to_sparse(), "trunk.0.bias: a sparse_coo float32 tensor"),
    ((*AGENT, "policy", "trunk.0.bias"), torch.empty(2, device="meta"), "on the meta device"),
    ((*AGENT, "policy", "trunk.0.bias"), 0.5, "trunk.0.bias: a float, expected a dense float32 tensor"),
    ((*AGENT, "optimizer", "state", 1, "exp_avg"), torch.zeros(3, dtype=torch.float64), "state.1.exp_avg: a float64"),
    ((*AGENT, "optimizer", "state", 1, "exp_avg_sq"), None, "state.1.exp_avg_sq: a NoneType, expected a dense"),
    ((*AGENT, "optimizer", "state", 1, "step"), "one", "state.1.step: a str, expected a dense float32 tensor"),
    ((*AGENT, "optimizer", "state", 1, "step"), torch.tensor(-1.0), "state.1.step: holds values below 0"),
    ((*AGENT, "optimizer", "state", 1, "step"), -1, "state.1.step: -1, expected at least 0"),
    ((*AGENT, "policy", "trunk.0.bias"), torch.full((512,), float("nan")), "trunk.0.bias: holds non-finite values"),
    ((*GROUP, "amsgrad"), True, "param_groups[0].amsgrad: differs from this run's False"),
    ((*GROUP, "params"), [0], "param_groups[0].params: differs from this run's [0, 1, 2,"),
    ((*GROUP, "params"), "0", "param_groups[0].params: differs from this run's"),
    ((*GROUP, "betas"), (0.9,), "param_groups[0].betas: 1 items, expected 2"),
    ((*GROUP, "lr"), float("inf"), "param_groups[0].lr: inf, expected a finite number"),
    (("state", "client", "obs_normalizer", "mean"), None, "obs_normalizer.mean: a NoneType"),
    (("state", "client", "reward_normalizer", "m2"), -2.0, "reward_normalizer.m2: -2.0, expected at least 0"),
    (("state", "trainer", "round_accuracies", 0), float("nan"), "round_accuracies[0]: nan, expected a finite number"),
    (("state", "trainer", "events"), 7, "state.trainer.events: an int, expected a str or None"),
    (("state", "data", "classes"), "ten", "state.data.classes: a str, expected an int"),
]


def found(payload: dict[str, Any], spec: Any, layout: CheckpointLayout, folder: Path) -> str | None:
    """What resuming from `payload` (saved to a file) says, or None when it loads."""
    target = folder / "crafted.pt"
    torch.save(payload, target)
    try:
        load_checkpoint(target, layout=layout, state=spec)
    except CheckpointError as error:
        return str(error)
    return None


def test_resume_refuses_every_kind_of_hostile_field_naming_it(
    run_a_baseline: ScenarioRun, resume_checkpoint: Path, gate_log: GateLog, tmp_path: Path
) -> None:
    payload = torch.load(resume_checkpoint, weights_only=True)
    config, controller = scenario_config(run_a_baseline.scenario, resume_checkpoint.parent)
    client = build_policy_client(config, controller, len(payload["slot_ids"]), torch.device("cpu"))
    spec = state_spec(client.state_spec())  # what resuming (d) checks the file against
    layout = CheckpointLayout(payload["n_envs"], tuple(payload["slot_ids"]), payload["task"], controller)
    assert found(payload, spec, layout, tmp_path) is None, "the scenario's own checkpoint must load"
    wrong = []
    for keys, hostile, needle in HOSTILE:
        message = found(replaced(payload, keys, hostile), spec, layout, tmp_path)
        if message is None or needle not in message:
            wrong.append(f"{keys} = {hostile!r}: {message}")
    other_kernel = replaced(replaced(payload, (*GROUP, "fused"), None), (*GROUP, "foreach"), True)
    if (message := found(other_kernel, spec, layout, tmp_path)) is not None:
        wrong.append(f"another device's Adam kernel flags refused: {message}")
    if problem({"policy": 1}, HeuristicClient().state_spec(), "state.client") is None:
        wrong.append("the heuristic client (which saves nothing) accepted a state")
    detail = f"{len(HOSTILE)} hostile fields refused by name" if not wrong else wrong[0]
    gate_log.add("crafted checkpoint", "a_baseline", "passed" if not wrong else "FAILED", detail)
    assert not wrong, "\n".join(wrong)
