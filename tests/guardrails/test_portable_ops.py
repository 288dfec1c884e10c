"""The goldens travel only if no scenario calls a CPU op whose bits differ between Intel and AMD under the pin.

`tripwire.bitwise.vendor_ops.VendorBoundOps` notes such ops (MKL's vector math refining `rcpps`/`rsqrtps`: `sqrt`,
`tan`, `log10`, ... on float CPU tensors). Scenario (g) (the PPO trainer with the widest configuration) and (b) (the
seed lifecycle: blending, every blueprint) run under it and must call none. The second test injects the hazard that
broke scenario (g)'s golden on an AMD EPYC (the observation normalizer dividing by `torch.sqrt`) and shows the check
naming its line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from guardrail_scenarios import SCENARIOS, run_scenario

from esper.simic.rewards.normalizers import RunningMeanStd
from tripwire.bitwise.vendor_ops import VendorBoundOps
from tripwire.gates.pytest_plugin import GateLog

pytestmark = pytest.mark.guardrail


@pytest.mark.parametrize("name", ["g_preset_and_flags", "b_lifecycle"])
def test_scenario_calls_no_vendor_bound_op(name: str, tmp_path: Path, gate_log: GateLog) -> None:
    with VendorBoundOps() as seen:
        run_scenario(SCENARIOS[name], tmp_path, probe=False)
    found = seen.lines()
    gate_log.add("portable ops", name, "FAILED" if found else "passed", "; ".join(found) or "no vendor-bound CPU op")
    assert not found, "ops whose CPU bits differ between Intel and AMD (use torch.rsqrt for 1/sqrt):\n" + "\n".join(
        found
    )


def _through_sqrt(self: RunningMeanStd, x: torch.Tensor) -> torch.Tensor:
    """Hazard: the normalizer as first written, dividing by `torch.sqrt` (MKL's vector math on CPU)."""
    return torch.clamp((x - self.mean) / torch.sqrt(self.var + self.epsilon), -self.clip, self.clip)


def test_an_injected_sqrt_is_named_with_its_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RunningMeanStd, "normalize", _through_sqrt)
    with VendorBoundOps() as seen:
        run_scenario(SCENARIOS["a_baseline"], tmp_path, probe=False)
    line = f"{Path(__file__).name}:{_through_sqrt.__code__.co_firstlineno + 2}"  # the division's line
    assert [key for key in seen.calls if key[0] == "aten.sqrt.default" and key[2].endswith(line)], seen.lines()
    assert all(op == "aten.sqrt.default" and dtype == "float32" for op, dtype, _ in seen.calls)
