"""tripwire.gates.goldens and tripwire.common.context: goldens keyed by determinism context; budgets fail with sites."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import pytest
import torch

from tripwire.bitwise.trajectory import TrajectoryRecorder
from tripwire.common.context import capture_context, context_key, mismatches
from tripwire.common.errors import NoGoldenApplies, SyncBudgetExceeded, TrajectoryDivergence
from tripwire.gates.goldens import GoldenStore
from tripwire.sync import hot_path
from tripwire.sync.counter import SyncCounter


def recorded(value: float, context: dict[str, object]) -> TrajectoryRecorder:
    recorder = TrajectoryRecorder(context=context)
    recorder.record("r0/e1/env0/train", {"w": torch.full((3,), value)})
    return recorder


def syncs(n: int) -> SyncCounter:
    values = torch.arange(float(n))
    with SyncCounter() as counter, hot_path("epoch_transfer"):
        for index in range(n):
            values[index].item()
    return counter


def test_context_records_what_bitwise_results_depend_on() -> None:
    context = capture_context("cpu")
    assert context["torch"] == torch.__version__ and context["device"] == "cpu"
    assert context["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert context["threads"] == torch.get_num_threads()
    assert "deterministic_algorithms" in context


def test_context_key_changes_with_any_setting() -> None:
    context = capture_context("cpu")
    assert context_key(context) != context_key({**context, "threads": context["threads"] + 1})
    assert mismatches(context, {**context, "threads": 99}) == [
        f"threads: {context['threads']!r} -> 99 (another thread count splits reductions differently)"
    ]


def test_context_names_the_torch_build_its_libraries_and_the_pin() -> None:
    context = capture_context("cpu")
    expected_build = f"cuda {torch.version.cuda}" if torch.version.cuda else "cpu"
    assert context["torch_build"] == (f"rocm {torch.version.hip}" if torch.version.hip else expected_build)
    assert context["onednn"]  # torch's CPU convolutions, on every architecture
    assert bool(context["mkl"]) == (platform.machine() in ("x86_64", "AMD64"))  # MKL ships in x86-64 wheels only
    pinned = os.environ.get("ATEN_CPU_CAPABILITY") == "avx2" and os.environ.get("MKL_CBWR") == "COMPATIBLE,STRICT"
    assert context["cpu_pin"] == ("avx2" if pinned else "native")
    [line] = mismatches({**context, "cpu_pin": "native"}, {**context, "cpu_pin": "avx2"})
    assert line.startswith("cpu_pin: 'native' -> 'avx2' (the portable pin changes CPU kernels from the first op")


def test_updated_trajectory_golden_then_passes(tmp_path: Path) -> None:
    context = capture_context("cpu")
    GoldenStore(tmp_path, update=True).check_trajectory("s", recorded(1.0, context).trajectory)
    outcome = GoldenStore(tmp_path).check_trajectory("s", recorded(1.0, context).trajectory)
    assert outcome.status == "passed"


def test_changed_value_under_the_same_context_fails(tmp_path: Path) -> None:
    context = capture_context("cpu")
    GoldenStore(tmp_path, update=True).check_trajectory("s", recorded(1.0, context).trajectory)
    with pytest.raises(TrajectoryDivergence, match="'r0/e1/env0/train'"):
        GoldenStore(tmp_path).check_trajectory("s", recorded(2.0, context).trajectory)


# A capability no x86-64 or ARM machine reports, so "the other machine" differs from this one wherever it runs.
OTHER_CAPABILITY = "SVE2048"


def test_other_context_skips_and_names_the_differing_setting(tmp_path: Path) -> None:
    context = capture_context("cpu")
    GoldenStore(tmp_path, update=True).check_trajectory("s", recorded(1.0, context).trajectory)
    other = {**context, "cpu_capability": OTHER_CAPABILITY}
    outcome = GoldenStore(tmp_path).check_trajectory("s", recorded(2.0, other).trajectory)
    assert outcome.status == "skipped"
    assert f"cpu_capability: {context['cpu_capability']!r} -> {OTHER_CAPABILITY!r}" in outcome.detail


def test_a_golden_from_another_python_release_does_not_apply(tmp_path: Path) -> None:
    """Python 3.12's `sum()` of floats compensates its rounding, so a loop's float arithmetic in Python, a reward
    summed from its terms, differs from 3.11's in its last bits: without `python` in the context, 3.11's goldens
    applied on 3.12 and failed there as divergences."""
    context = capture_context("cpu")
    assert context["python"] == f"{sys.version_info.major}.{sys.version_info.minor}"  # a patch release keeps the bits
    assert sum([0.1] * 10) == (1.0 if sys.version_info >= (3, 12) else 0.9999999999999999)  # why it is there
    GoldenStore(tmp_path, update=True).check_trajectory("s", recorded(1.0, context).trajectory)
    other = {**context, "python": "3.99"}
    outcome = GoldenStore(tmp_path).check_trajectory("s", recorded(2.0, other).trajectory)
    assert outcome.status == "skipped", outcome.detail
    assert f"python: {context['python']!r} -> '3.99' (another Python release computes some float" in outcome.detail


def test_a_required_golden_that_does_not_apply_fails_in_one_line(tmp_path: Path) -> None:
    context = capture_context("cpu")
    GoldenStore(tmp_path, update=True).check_trajectory("s", recorded(1.0, context).trajectory)
    other = {**context, "cpu_capability": OTHER_CAPABILITY}
    with pytest.raises(NoGoldenApplies) as failure:
        GoldenStore(tmp_path, require=True).check_trajectory("s", recorded(2.0, other).trajectory)
    message = str(failure.value)
    assert "\n" not in message and "cpu_capability" in message and "--against" in message


def test_a_required_golden_that_applies_still_compares(tmp_path: Path) -> None:
    context = capture_context("cpu")
    GoldenStore(tmp_path, update=True).check_trajectory("s", recorded(1.0, context).trajectory)
    store = GoldenStore(tmp_path, require=True)
    assert store.check_trajectory("s", recorded(1.0, context).trajectory).status == "passed"
    with pytest.raises(TrajectoryDivergence):
        store.check_trajectory("s", recorded(2.0, context).trajectory)


def test_no_golden_at_all_skips_with_the_update_command(tmp_path: Path) -> None:
    outcome = GoldenStore(tmp_path).check_trajectory("s", recorded(1.0, capture_context()).trajectory)
    assert outcome.status == "skipped" and "nox -s baselines" in outcome.detail


def test_missing_budget_file_fails(tmp_path: Path) -> None:
    with pytest.raises(SyncBudgetExceeded, match=r"a\.json: sync budget file does not exist"):
        GoldenStore(tmp_path).check_sync_budget("a", syncs(1), {})


def test_over_budget_names_region_and_new_call_site(tmp_path: Path) -> None:
    GoldenStore(tmp_path, update=True).check_sync_budget("a", syncs(0), {}, regions=("epoch_transfer",))
    with pytest.raises(SyncBudgetExceeded) as failure:
        GoldenStore(tmp_path).check_sync_budget("a", syncs(3), {})
    message = str(failure.value)
    assert "region 'epoch_transfer': 3 syncs, budget 0 (+3)" in message
    assert "NEW tests/tripwire/gates/test_goldens.py:" in message and "in syncs  ×3  [item×3]" in message


def test_under_budget_passes_and_says_it_can_be_tightened(tmp_path: Path) -> None:
    GoldenStore(tmp_path, update=True).check_sync_budget("a", syncs(3), {})
    store = GoldenStore(tmp_path)
    outcome = store.check_sync_budget("a", syncs(1), {})
    assert outcome.status == "passed"
    assert "budget can be tightened for region 'epoch_transfer' from 3 to 1" in outcome.detail
    assert store.notes and "tightened" in store.notes[0]


def test_against_a_base_recorded_here_a_divergence_says_how_big(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRIPWIRE_KEEP_VALUES", "1")  # what `nox -s guardrails -- --against REF` sets for both sides
    context = capture_context("cpu")
    base = recorded(1.0, context)
    GoldenStore(tmp_path, update=True).check_trajectory("s", base.trajectory)
    assert sorted(path.name for path in (tmp_path / "trajectories" / "s").iterdir())[-1].endswith(".values.pt")
    nudged = torch.nextafter(torch.tensor(1.0), torch.tensor(2.0)).item()  # one float up
    with pytest.raises(TrajectoryDivergence) as caught:
        GoldenStore(tmp_path).check_trajectory("s", recorded(nudged, context).trajectory)
    message = str(caught.value)
    assert "magnitude: low-bit drift: max |Δ| 1.19e-07 = 1 ULP (1 of its scale) in w\n" in message


def test_committed_goldens_keep_no_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRIPWIRE_KEEP_VALUES", raising=False)
    GoldenStore(tmp_path, update=True).check_trajectory("s", recorded(1.0, capture_context("cpu")).trajectory)
    assert [path.suffix for path in (tmp_path / "trajectories" / "s").iterdir()] == [".json"]
