"""The goldens travel only if no scenario calls a CPU op whose bits differ between Intel and AMD under the pin.

`tripwire.bitwise.vendor_ops.VendorBoundOps` notes such ops (MKL's vector math refining `rcpps`/`rsqrtps`: `sqrt`,
`tan`, `log10`, ... on float CPU tensors) on every thread. Every scenario's run for its goldens runs under it (the
env workers of (h) and the ranks of (e) included; it costs only the ops it lists) and must call none. The second test
injects the hazard that broke scenario (g)'s golden on an AMD EPYC (the observation normalizer dividing by
`torch.sqrt`) and shows the check naming its line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from guardrail_scenarios import SCENARIOS, ScenarioRun, run_scenario

from esper.simic.rewards.normalizers import RunningMeanStd
from tripwire.bitwise.vendor_ops import VendorBoundOps
from tripwire.gates.pytest_plugin import GateLog

pytestmark = pytest.mark.guardrail


NAMES = list(SCENARIOS)


@pytest.mark.parametrize("scenario_run", NAMES, indirect=True, ids=NAMES)
def test_scenario_calls_no_vendor_bound_op(scenario_run: ScenarioRun, gate_log: GateLog) -> None:
    found = scenario_run.vendor_ops
    detail = "; ".join(found) or "no vendor-bound CPU op"
    gate_log.add("portable ops", scenario_run.scenario.name, "FAILED" if found else "passed", detail)
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
