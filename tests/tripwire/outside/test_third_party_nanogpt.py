"""nanoGPT's `train.py` as published (tests/tripwire/third_party/nanogpt), recorded from outside with the scenario
docs/tripwire.md documents (`examples/nanogpt/train_scenario.py`): a training loop that is not RL.

Each test copies the checkout, writes its own text as the data set's `input.txt` (nanoGPT's `prepare.py` downloads
only when it is missing), runs `prepare.py` to write the memory-mapped token files and the vocabulary as nanoGPT
does, then records. The scenario names `torch.serialization:save`, which the loop calls as `torch.save`: before a
function was bound under every name a module holds it by, that event never fired and the run was an `error`."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tripwire.outside.compare import compare_results
from tripwire.outside.record import record
from tripwire.outside.result import Result
from tripwire.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[3]
SCENARIO = load_scenario(ROOT / "examples" / "nanogpt" / "train_scenario.py")
PUBLISHED = ROOT / "tests" / "tripwire" / "third_party" / "nanogpt"
WORDS = ("the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not")


def checkout(folder: Path, change: tuple[str, str, str] | None = None) -> Path:
    """A copy of nanoGPT with its data prepared, and one change (file, text, replacement) applied."""
    shutil.copytree(PUBLISHED, folder)
    if change is not None:
        path = folder / change[0]
        text = path.read_text(encoding="utf-8")
        assert change[1] in text, change
        path.write_text(text.replace(change[1], change[2]), encoding="utf-8")
    draw = random.Random(0)
    lines = [" ".join(draw.choice(WORDS) for _ in range(draw.randint(4, 12))).capitalize() + "." for _ in range(2000)]
    data = folder / "data" / "shakespeare_char"
    (data / "input.txt").write_text("\n".join(lines), encoding="utf-8")
    subprocess.run([sys.executable, "prepare.py"], cwd=data, check=True, capture_output=True, timeout=120)
    return folder


def run(folder: Path) -> Result:
    result = record(SCENARIO, folder)
    assert result.status == "ok", result.cause
    return result


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Result:
    return run(checkout(tmp_path_factory.mktemp("base") / "nanogpt"))


def test_nanogpt_records_with_every_instrument_firing_and_twice_identical(base: Result, tmp_path: Path) -> None:
    assert base.trajectory is not None and len(base.trajectory) == 14  # 11 AdamW steps, 3 evaluations
    assert base.calls["torch.serialization:save"] == 2  # called as `torch.save`
    regions = base.syncs.counts_by_region() if base.syncs is not None else {}
    assert regions["forward"] == 0 and regions["eval"] == 24  # the evaluation reads each loss: 3 x 2 splits x 4
    # the batch loader indexes its memory-mapped tokens with `i` and `i + block_size`, a row of a host tensor of
    # indices and an operator's result of it: host memory on a GPU run too, read without a wait (564 counted before)
    loader = [site for site in base.syncs.records if site.region == "data"] if base.syncs is not None else []
    assert loader and {site.kind for site in loader} == {"to_device"}, [(site.kind, site.text) for site in loader]
    # on a CPU nanoGPT picks float16 and `torch.cuda.amp.GradScaler(enabled=True)`, which disables itself there: each
    # of the 11 steps counts the found-inf read a float16 GPU run makes in `scaler.step` (`tripwire.sync.scalers`)
    records = base.syncs.records if base.syncs is not None else []
    steps = [(site.kind, site.count) for site in records if site.text == "scaler.step(optimizer)"]
    assert steps == [("item", 11)], steps
    assert compare_results(base, run(checkout(tmp_path / "again"))).ok


def test_a_changed_beta2_is_a_value_change_that_names_the_setting(base: Result, tmp_path: Path) -> None:
    changed = run(checkout(tmp_path / "beta2", ("config/train_shakespeare_char.py", "beta2 = 0.99", "beta2 = 0.98")))
    verdict = compare_results(base, changed).verdict("trajectory")
    assert verdict.kind == "value change", verdict.details
    betas = "plain values that differ: self.state_dict.param_groups.0.betas [0.9, 0.99] -> [0.9, 0.98]"
    assert any(line.strip().startswith(betas) for line in verdict.details), verdict.details


def test_an_item_in_the_forward_pass_is_named_at_its_line(base: Result, tmp_path: Path) -> None:
    injected = ("model.py", "        x = self.transformer.ln_f(x)\n", "        x = self.transformer.ln_f(x)\n"
                "        seen = x.abs().max().item()\n")  # fmt: skip
    changed = run(checkout(tmp_path / "item", injected))
    comparison = compare_results(base, changed)
    assert comparison.verdict("trajectory").status == "same"
    assert comparison.verdict("syncs").summary.startswith("+46 syncs; NEW   'forward' model.py:183 in GPT.forward  ×46")
