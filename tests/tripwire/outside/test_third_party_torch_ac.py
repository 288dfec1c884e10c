"""torch-ac 1.4.0's PPO (rl-starter-files' trainer), installed from PyPI as its users run it, recorded from outside
with `examples/torch_ac/ppo_scenario.py` in a process of its own: torch-ac sets multiprocessing's start method to
`fork` when it is imported, and forks a worker per environment but the first.

What running it found: it steps its environments with `env.step(action.cpu().numpy())` and stores
`self.actions[i] = action` on a later line. On a CPU run `.cpu()` returns `action` itself, and tripwire took every
later copy from it for an upload, once a step, where a GPU run copies between device tensors.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tripwire.outside.compare import compare_results
from tripwire.outside.result import Result

pytest.importorskip("torch_ac", reason="torch-ac is a test dependency (pyproject.toml's test extra)")

EXAMPLES = Path(__file__).parents[3] / "examples" / "torch_ac"
ENVS, FRAMES, UPDATES = 2, 32, 2


def _run(tmp_path: Path) -> Result:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "ppo_run.py").write_text((EXAMPLES / "ppo_run.py").read_text(encoding="utf-8"), encoding="utf-8")
    scenario = tmp_path / "scenario.py"
    scenario.write_text(
        "import dataclasses\n"
        "from tripwire.scenario import load_scenario\n"
        f"base = load_scenario({str(EXAMPLES / 'ppo_scenario.py')!r})\n"
        "scenario = dataclasses.replace(\n"
        f"    base, argv=['--envs', '{ENVS}', '--frames', '{FRAMES}', '--updates', '{UPDATES}']\n"
        ")\n",
        encoding="utf-8",
    )
    out = tmp_path / "result"
    command = [sys.executable, "-m", "tripwire", "run", str(scenario), "--root", str(tree), "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return Result.load(out)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Result:
    return _run(tmp_path_factory.mktemp("torch_ac"))


def _sites(result: Result) -> dict[str, tuple[str, int]]:
    return {site.text: (site.kind, site.count) for site in result.syncs.records if site.file.endswith("base.py")}


def test_the_action_stored_after_its_copy_to_the_host_is_not_an_upload(base: Result) -> None:
    steps = FRAMES * UPDATES
    sites = _sites(base)
    texts = [text for text in sites if text.startswith("obs, reward, terminated, truncated, _ = self.env.step(")]
    assert [sites[text] for text in texts] == [("cpu", steps)]
    assert "self.actions[i] = action" not in sites
    assert sites["self.rewards[i] = torch.tensor(reward, device=self.device)"] == ("tensor_to_device", steps)
    assert base.children == {"multiprocessing": ENVS - 1}


def test_two_runs_compare_identical(base: Result, tmp_path: Path) -> None:
    comparison = compare_results(base, _run(tmp_path))
    assert comparison.ok, comparison.format()
    assert base.trajectory is not None and len(base.trajectory) == UPDATES
