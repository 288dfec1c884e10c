"""--compile: the policy network compiled after its weights load, plain checkpoint keys, resume across settings.

aot_eager and eager run the network's graphs on ATen's own kernels, so a compiled run equals the eager one bitwise:
these tests can then ask for equality, not closeness. Inductor's generated kernels differ in the last bits
(docs/measurements.md); it is exercised once, for its checkpoint keys.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from esper.leyline.options import CompileBackend, CompileMode
from esper.simic.agent.compiled import compile_network
from esper.tamiyo.policy import FactoredRecurrentActorCritic
from run_helpers import TINY_PPO, first_weight_difference, recorded_run
from tripwire.compile.counter import CompileCounter


def policy_weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    state = torch.load(checkpoint, weights_only=True)
    weights: dict[str, torch.Tensor] = state["state"]["client"]["agent"]["policy"]
    return weights


def test_off_is_the_module_itself_and_a_backend_shares_its_parameters() -> None:
    policy = FactoredRecurrentActorCritic(16, 1, hidden_dim=8, lstm_hidden_dim=8)
    assert compile_network(policy, CompileBackend.OFF, CompileMode.DEFAULT) is policy
    compiled = compile_network(policy, CompileBackend.EAGER, CompileMode.DEFAULT)
    assert compiled is not policy
    assert all(a is b for a, b in zip(compiled.parameters(), policy.parameters(), strict=True))  # type: ignore[attr-defined]


def test_the_compiled_network_breaks_only_at_the_stated_lstm_boundary() -> None:
    policy = FactoredRecurrentActorCritic(16, 1, hidden_dim=8, lstm_hidden_dim=8)
    compiled = compile_network(policy, CompileBackend.EAGER, CompileMode.DEFAULT)
    torch._dynamo.reset()
    hidden = policy.initial_hidden(3, "cpu")
    with CompileCounter() as compiles, torch.no_grad():
        eager = policy(torch.randn(3, 16), torch.zeros(3, 1, dtype=torch.long), hidden)
        traced = compiled(torch.randn(3, 16), torch.zeros(3, 1, dtype=torch.long), hidden)
    kinds = compiles.counts_by_kind()
    assert kinds.get("compile:disable") == 1 and "compile:graph_break" not in kinds and "compile:eager" not in kinds
    assert [e.text for e in compiles.events if e.kind == "compile:disable"] == [
        "out, new_hidden = self._recurrent(features.unsqueeze(1) if one_step else features, hidden)"
    ]
    assert eager[1].shape == traced[1].shape == (3,)


@pytest.fixture(scope="module")
def across_settings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two eager rounds straight; and round 0 compiled (aot_eager), resumed for round 1 eager."""
    folder = tmp_path_factory.mktemp("compiled")
    paths = {name: folder / f"{name}.pt" for name in ("straight", "compiled", "resumed")}
    recorded_run({**TINY_PPO, "save_path": str(paths["straight"])})
    torch._dynamo.reset()
    recorded_run({**TINY_PPO, "n_episodes": 1, "compile": "aot_eager", "save_path": str(paths["compiled"])})
    recorded_run({**TINY_PPO, "resume_path": str(paths["compiled"]), "save_path": str(paths["resumed"])})
    return paths


def test_a_compiled_run_checkpoints_the_plain_modules_keys(across_settings: dict[str, Path]) -> None:
    compiled, straight = policy_weights(across_settings["compiled"]), policy_weights(across_settings["straight"])
    assert not [key for key in compiled if "_orig_mod" in key]
    assert compiled.keys() == straight.keys()


def test_a_compiled_round_resumed_eagerly_ends_bitwise_where_the_eager_run_does(
    across_settings: dict[str, Path],
) -> None:
    resumed, straight = policy_weights(across_settings["resumed"]), policy_weights(across_settings["straight"])
    assert first_weight_difference(straight, resumed) is None


def test_an_eager_checkpoint_resumes_compiled(across_settings: dict[str, Path], tmp_path: Path) -> None:
    torch._dynamo.reset()
    out = tmp_path / "compiled_resume.pt"
    config = {**TINY_PPO, "compile": "eager", "save_path": str(out)}
    eager_round = tmp_path / "eager_round.pt"
    recorded_run({**TINY_PPO, "n_episodes": 1, "save_path": str(eager_round)})
    recorded_run({**config, "resume_path": str(eager_round)})
    assert first_weight_difference(policy_weights(across_settings["straight"]), policy_weights(out)) is None
